"""The HTML report of one replay (``dmocker replay ... --html report.html``).

A consumer of :mod:`dmocker.replay`: it reads a :class:`~dmocker.replay.report.Report` run with
``timeseries=True`` and renders one self-contained page (matplotlib figures inlined as SVG;
needs the optional ``plot`` extra).
"""

from .page import REPORT_SECTIONS, render_html

__all__ = ["REPORT_SECTIONS", "render_html"]
