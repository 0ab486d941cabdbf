"""Write a :class:`~dmocker.diagrams.model.Diagram` as Graphviz DOT, with no third-party code.

Hand-written rather than via pydot or python-statemachine's exporter because those embed
object ids or depend on attribute iteration order; here every id comes from the view and every
statement is emitted in the diagram's own order, so the text is byte-stable and can be checked
into the docs and compared in a test.
"""

from __future__ import annotations

from .model import Cluster, Diagram, Edge, Node, NodeKind, validate

_FONT = "Helvetica"


def quote(text: str) -> str:
    """A DOT double-quoted string: backslashes and quotes escaped, newlines as ``\\n``."""
    body = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{body}"'


def to_dot(diagram: Diagram) -> str:
    """The DOT source of ``diagram``; the same diagram always gives the same text."""
    validate(diagram)
    lines = [
        f"digraph {quote(diagram.title)} {{",
        f"  graph [rankdir={diagram.direction}, label={quote(diagram.title)}, labelloc=t,"
        f' fontname="{_FONT}", fontsize=16, nodesep=0.3, ranksep=0.35];',
        f'  node [shape=box, style=rounded, fontname="{_FONT}", fontsize=11, margin="0.12,0.04"];',
        f'  edge [fontname="{_FONT}", fontsize=9, arrowsize=0.7];',
    ]
    # With rankdir=LR, dot stacks disconnected clusters bottom-up in the order they are given;
    # emitting them reversed puts the first one (the mode region) on top, as a reader expects.
    clusters = reversed(diagram.clusters) if diagram.direction == "LR" else iter(diagram.clusters)
    for cluster in clusters:
        lines.extend(_cluster(cluster))
    lines.extend(_body(diagram.nodes, diagram.edges, diagram.initial, "  ", "start"))
    lines.append("}")
    return "\n".join(lines) + "\n"


def _cluster(cluster: Cluster) -> list[str]:
    out = [
        f"  subgraph {quote('cluster_' + cluster.id)} {{",
        f'    label={quote(cluster.label)}; fontsize=13; style="rounded,dashed"; color=gray40;',
    ]
    out.extend(_body(cluster.nodes, cluster.edges, cluster.initial, "    ", cluster.id))
    out.append("  }")
    return out


def _node_attrs(node: Node) -> str:
    attrs = [f"label={quote(node.label)}"]
    if node.kind is NodeKind.COMPLETE:
        attrs.append('style="rounded,bold"')
        attrs.append("penwidth=2")
    elif node.kind is NodeKind.FINAL:
        attrs.append('style="rounded,filled,bold"')
        attrs.append('fillcolor="#e0e0e0"')
        attrs.append("peripheries=2")
    if node.tooltip:
        attrs.append(f"tooltip={quote(node.tooltip)}")
    return ", ".join(attrs)


def _body(
    nodes: tuple[Node, ...], edges: tuple[Edge, ...], initial: str | None, pad: str, scope: str
) -> list[str]:
    out: list[str] = []
    if initial is not None:
        point = quote(f"__initial_{scope}")
        out.append(f'{pad}{point} [shape=point, width=0.12, label=""];')
    for node in nodes:
        out.append(f"{pad}{quote(node.id)} [{_node_attrs(node)}];")
    if initial is not None:
        out.append(f"{pad}{quote(f'__initial_{scope}')} -> {quote(initial)};")
    for edge in edges:
        attrs = [f"label={quote(chr(10).join(edge.lines))}"] if edge.lines else []
        if edge.primary:
            attrs.extend(["weight=20", "penwidth=1.8"])
        attr = f" [{', '.join(attrs)}]" if attrs else ""
        out.append(f"{pad}{quote(edge.source)} -> {quote(edge.target)}{attr};")
    return out
