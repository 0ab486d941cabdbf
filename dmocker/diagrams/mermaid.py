"""Write a :class:`~dmocker.diagrams.model.Diagram` as a Mermaid ``stateDiagram-v2``.

Mermaid is what GitHub renders inline in Markdown, so this is the format the docs embed.  Its
state-diagram grammar ends a statement at ``;`` and (in older renderers) a label at ``:``, so
label text is passed through :func:`escape_label`, which turns those into Mermaid entity codes;
the views avoid them in the first place so the source stays readable.
"""

from __future__ import annotations

import json

from .model import Cluster, Diagram, Edge, Node, NodeKind, validate

_INDENT = "    "

# Mermaid entity codes (``#58;`` is ``:``); applied character by character so an entity's own
# ``;`` is not escaped again.
_ENTITIES = {":": "#58;", ";": "#59;", '"': "#quot;", "#": "#35;"}


def escape_label(text: str) -> str:
    """Make label text safe inside a Mermaid state description or transition label.

    A newline would end the statement, so it becomes ``<br>``, which Mermaid renders as one.
    """
    return "<br>".join("".join(_ENTITIES.get(ch, ch) for ch in line) for line in text.split("\n"))


def to_mermaid(diagram: Diagram) -> str:
    """The Mermaid source of ``diagram``; the same diagram always gives the same text."""
    validate(diagram)
    # A JSON string is a valid YAML scalar, so the front-matter title needs no other escaping.
    lines: list[str] = ["---", f"title: {json.dumps(diagram.title)}", "---", "stateDiagram-v2"]
    lines.append(f"{_INDENT}direction {diagram.direction}")
    for cluster in diagram.clusters:
        lines.extend(_cluster(cluster))
    lines.extend(_body(diagram.nodes, diagram.edges, diagram.initial, 1))
    complete = [n.id for n in diagram.all_nodes() if n.kind is NodeKind.COMPLETE]
    final = [n.id for n in diagram.all_nodes() if n.kind is NodeKind.FINAL]
    if complete:
        lines.append(f"{_INDENT}classDef complete font-weight:bold,stroke-width:3px")
        lines.append(f"{_INDENT}class {','.join(complete)} complete")
    if final:
        lines.append(f"{_INDENT}classDef final font-weight:bold,stroke-width:3px,fill:#ddd")
        lines.append(f"{_INDENT}class {','.join(final)} final")
    return "\n".join(lines) + "\n"


def _cluster(cluster: Cluster) -> list[str]:
    out = [f'{_INDENT}state "{escape_label(cluster.label)}" as {cluster.id} {{']
    out.extend(_body(cluster.nodes, cluster.edges, cluster.initial, 2))
    out.append(f"{_INDENT}}}")
    return out


def _body(
    nodes: tuple[Node, ...], edges: tuple[Edge, ...], initial: str | None, depth: int
) -> list[str]:
    pad = _INDENT * depth
    out: list[str] = []
    for node in nodes:
        out.append(f'{pad}state "{escape_label(node.label)}" as {node.id}')
    if initial is not None:
        out.append(f"{pad}[*] --> {initial}")
    for edge in edges:
        label = "<br>".join(escape_label(line) for line in edge.lines)
        suffix = f" : {label}" if label else ""
        out.append(f"{pad}{edge.source} --> {edge.target}{suffix}")
    for node in nodes:
        if node.kind is NodeKind.FINAL:
            out.append(f"{pad}{node.id} --> [*]")
    return out
