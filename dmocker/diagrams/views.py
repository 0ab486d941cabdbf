"""Which picture to draw and in which format: the pure entry points the CLI and docs use."""

from __future__ import annotations

import enum

import networkx as nx

from dmocker.handoff import ProtocolSpec, load_workers
from dmocker.handoff import compile_table
from dmocker.handoff import HandoffOrder

from .dot import to_dot
from .flow import flow_diagram
from .graph import diagram_from_graph, explored_diagram
from .mermaid import to_mermaid
from .model import Diagram
from .regions import region_diagram
from .render import ImageFormat, render
from .workers import workers_diagram


class View(enum.Enum):
    """FLOW: happy path + condensed cleanup; REGIONS: one lifecycle per region;
    EXPLORED: every reachable product state of the compiled table; WORKERS: the workers' own
    clocks (the spec's ``workers`` machines, the same in both orders)."""

    FLOW = "flow"
    REGIONS = "regions"
    EXPLORED = "explored"
    WORKERS = "workers"


class OutputFormat(enum.Enum):
    """MERMAID and DOT are text written by dmocker; SVG and PNG are rendered by Graphviz."""

    MERMAID = "mermaid"
    DOT = "dot"
    SVG = "svg"
    PNG = "png"

    @property
    def needs_graphviz(self) -> bool:
        return self in (OutputFormat.SVG, OutputFormat.PNG)

    @classmethod
    def from_suffix(cls, suffix: str) -> OutputFormat | None:
        """The format a file name ending in ``suffix`` (``.svg``, ``.mmd``, …) asks for."""
        return _SUFFIXES.get(suffix.lower())


_SUFFIXES = {
    ".mmd": OutputFormat.MERMAID,
    ".mermaid": OutputFormat.MERMAID,
    ".dot": OutputFormat.DOT,
    ".gv": OutputFormat.DOT,
    ".svg": OutputFormat.SVG,
    ".png": OutputFormat.PNG,
}


def build_diagram(spec: ProtocolSpec, order: HandoffOrder, view: View) -> Diagram:
    """The Diagram of ``view`` for ``order``."""
    if view is View.FLOW:
        return flow_diagram(spec, order)
    if view is View.REGIONS:
        return region_diagram(spec, order)
    if view is View.WORKERS:
        return workers_diagram(load_workers(spec.path))
    return explored_diagram(compile_table(spec, order))


def text(diagram: Diagram, fmt: OutputFormat) -> str:
    """Mermaid or DOT source (``fmt`` must not need Graphviz)."""
    if fmt is OutputFormat.MERMAID:
        return to_mermaid(diagram)
    if fmt is OutputFormat.DOT:
        return to_dot(diagram)
    raise ValueError(f"{fmt.value} is an image format; use output()")


def output(diagram: Diagram, fmt: OutputFormat) -> bytes:
    """The bytes of ``diagram`` in ``fmt``; SVG/PNG raise GraphvizMissing without ``dot``."""
    if fmt is OutputFormat.SVG:
        return render(to_dot(diagram), ImageFormat.SVG)
    if fmt is OutputFormat.PNG:
        return render(to_dot(diagram), ImageFormat.PNG)
    return text(diagram, fmt).encode("utf-8")


def graph_output(
    graph: nx.DiGraph, fmt: OutputFormat, title: str | None = None
) -> bytes:
    """Draw any state graph (e.g. the checker's explored graph of a user's coordinator)."""
    return output(diagram_from_graph(graph, title=title), fmt)
