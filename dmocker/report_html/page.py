"""One self-contained HTML page for one replay: summary, configuration, figures.

Self-contained means the file is the whole report: inline CSS, figures as inline SVG, no
scripts, no links to fetch -- it opens offline and can be mailed or archived as is.  Sections
for series a replay did not record (worker counts without a planner, failures without faults)
are left out rather than drawn empty.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterator

from dmocker.replay.config import headline as config_headline
from dmocker.replay.report import JsonValue, Report
from dmocker.replay.timeseries import KNOWN_SERIES, TimeSeries

from . import figures

__all__ = ["render_html", "REPORT_SECTIONS"]

#: Section ids in page order (a section is present only when its data is).
REPORT_SECTIONS = ("summary", "latency", "throughput", "queues", "kv", "workers", "failures", "other", "config")

_HEADLINE = (
    "num_requests", "completed_requests", "duration_ms", "request_throughput_rps", "output_throughput_tok_s",
    "mean_ttft_ms", "p99_ttft_ms", "mean_itl_ms", "p99_itl_ms", "mean_e2e_latency_ms", "p99_e2e_latency_ms",
    "prefix_cache_reused_ratio", "goodput_request_throughput_rps", "rejected_requests", "failed_requests",
    "canceled_requests", "incomplete_requests",
)

_CSS = """
body{font-family:-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:24px auto;max-width:1100px;
color:#1d2228;padding:0 16px}
h1{font-size:22px;margin-bottom:4px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #d0d7de;
padding-bottom:4px}.sub{color:#57606a;margin-top:0}
table{border-collapse:collapse;font-size:13px}td,th{padding:3px 10px;border-bottom:1px solid #eaeef2;
text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}
summary{cursor:pointer;color:#57606a;margin:8px 0}.cols{display:flex;gap:32px;flex-wrap:wrap}figure{margin:8px 0}svg{max-width:100%;height:auto}
""".strip()


def _fmt(value: JsonValue) -> str:
    if isinstance(value, bool) or value is None:
        return str(value).lower() if isinstance(value, bool) else "-"
    if isinstance(value, float):
        return f"{value:,.3f}" if math.isfinite(value) else str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _flatten(prefix: str, value: JsonValue) -> Iterator[tuple[str, JsonValue]]:
    if isinstance(value, dict):
        for k in sorted(value):
            yield from _flatten(f"{prefix}.{k}" if prefix else k, value[k])
    else:
        yield prefix, value


def _table(items: list[tuple[str, JsonValue]]) -> str:
    rows = "".join(
        f"<tr><th>{html.escape(k)}</th><td class=\"{'n' if isinstance(v, (int, float)) else ''}\">"
        f"{html.escape(_fmt(v))}</td></tr>"
        for k, v in items
    )
    return f"<table>{rows}</table>"


def _section(sid: str, title: str, body: str) -> str:
    return f'<section id="{sid}"><h2>{html.escape(title)}</h2>{body}</section>'


def _figure(svg: str) -> str:
    return f"<figure>{svg}</figure>"


def render_html(report: Report) -> str:
    """The page for ``report`` (needs ``report.timeseries``: the configuration's ``outputs.timeseries``)."""
    ts = report.timeseries
    if ts is None:
        raise ValueError("this replay was run without time series (set outputs.timeseries in its configuration)")
    cfg = report.config
    s = report.summary
    head = (f"{config_headline(cfg)}: "
            f"{s.get('completed_requests')} / {s.get('num_requests')} requests completed in "
            f"{_fmt(s.get('duration_ms'))} ms of virtual time")
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>dmocker replay report</title>",
        f"<style>{_CSS}</style></head><body>",
        "<h1>dmocker replay report</h1>",
        f'<p class="sub">{html.escape(head)}</p>',
    ]
    keys = sorted(s)
    half = (len(keys) + 1) // 2
    headline = _table([(k, s[k]) for k in _HEADLINE if k in s])
    full = ('<details><summary>every summary field</summary><div class="cols">'
            + _table([(k, s[k]) for k in keys[:half]])
            + _table([(k, s[k]) for k in keys[half:]]) + "</div></details>")
    parts.append(_section("summary", "Summary", headline + full))
    parts.append(_section("latency", "Latency distributions", _figure(figures.cdf_svg(ts))))
    parts.append(_section("throughput", "Throughput and requests in flight", _figure(figures.throughput_svg(ts))))
    parts.extend(_series_sections(ts, s))
    parts.append(_section("config", "Configuration", "<details><summary>what was run</summary>"
                          + _table(list(_flatten("", cfg))) + "</details>"))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _cause_totals(summary: dict[str, JsonValue]) -> list[tuple[str, float]]:
    """The summary's ``failures_by_cause`` (written when faults exist), if any count is non-zero."""
    causes = summary.get("failures_by_cause")
    if not isinstance(causes, dict):
        return []
    totals = [(k, float(v)) for k, v in sorted(causes.items()) if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return totals if any(v > 0 for _, v in totals) else []


def _series_sections(ts: TimeSeries, summary: dict[str, JsonValue]) -> Iterator[str]:
    series = ts.series
    q = series.get("queue_depth")
    if q is not None:
        title, ylabel = KNOWN_SERIES["queue_depth"]
        yield _section("queues", title, _figure(figures.series_svg(ts, q, title=title, ylabel=ylabel)))
    kv = series.get("kv_usage")
    if kv is not None:
        title, _ = KNOWN_SERIES["kv_usage"]
        yield _section("kv", title, _figure(figures.series_svg(ts, kv, title=title, ylabel="KV blocks in use", percent=True)))
    w = series.get("workers")
    if w is not None:
        title, ylabel = KNOWN_SERIES["workers"]
        yield _section("workers", title, _figure(figures.series_svg(ts, w, title=title, ylabel=ylabel)))
    # Failures: over time when a "failures" counter was recorded, totals from the summary.
    f = series.get("failures")
    totals = _cause_totals(summary)
    if f is not None or totals:
        body = ""
        if f is not None:
            body += _figure(figures.failures_svg(ts, f))
        if totals:
            body += _figure(figures.failure_totals_svg(totals))
        elif f is not None:
            body += _table([(label, total) for label, total in figures.totals(f)])
        yield _section("failures", KNOWN_SERIES["failures"][0], body)
    others = [name for name in series if name not in KNOWN_SERIES]
    if others:
        body = "".join(
            _figure(figures.series_svg(ts, series[name], title=name.replace("_", " "), ylabel=name))
            for name in others
        )
        yield _section("other", "Other series", body)
