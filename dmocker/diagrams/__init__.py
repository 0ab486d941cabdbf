"""State diagrams of the handoff protocol, drawn from the spec or from an explored graph.

Pure core: views build a format-neutral :class:`Diagram` (``regions``: one lifecycle per spec
region; ``flow``: the happy path of one order plus condensed cleanup; ``explored``: every
reachable product state), and writers turn it into Mermaid or DOT text, deterministically.
The one I/O edge is :mod:`dmocker.diagrams.render`, which runs Graphviz for SVG/PNG, and
:mod:`dmocker.diagrams.docs`, which keeps docs/protocol.md and docs/diagrams/ in sync.

Any networkx DiGraph of states can be drawn with :func:`diagram_from_graph` (attribute
contract in :mod:`dmocker.diagrams.graph`), so the checker's graph of a user's coordinator
plugs in.
"""

from .dot import to_dot
from .graph import diagram_from_graph, explored_diagram, table_graph
from .mermaid import to_mermaid
from .model import Cluster, Diagram, Edge, Node, NodeKind
from .render import GraphvizFailed, GraphvizMissing, INSTALL_HINT
from .views import OutputFormat, View, build_diagram, graph_output, output, text

__all__ = [
    "Cluster",
    "Diagram",
    "Edge",
    "GraphvizFailed",
    "GraphvizMissing",
    "INSTALL_HINT",
    "Node",
    "NodeKind",
    "OutputFormat",
    "View",
    "build_diagram",
    "diagram_from_graph",
    "explored_diagram",
    "graph_output",
    "output",
    "table_graph",
    "text",
    "to_dot",
    "to_mermaid",
]
