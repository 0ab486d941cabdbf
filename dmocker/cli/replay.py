"""``dmocker replay [TRACE]``: replay a Mooncake trace or a synthetic workload, print a summary.

With no arguments it runs the built-in default (a small generated workload on 2 prefill +
2 decode vLLM workers) and prints the summary table.  ``--config FILE`` reads the whole
configuration from a TOML or JSON file (docs/config.md; a report's ``config`` section, or a
whole report, reruns the same replay); flags given with it override the file's values.

Exit codes: 0 the replay finished with every end-of-run invariant holding; 1 an invariant broke
(the report is still written, marked failed, and what broke is printed), a user coordinator
broke the protocol, or the replay stopped on a dead end or an internal error; 2 bad input
(trace lines, arguments, a configuration file, an unloadable --coordinator) -- nothing is written then.  ``--out``, ``--per-request``
and ``--events`` are written atomically (temp file + rename).
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Sequence

from dmocker.handoff import HandoffError
from dmocker.replay.api import run as replay_run
from dmocker.replay.config import ConfigError, headline
from dmocker.replay.errors import DeadEndError, PlannerError, ReplayInvariantError
from dmocker.replay.report import JsonValue, Report
from dmocker.replay.workload import WorkloadError

from .config_flags import add_config_flags, config_from_args
from .io import VerbRegistry, check_out_dir

__all__ = ["add_parser", "configure", "run", "main", "render_summary", "report_invariants"]


def add_parser(subparsers: VerbRegistry) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="replay a trace (or a synthetic workload) on mock prefill/decode pools",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    configure(parser)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", nargs="?", metavar="TRACE", help="Mooncake JSONL trace")
    parser.add_argument("--config", metavar="CONFIG",
                        help="the configuration, a TOML or JSON file (docs/config.md; a report written by --out "
                             "works too); flags given override its values")
    add_config_flags(parser)
    f = parser.add_argument_group("fuzz scenarios")
    f.add_argument("--scenario", metavar="SCENARIO_JSON", help="re-run a scenario saved by dmocker fuzz exactly")
    o = parser.add_argument_group("output")
    o.add_argument("--out", metavar="REPORT_JSON", help="write {summary, config} here")
    o.add_argument("--per-request", metavar="RECORDS_JSONL", help="write one record per request here")
    o.add_argument("--events", metavar="EVENTS_JSONL", help="write the handoff event log here")
    o.add_argument("--html", metavar="REPORT_HTML", help="write a self-contained HTML report with plots here (needs dmocker[plot])")
    o.add_argument("--quiet", action="store_true", help="no progress bar, no summary table")
    parser.set_defaults(func=run)


_TABLE = (
    ("requests (completed / total)", None),
    ("handoff_order", "handoff_order"),
    ("duration_ms", "duration_ms"),
    ("request_throughput_rps", "request_throughput_rps"),
    ("output_throughput_tok_s", "output_throughput_tok_s"),
    ("mean_ttft_ms", "mean_ttft_ms"),
    ("p99_ttft_ms", "p99_ttft_ms"),
    ("mean_itl_ms", "mean_itl_ms"),
    ("p99_itl_ms", "p99_itl_ms"),
    ("mean_e2e_latency_ms", "mean_e2e_latency_ms"),
    ("p99_e2e_latency_ms", "p99_e2e_latency_ms"),
    ("prefix_cache_reused_ratio", "prefix_cache_reused_ratio"),
    ("rejected / failed / canceled / incomplete", None),
)


def _fmt(value: JsonValue) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}" if math.isfinite(value) else str(value)
    return str(value)


def render_summary(report: Report) -> str:
    """The human summary table printed on stdout (first line: engine, pools, workload)."""
    s = report.summary
    rows: list[tuple[str, str]] = []
    for label, key in _TABLE:
        if key is not None:
            rows.append((label, _fmt(s.get(key))))
        elif label.startswith("requests"):
            rows.append((label, f"{s['completed_requests']} / {s['num_requests']}"))
        else:
            rows.append((label, " / ".join(str(s[k]) for k in (
                "rejected_requests", "failed_requests", "canceled_requests", "incomplete_requests"))))
    injected = s.get("faults_injected")
    if isinstance(injected, dict) and any(injected.values()):
        rows.append(("faults injected", ", ".join(f"{k} {v}" for k, v in sorted(injected.items()) if v)))
        causes = s.get("failures_by_cause")
        if isinstance(causes, dict):
            rows.append(("failures by cause", ", ".join(f"{k} {v}" for k, v in sorted(causes.items()) if v) or "-"))
    timers = s.get("worker_timers")
    if isinstance(timers, dict):  # present only when a worker's own timer fired
        # the counts, not the settings beside them (named after their flags: kv_*, disaggregation_*)
        fired = [f"{k} {v}" for k, v in timers.items() if isinstance(v, int) and not isinstance(v, bool) and v
                 and not k.startswith(("kv_", "disaggregation_"))]
        fired.append(f"stranded_block_seconds {_fmt(timers.get('stranded_block_seconds', 0.0))}")
        rows.append(("worker timers", ", ".join(fired)))
    if s.get("leaked_kv_blocks"):
        rows.append(("leaked_kv_blocks", _fmt(s["leaked_kv_blocks"])))
    if "goodput_completed_requests" in s:
        rows.append(("goodput_completed_requests", _fmt(s["goodput_completed_requests"])))
        rows.append(("goodput_request_throughput_rps", _fmt(s["goodput_request_throughput_rps"])))
    head = f"dmocker replay: {headline(report.config)}"
    width = max(len(k) for k, _ in rows)
    lines = [head, "-" * len(head)]
    lines += [f"{k.ljust(width)}  {v}" for k, v in rows]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace) -> int:
    if args.scenario is not None:
        from dmocker.cli.fuzz import replay_scenario

        return replay_scenario(args)
    for flag, path in (("--out", args.out), ("--per-request", args.per_request), ("--events", args.events),
                       ("--html", args.html)):
        problem = check_out_dir(flag, path)
        if problem:
            print(f"dmocker replay: error: {problem}", file=sys.stderr)
            return 2
    if args.html is not None:
        from dmocker.plotting import PlotUnavailable, require

        try:
            require()
        except PlotUnavailable as exc:
            print(f"dmocker replay: error: --html: {exc}", file=sys.stderr)
            return 2
    progress = not args.quiet and sys.stderr.isatty()
    try:
        config = config_from_args(args, {"timeseries": True} if args.html is not None else None)
        report = replay_run(config, progress=progress)
    except (DeadEndError, ReplayInvariantError, HandoffError, PlannerError) as exc:
        print(f"dmocker replay: failed: {exc}", file=sys.stderr)
        return 1
    except (ConfigError, WorkloadError, ValueError, OSError) as exc:
        print(f"dmocker replay: error: {exc}", file=sys.stderr)
        return 2
    if args.out is not None:
        report.write(args.out)
    if args.html is not None:
        from dmocker._atomic import write_atomic
        from dmocker.report_html import render_html

        write_atomic(args.html, render_html(report))
    if not args.quiet:
        sys.stdout.write(render_summary(report))
    return report_invariants("dmocker replay", report)


def report_invariants(prog: str, report: Report) -> int:
    """Exit status of a finished run: 1 (and what broke, on stderr) when an end-of-run invariant failed."""
    if report.summary.get("invariants_ok", True):
        return 0
    breaks = report.summary.get("invariant_breaks")
    for b in breaks if isinstance(breaks, list) else []:
        if isinstance(b, dict):
            ids = b.get("request_ids")
            shown = f" (requests {', '.join(str(i) for i in ids)})" if isinstance(ids, list) and ids else ""
            print(f"{prog}: invariant broken: {b.get('invariant')}: {b.get('message')}{shown}", file=sys.stderr)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry (``python -m dmocker.cli.replay``), same as ``dmocker replay``."""
    parser = argparse.ArgumentParser(prog="dmocker replay", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
