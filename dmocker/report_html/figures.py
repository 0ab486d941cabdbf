"""The report's figures, one function per section, each returning an inline ``<svg>`` string.

Why functions of :class:`~dmocker.replay.timeseries.TimeSeries` only: the page layout
(:mod:`.page`) decides which sections exist from what was recorded; these just draw.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dmocker.plotting import new_figure, svg_text
from dmocker.replay.timeseries import CDF_POINTS, Series, TimeSeries

__all__ = ["cdf_svg", "throughput_svg", "series_svg", "failures_svg", "failure_totals_svg"]

_LEGEND_MAX = 16  # more lines than this: no per-line legend, a min/mean/max band instead


def matplotlib_colormap(name: str) -> Any:
    from matplotlib import colormaps

    return colormaps[name]


def cdf_svg(ts: TimeSeries) -> str:
    """CDFs of TTFT, ITL and E2E latency (ms, log scale)."""
    fig, axes = new_figure(10.5, 3.2, 1, 3)
    frac = np.linspace(0.0, 1.0, CDF_POINTS)
    for ax, (key, title) in zip(axes, (("ttft", "TTFT"), ("itl", "ITL (per token gap)"), ("e2e", "E2E latency"))):
        q = ts.cdfs.get(key, np.zeros(0))
        if q.shape[0]:
            ax.plot(q, frac, color="#1f6feb", linewidth=1.6)
            if float(q.min()) > 0 and float(q.max()) / float(q.min()) > 20.0:
                ax.set_xscale("log")
            for p, style in ((0.5, ":"), (0.99, "--")):
                ax.axhline(p, color="#888888", linestyle=style, linewidth=0.8)
        else:
            ax.text(0.5, 0.5, "no samples", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(title)
        ax.set_xlabel(f"{title.split(' (')[0]} (ms)")
        ax.set_ylabel("fraction of requests" if key != "itl" else "fraction of token gaps")
        ax.set_ylim(0.0, 1.0)
        ax.grid(True, alpha=0.3)
    return svg_text(fig)


_RATE_BINS = 120  # throughput is shown in at most this many bins (rates averaged over merged buckets)


def throughput_svg(ts: TimeSeries) -> str:
    """Completed requests per second and requests in flight over time."""
    fig, (top, bottom) = new_figure(10.5, 4.8, 2, 1)
    rate = ts.completions_per_s
    k = max(1, -(-rate.shape[0] // _RATE_BINS))
    if k > 1:
        pad = (-rate.shape[0]) % k
        rate = np.concatenate([rate, np.zeros(pad)]).reshape(-1, k).mean(axis=1)
    t = np.arange(rate.shape[0], dtype=np.float64) * (k * ts.bucket_ms / 1000.0)
    top.step(t, rate, where="post", color="#1f6feb", linewidth=1.2)
    top.set_ylabel("completed (req/s)")
    top.set_title(f"Request throughput ({k * ts.bucket_ms / 1000.0:g} s bins)")
    top.grid(True, alpha=0.3)
    inflight = ts.series.get("in_flight")
    if inflight is not None and inflight.values.shape[0]:
        ti = ts.times_s(inflight.values.shape[0])
        bottom.step(ti, inflight.values[:, 0], where="post", color="#d9480f", linewidth=1.2)
    bottom.set_ylabel("requests in flight")
    bottom.set_xlabel("virtual time (s)")
    bottom.grid(True, alpha=0.3)
    return svg_text(fig)


def series_svg(ts: TimeSeries, s: Series, *, title: str, ylabel: str, percent: bool = False) -> str:
    """One gauge or counter series over time, a line per label (or a band when many)."""
    fig, ax = new_figure(10.5, 3.4)
    values = s.values * (100.0 if percent else 1.0)
    t = ts.times_s(values.shape[0])
    if values.shape[1] <= _LEGEND_MAX:
        # more lines than the default 10-colour cycle: 20 distinct colours, none repeated
        cmap = matplotlib_colormap("tab20") if values.shape[1] > 10 else None
        for col, label in enumerate(s.labels):
            color = cmap(col) if cmap is not None else None
            ax.step(t, values[:, col], where="post", linewidth=1.1, label=label, color=color)
        if s.labels:
            ax.legend(loc="upper right", fontsize=7, ncol=min(4, len(s.labels)))
    else:
        with np.errstate(all="ignore"):
            lo = np.nanmin(values, axis=1)
            hi = np.nanmax(values, axis=1)
            mean = np.nanmean(values, axis=1)
        ax.fill_between(t, lo, hi, step="post", alpha=0.25, color="#1f6feb", label=f"min-max of {values.shape[1]}")
        ax.step(t, mean, where="post", color="#1f6feb", linewidth=1.2, label="mean")
        ax.legend(loc="upper right", fontsize=7)
    ax.set_title(title)
    ax.set_xlabel("virtual time (s)")
    ax.set_ylabel(ylabel + (" (%)" if percent else ""))
    ax.grid(True, alpha=0.3)
    return svg_text(fig)


def failures_svg(ts: TimeSeries, s: Series) -> str:
    """Failures per bucket, stacked by cause."""
    fig, ax = new_figure(10.5, 3.4)
    t = ts.times_s(s.values.shape[0])
    width = ts.bucket_ms / 1000.0
    bottom = np.zeros(s.values.shape[0])
    for col, label in enumerate(s.labels):
        ax.bar(t, s.values[:, col], width=width, bottom=bottom, align="edge", label=label)
        bottom = bottom + s.values[:, col]
    if s.labels:
        ax.legend(loc="upper right", fontsize=7)
    ax.set_title("Failures by cause")
    ax.set_xlabel("virtual time (s)")
    ax.set_ylabel(f"failures per {width:g} s")
    ax.grid(True, alpha=0.3)
    return svg_text(fig)


def totals(s: Series) -> Sequence[tuple[str, float]]:
    """Per-label totals of a counter series (for the failures table)."""
    sums = s.values.sum(axis=0) if s.values.shape[0] else np.zeros(len(s.labels))
    return [(label, float(sums[i])) for i, label in enumerate(s.labels)]


def failure_totals_svg(totals_by_cause: Sequence[tuple[str, float]]) -> str:
    """Failed, canceled and rejected requests of the whole run, one bar per cause."""
    fig, ax = new_figure(10.5, 0.6 + 0.45 * max(len(totals_by_cause), 1))
    labels = [label for label, _ in totals_by_cause]
    counts = [count for _, count in totals_by_cause]
    ax.barh(range(len(labels)), counts, color="#d9480f")
    ax.set_yticks(range(len(labels)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("requests")
    ax.set_title("Failures by cause (whole run)")
    ax.grid(True, axis="x", alpha=0.3)
    return svg_text(fig)
