"""State graphs as networkx DiGraphs, and the writer that turns any such graph into a Diagram.

Two producers meet here: :func:`table_graph` (the reachable product machine of our compiled
table) and the checker, which explores any coordinator and may hand its graph over.  The
writer only relies on a small attribute contract, so a graph from elsewhere plugs in:

* graph attribute ``initial`` (optional): the initial node;
* node attributes (all optional): ``label`` (str, defaults to ``str(node)``), ``complete``
  (bool: ``is_complete`` holds there), ``final`` (bool: nothing can happen any more; when
  absent, a complete node with no edge to another node counts as final), ``initial`` (bool),
  ``depth`` (int; depth-0 nodes are initial when nothing else says so), ``tooltip`` (str);
* edge attributes (optional): ``labels`` (iterable of str, one line each) or ``label`` (str),
  or ``event`` (str) with ``emits`` (iterable of action names), or ``input`` (any value,
  drawn as ``str(input)``: the checker's exploration graph); a MultiDiGraph's parallel edges
  are merged into one arrow with one line per edge.

Determinism: nodes are numbered by a breadth-first walk from the initial node that visits
successors in label order, then any unreached nodes in label order; ids are ``n0, n1, …``.
Nothing depends on object identity or hashing, provided labels do not embed object ids.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable

import networkx as nx

from dmocker.handoff import CompiledTable, Step

from .labels import merge_lines, wrap
from .model import Diagram, Edge, Node, NodeKind


def edge_text(event: str, emits: Iterable[str]) -> str:
    """``event / A, B`` (or just ``event`` when nothing is emitted)."""
    actions = ", ".join(emits)
    return f"{event} / {actions}" if actions else event


def short_state_label(table: CompiledTable, state: int) -> str:
    """The regions that differ from the initial state, one per line (``initial`` for state 0).

    A full product label names six regions; most of them sit at their initial value in most
    states, so listing only the moved ones keeps node boxes small without losing information.
    """
    initial = table.configs[table.initial]
    moved = [
        f"{region}={value}"
        for region, value, start in zip(table.region_names, table.configs[state], initial)
        if value != start
    ]
    return "\n".join(moved) if moved else "initial"


def table_graph(table: CompiledTable) -> nx.DiGraph:
    """The reachable product machine as a DiGraph: every Step that changes the state or emits.

    Ignored, rejected and not-applicable inputs change nothing and are left out; a step that
    only logs (no new state, no action) is left out too, since a diagram could not tell it from
    an ignore.
    """
    graph = nx.DiGraph(initial=table.initial, order=table.order.value)
    for state in range(table.state_count):
        completion = table.completion(state)
        graph.add_node(
            state,
            label=short_state_label(table, state),
            tooltip=table.state_label(state),
            complete=table.is_complete(state),
            final=table.is_complete(state) and not _has_exit(table, state),
            completion=completion.value if completion is not None else "",
        )
    for state in range(table.state_count):
        for event_index, entry in enumerate(table.rows[state]):
            if not isinstance(entry, Step) or (entry.next == state and not entry.emits):
                continue
            line = edge_text(table.events[event_index], entry.emits)
            if graph.has_edge(state, entry.next):
                graph.edges[state, entry.next]["labels"].append(line)
            else:
                graph.add_edge(state, entry.next, labels=[line])
    return graph


def _has_exit(table: CompiledTable, state: int) -> bool:
    return any(
        isinstance(entry, Step) and (entry.next != state or bool(entry.emits))
        for entry in table.rows[state]
    )


def _label(graph: nx.DiGraph, node: object) -> str:
    value = graph.nodes[node].get("label")
    return value if isinstance(value, str) else str(node)


def _edge_lines(data: dict[str, object]) -> list[str]:
    labels = data.get("labels")
    if isinstance(labels, (list, tuple)):
        return [str(item) for item in labels]
    label = data.get("label")
    if isinstance(label, str):
        return [label] if label else []
    event = data.get("event")
    if isinstance(event, str):
        emits = data.get("emits", ())
        names = [str(e) for e in emits] if isinstance(emits, (list, tuple)) else []
        return [edge_text(event, names)]
    if data.get("input") is not None:
        return [str(data["input"])]
    return []


def _initial(graph: nx.DiGraph) -> object | None:
    marked: object = graph.graph.get("initial")
    if marked is not None and marked in graph:
        return marked
    flagged: list[object] = [n for n in graph.nodes if graph.nodes[n].get("initial") is True]
    if flagged:
        first: object = sorted(flagged, key=lambda n: _key(graph, n))[0]
        return first
    roots: list[object] = [n for n in graph.nodes if graph.nodes[n].get("depth") == 0]
    if roots:
        root: object = sorted(roots, key=lambda n: _key(graph, n))[0]
        return root
    return None


_DIGITS = re.compile(r"(\d+)")


def natural_key(text: str) -> tuple[tuple[int, int, str], ...]:
    """Sort key that orders ``"9"`` before ``"10"`` (numbered states are common labels)."""
    return tuple(
        (0, int(part), "") if part.isdigit() else (1, 0, part)
        for part in _DIGITS.split(text)
        if part
    )


def _key(graph: nx.DiGraph, node: object) -> tuple[tuple[tuple[int, int, str], ...], str]:
    return natural_key(_label(graph, node)), repr(node)


def node_order(graph: nx.DiGraph) -> list[object]:
    """Nodes in drawing order: BFS from the initial node (successors by label), then the rest."""
    key = lambda n: _key(graph, n)  # noqa: E731
    order: list[object] = []
    seen: set[object] = set()
    start = _initial(graph)
    if start is not None:
        queue: deque[object] = deque([start])
        seen.add(start)
        while queue:
            node = queue.popleft()
            order.append(node)
            for succ in sorted(graph.successors(node), key=key):
                if succ not in seen:
                    seen.add(succ)
                    queue.append(succ)
    order.extend(sorted((n for n in graph.nodes if n not in seen), key=key))
    return order


def diagram_from_graph(
    graph: nx.DiGraph, title: str | None = None, direction: str = "TB"
) -> Diagram:
    """Turn a state graph (our table's, the checker's, a user's) into a Diagram."""
    order = node_order(graph)
    ids = {node: f"n{i}" for i, node in enumerate(order)}
    position = {node: i for i, node in enumerate(order)}
    nodes = []
    for node in order:
        data = graph.nodes[node]
        final = data.get("final")
        if final is None:
            final = data.get("complete") is True and all(v == node for v in graph.successors(node))
        if final is True:
            kind = NodeKind.FINAL
        elif data.get("complete") is True:
            kind = NodeKind.COMPLETE
        else:
            kind = NodeKind.NORMAL
        tooltip = data.get("tooltip")
        nodes.append(
            Node(ids[node], _label(graph, node), kind, tooltip if isinstance(tooltip, str) else "")
        )
    merged: dict[tuple[int, int], list[str]] = {}
    for u, v, data in graph.edges(data=True):
        merged.setdefault((position[u], position[v]), []).extend(_edge_lines(data))
    edges = tuple(
        Edge(f"n{u}", f"n{v}", tuple(_lines(lines))) for (u, v), lines in sorted(merged.items())
    )
    start = _initial(graph)
    name = title if title is not None else str(graph.graph.get("title", "explored state graph"))
    return Diagram(
        title=name,
        nodes=tuple(nodes),
        edges=edges,
        initial=ids[start] if start is not None else None,
        direction=direction,
    )


def _lines(lines: list[str]) -> list[str]:
    """Sorted, de-duplicated, then merged by emitted actions and wrapped.

    Sorting makes the output independent of the order a producer added edges in (a checker
    may build its graph from a frontier whose order is an implementation detail).
    """
    out: list[str] = []
    for line in merge_lines(sorted(set(lines))):
        out.extend(wrap(line))
    return out


def explored_diagram(table: CompiledTable) -> Diagram:
    """Every reachable product state of our compiled table, every state-changing input."""
    return diagram_from_graph(
        table_graph(table),
        title=f"dmocker handoff protocol, {table.order.value} - reachable product states "
        f"({table.state_count})",
    )
