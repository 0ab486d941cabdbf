"""The networkx writer: our table's graph, and arbitrary user graphs, drawn deterministically."""

from __future__ import annotations

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st

from dmocker.diagrams.dot import to_dot
from dmocker.diagrams.graph import diagram_from_graph, explored_diagram, table_graph
from dmocker.diagrams.mermaid import to_mermaid
from dmocker.diagrams.model import NodeKind
from dmocker.handoff import load_spec
from dmocker.handoff import Step, compile_table
from dmocker.handoff import HandoffOrder


def test_table_graph_has_every_state_and_every_changing_step() -> None:
    table = compile_table(load_spec(), HandoffOrder.SOURCE_FIRST)
    graph = table_graph(table)
    assert graph.number_of_nodes() == table.state_count
    expected = {
        (s, e.next)
        for s in range(table.state_count)
        for e in table.rows[s]
        if isinstance(e, Step) and (e.next != s or e.emits)
    }
    assert set(graph.edges) == expected
    assert graph.graph["initial"] == table.initial
    finals = [n for n, d in graph.nodes(data=True) if d["final"]]
    assert finals and all(table.completion(n) is not None for n in finals)
    assert all(d["label"] for _, d in graph.nodes(data=True))


def test_explored_diagram_marks_initial_and_terminal_states() -> None:
    table = compile_table(load_spec(), HandoffOrder.DESTINATION_FIRST)
    diagram = explored_diagram(table)
    assert len(diagram.nodes) == table.state_count
    assert diagram.initial == "n0" and diagram.nodes[0].label == "initial"
    assert str(table.state_count) in diagram.title
    kinds = {n.kind for n in diagram.nodes}
    assert NodeKind.FINAL in kinds and NodeKind.COMPLETE in kinds
    text = to_mermaid(diagram)
    assert "Complete" in text and "[*] --> n0" in text


def _user_graph(order: list[int], edge_order: list[int]) -> nx.DiGraph:
    """A small user graph whose nodes are tuples (like snapshots), built in a given order."""
    nodes = [("s", i) for i in range(5)]
    edges: list[tuple[tuple[str, int], tuple[str, int], dict[str, object]]] = [
        (nodes[0], nodes[1], {"event": "go", "emits": ["A"]}),
        (nodes[1], nodes[2], {"label": "step"}),
        (nodes[1], nodes[3], {"labels": ["x / B", "y / B"]}),
        (nodes[2], nodes[4], {}),
        (nodes[3], nodes[4], {"event": "done"}),
    ]
    graph = nx.DiGraph(initial=nodes[0])
    for i in order:
        graph.add_node(nodes[i], label=f"state {i}", final=(i == 4), complete=(i == 4))
    for j in edge_order:
        u, v, data = edges[j]
        graph.add_edge(u, v, **data)
    return graph


@settings(max_examples=40, deadline=None)
@given(st.permutations(range(5)), st.permutations(range(5)))
def test_user_graph_output_ignores_insertion_order(
    node_order: list[int], edge_order: list[int]
) -> None:
    reference = diagram_from_graph(_user_graph(list(range(5)), list(range(5))), title="user")
    shuffled = diagram_from_graph(_user_graph(list(node_order), list(edge_order)), title="user")
    assert to_dot(shuffled) == to_dot(reference)
    assert to_mermaid(shuffled) == to_mermaid(reference)


def test_user_graph_attribute_contract() -> None:
    diagram = diagram_from_graph(_user_graph(list(range(5)), list(range(5))), title="user")
    labels = {n.id: n.label for n in diagram.nodes}
    assert diagram.initial == "n0" and labels["n0"] == "state 0"
    lines = {(labels[e.source], labels[e.target]): e.lines for e in diagram.edges}
    assert lines[("state 0", "state 1")] == ("go / A",)
    assert lines[("state 1", "state 2")] == ("step",)
    assert lines[("state 1", "state 3")] == ("x | y / B",)  # merged by emitted actions
    assert lines[("state 2", "state 4")] == ()
    assert lines[("state 3", "state 4")] == ("done",)
    assert [n.kind for n in diagram.nodes if n.label == "state 4"] == [NodeKind.FINAL]


def test_multidigraph_parallel_edges_merge_and_unlabelled_nodes_use_str() -> None:
    graph = nx.MultiDiGraph()
    graph.add_edge("b", "a", label="Failed / CancelSource")
    graph.add_edge("b", "a", label="TimedOut / CancelSource")
    graph.add_node("b", initial=True)
    diagram = diagram_from_graph(graph)
    assert [n.label for n in diagram.nodes] == ["b", "a"]
    (edge,) = diagram.edges
    assert edge.lines == ("Failed | TimedOut / CancelSource",)
    assert diagram.title == "explored state graph"


def test_checker_shaped_graph_plugs_in() -> None:
    """The checker's graph: int nodes with depth/complete/completion, edges with an input."""
    graph = nx.DiGraph()
    graph.add_node(0, depth=0, complete=False, completion=None)
    graph.add_node(1, depth=1, complete=False, completion=None)
    graph.add_node(2, depth=2, complete=True, completion="canceled")
    graph.add_edge(0, 1, input=("start",))
    graph.add_edge(1, 2, input="DeliverFact(Failed(handoff_id=1))")
    graph.add_edge(2, 2, input="noise")
    diagram = diagram_from_graph(graph, title="checker")
    assert diagram.initial == "n0"
    assert [n.kind for n in diagram.nodes] == [NodeKind.NORMAL, NodeKind.NORMAL, NodeKind.FINAL]
    lines = {(e.source, e.target): e.lines for e in diagram.edges}
    assert lines[("n0", "n1")] == ("('start',)",)
    assert lines[("n1", "n2")] == ("DeliverFact(Failed(handoff_id=1))",)
    assert "n2 --> n2 : noise" in to_mermaid(diagram)


def test_numbered_labels_sort_naturally() -> None:
    graph = nx.DiGraph(initial=0)
    for n in (10, 9, 2):
        graph.add_edge(0, n)
    assert [n.label for n in diagram_from_graph(graph).nodes] == ["0", "2", "9", "10"]
