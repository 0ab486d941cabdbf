"""matplotlib at the edge: the optional ``plot`` extra, loaded lazily, with byte-stable output.

Why here and lazy: matplotlib is optional (``pip install "dmocker[plot]"``); nothing imports it
until a picture is asked for, and a missing install is one clear :class:`PlotUnavailable`
(the CLI turns it into exit 2 before any work starts, see :func:`require`).  Figures use the
non-interactive Agg backend, a fixed SVG hash salt and no date metadata, so the same data gives
the same bytes.
"""

from __future__ import annotations

import importlib
import io
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["PLOT_EXTENSIONS", "PLOT_INSTALL_HINT", "PlotUnavailable", "require", "new_figure", "figure_bytes", "svg_text"]

PLOT_EXTENSIONS = ("png", "svg")
PLOT_INSTALL_HINT = 'pictures need matplotlib: pip install "dmocker[plot]"'


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


def require() -> Any:
    """Import matplotlib (Agg backend, deterministic SVG) or raise :class:`PlotUnavailable`."""
    try:
        mpl = importlib.import_module("matplotlib")
    except ImportError:
        raise PlotUnavailable(PLOT_INSTALL_HINT) from None
    mpl.use("Agg", force=True)
    mpl.rcParams["svg.hashsalt"] = "dmocker"
    mpl.rcParams["svg.fonttype"] = "path"  # text as paths: renders the same without fonts
    return mpl


def new_figure(width: float, height: float, nrows: int = 1, ncols: int = 1) -> tuple[Figure, Any]:
    """A figure and its axes (one Axes, or an array of them for a grid)."""
    require()
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=True)
    return fig, axes


def figure_bytes(fig: Figure, fmt: str) -> bytes:
    if fmt not in PLOT_EXTENSIONS:
        raise ValueError(f"unknown picture format {fmt!r}: expected one of {', '.join(PLOT_EXTENSIONS)}")
    buf = io.BytesIO()
    # No date, creator or RDF block: same data, same bytes (and no URLs in an inline SVG).
    metadata: dict[str, str | None] = (
        {"Date": None, "Creator": None, "Format": None, "Type": None} if fmt == "svg" else {"Software": None}
    )
    fig.savefig(buf, format=fmt, metadata=metadata, dpi=120 if fmt == "png" else None)
    return buf.getvalue()


def svg_text(fig: Figure) -> str:
    """The figure as an inline ``<svg>`` element (no XML prolog or DOCTYPE)."""
    text = figure_bytes(fig, "svg").decode("utf-8")
    start = text.find("<svg")
    return text[start:] if start >= 0 else text


def style_axes(ax: Axes) -> None:
    ax.grid(True, alpha=0.3)
