"""A neutral, ordered picture of a state diagram, independent of the output format.

Every view (the spec's regions, the explored product graph, a user's networkx graph) is first
turned into a :class:`Diagram`; the Mermaid and DOT writers only ever read this value.  Keeping
the picture separate from the syntax means the two formats cannot drift apart (both show the
same nodes, edges and markings) and determinism has to be achieved once: a Diagram's tuples are
already in output order, and node ids are assigned by the view, never taken from ``id()``.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class NodeKind(enum.Enum):
    """How a state is marked in the drawing.

    NORMAL states are plain; COMPLETE states are where the coordinator reports ``is_complete``
    but may still move (success can be reopened by a terminal fact); FINAL states have no way
    out (drawn with a double border and, in Mermaid, an arrow to ``[*]``).
    """

    NORMAL = "normal"
    COMPLETE = "complete"
    FINAL = "final"


@dataclass(frozen=True, slots=True)
class Node:
    """One state. ``id`` is a safe identifier (letters, digits, underscores) unique in the diagram."""

    id: str
    label: str
    kind: NodeKind = NodeKind.NORMAL
    tooltip: str = ""


@dataclass(frozen=True, slots=True)
class Edge:
    """One arrow. ``lines`` are the label lines, in order (merged arrows carry several).

    ``primary`` marks the main path (the happy path): DOT keeps it straight and draws it bolder.
    """

    source: str
    target: str
    lines: tuple[str, ...] = ()
    primary: bool = False


@dataclass(frozen=True, slots=True)
class Cluster:
    """A group of states with its own initial state (one region of the spec, for example)."""

    id: str
    label: str
    nodes: tuple[Node, ...]
    edges: tuple[Edge, ...]
    initial: str | None = None


@dataclass(frozen=True, slots=True)
class Diagram:
    """A whole drawing: clusters (may be empty) plus top-level nodes and edges.

    ``initial`` names the top-level initial node, if any.  ``direction`` is ``"LR"`` or ``"TB"``.
    """

    title: str
    clusters: tuple[Cluster, ...] = ()
    nodes: tuple[Node, ...] = ()
    edges: tuple[Edge, ...] = ()
    initial: str | None = None
    direction: str = "LR"

    def all_nodes(self) -> tuple[Node, ...]:
        """Every node, clusters first, in output order."""
        out: list[Node] = []
        for cluster in self.clusters:
            out.extend(cluster.nodes)
        out.extend(self.nodes)
        return tuple(out)

    def all_edges(self) -> tuple[Edge, ...]:
        """Every edge, clusters first, in output order."""
        out: list[Edge] = []
        for cluster in self.clusters:
            out.extend(cluster.edges)
        out.extend(self.edges)
        return tuple(out)


_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def safe_id(*parts: str) -> str:
    """An identifier both Mermaid and DOT accept, built from readable parts.

    Mermaid state ids must not contain dashes, dots or spaces; DOT ids are quoted anyway, but
    using the same id in both keeps the two outputs easy to compare by eye.
    """
    text = "_".join(_UNSAFE.sub("_", part) for part in parts)
    if not text or text[0].isdigit():
        text = "s_" + text
    return text


def validate(diagram: Diagram) -> None:
    """Raise ValueError when ids collide or an edge names an unknown node.

    Views are pure code, so a violation is a bug in the view; failing loudly here keeps a
    broken picture from being written silently in either format.
    """
    seen: set[str] = set()
    for node in diagram.all_nodes():
        if node.id in seen:
            raise ValueError(f"duplicate node id {node.id!r} in diagram {diagram.title!r}")
        if _UNSAFE.search(node.id):
            raise ValueError(f"unsafe node id {node.id!r} in diagram {diagram.title!r}")
        seen.add(node.id)
    initials = [c.initial for c in diagram.clusters] + [diagram.initial]
    for initial in initials:
        if initial is not None and initial not in seen:
            raise ValueError(f"initial node {initial!r} is not in diagram {diagram.title!r}")
    for edge in diagram.all_edges():
        for end in (edge.source, edge.target):
            if end not in seen:
                raise ValueError(f"edge end {end!r} is not a node of diagram {diagram.title!r}")
    if diagram.direction not in ("LR", "TB"):
        raise ValueError(f"direction must be LR or TB, not {diagram.direction!r}")
