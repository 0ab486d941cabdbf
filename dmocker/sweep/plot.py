"""The sweep's picture: the Pareto frontier of its configurations (matplotlib, PNG or SVG).

Without ``--max-rate``: goodput per GPU against p99 TTFT -- a configuration is on the frontier
when no other one has both a lower (or equal) p99 TTFT and a higher (or equal) goodput per GPU.
With ``--max-rate``: capacity against GPU count -- on the frontier when no configuration with
as few GPUs holds a higher load.  The cheapest configuration meeting the SLA is starred.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from dmocker.plotting import PLOT_EXTENSIONS, figure_bytes, new_figure

from .rank import Row, cheapest

__all__ = ["pareto", "plot_frontier", "PLOT_EXTENSIONS"]


def pareto(points: Sequence[tuple[float, float]], *, lower_x: bool = True) -> list[int]:
    """Indices of the non-dominated points (minimise x if ``lower_x``, maximise y), by x."""
    sign = 1.0 if lower_x else -1.0
    order = sorted(range(len(points)), key=lambda i: (sign * points[i][0], -points[i][1], i))
    front: list[int] = []
    best_y = float("-inf")
    for i in order:
        if points[i][1] > best_y:
            front.append(i)
            best_y = points[i][1]
    return front


def plot_frontier(
    rows: Sequence[Row],
    path: str | os.PathLike[str],
    *,
    max_rate: bool,
    variable: str = "rate",
    sla_ttft_ms: float | None = None,
) -> bytes:
    """Draw the frontier and return the image bytes (the caller writes them atomically).

    ``sla_ttft_ms`` draws the TTFT bound as a vertical line on the goodput picture.
    """
    fmt = os.path.splitext(os.fspath(path))[1].lower().lstrip(".")
    ok = [r for r in rows if r.ok]
    mark = cheapest(rows)
    fig, ax = new_figure(7.5, 4.8)
    if max_rate:
        pts_rows = [r for r in ok if r.capacity is not None]
        pts = [(float(r.gpus), float(r.capacity or 0.0)) for r in pts_rows]
        front = pareto(pts, lower_x=True)
        unit = "req/s" if variable == "rate" else "x arrival speedup"
        ax.set_xlabel("GPUs (prefill + decode workers)")
        from matplotlib.ticker import MaxNLocator

        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(f"capacity ({unit})")
        ax.set_title("Capacity against cluster size (Pareto frontier)")
    else:
        pts_rows = [r for r in ok if r.metric("p99_ttft_ms") is not None]
        pts = [(float(r.metric("p99_ttft_ms") or 0.0), r.goodput_per_gpu) for r in pts_rows]
        front = pareto(pts, lower_x=True)
        ax.set_xlabel("p99 TTFT (ms)")
        ax.set_ylabel("goodput per GPU (req/s)")
        if sla_ttft_ms is not None:
            ax.axvline(sla_ttft_ms, color="#d9480f", linestyle="--", linewidth=1.0, label=f"TTFT SLA {sla_ttft_ms:g} ms")
        ax.set_title("Goodput per GPU against p99 TTFT (Pareto frontier)")
    if pts:
        xs = [p[0] for p in pts]
        ys = [p[1] for p in pts]
        ax.scatter(xs, ys, s=22, color="#9aa5b1", label="configuration", zorder=2)
        fx = [pts[i][0] for i in front]
        fy = [pts[i][1] for i in front]
        ax.plot(fx, fy, "-o", color="#1f6feb", markersize=6, linewidth=1.6, label="Pareto frontier", zorder=3)
        span = (max(xs) - min(xs)) or 1.0
        for k, i in enumerate(front):
            # Labels go above-right; the lower of two points stacked at almost the same x (the
            # frontier rises along x) gets its label below-right so the two do not overlap.
            nxt = front[k + 1] if k + 1 < len(front) else None
            stacked = nxt is not None and abs(pts[nxt][0] - pts[i][0]) < 0.03 * span
            ax.annotate(pts_rows[i].name, pts[i], textcoords="offset points",
                        xytext=(6, -11) if stacked else (6, 5), fontsize=7, zorder=5)
        if len(pts) <= 12:  # a small sweep: name the configurations off the frontier too
            on_front = set(front)
            for i, p in enumerate(pts):
                if i not in on_front:
                    ax.annotate(pts_rows[i].name, p, textcoords="offset points", xytext=(6, 5), fontsize=7,
                                color="#6b7785", zorder=5)
        if mark is not None and mark in pts_rows:
            m = pts[pts_rows.index(mark)]
            ax.scatter([m[0]], [m[1]], marker="*", s=160, color="#d9480f", zorder=4, alpha=0.85,
                       label="best capacity per GPU" if max_rate else "cheapest meeting the SLA")
        if not max_rate and min(xs) > 0 and max(xs) / min(xs) > 50:
            # one overloaded shape's TTFT would squeeze the others into a corner
            ax.set_xscale("log")
        ax.legend(loc="best", fontsize=8)
    else:
        ax.text(0.5, 0.5, "no successful configuration", ha="center", va="center", transform=ax.transAxes)
    ax.grid(True, alpha=0.3)
    return figure_bytes(fig, fmt)
