"""The happy-path view, checked against the compiled table and the spec's lifecycles."""

from __future__ import annotations

import pytest

from dmocker.diagrams.flow import flow_diagram, happy_path
from dmocker.diagrams.model import NodeKind
from dmocker.handoff import load_spec
from dmocker.handoff import Step, compile_table
from dmocker.handoff import Completion, HandoffOrder

# The actions a clean run issues, in order: the spec's two orders differ only in the first two.
CLEAN_RUN = {
    HandoffOrder.SOURCE_FIRST: ["SubmitPrefill", "ReserveDestination", "StartTransfer",
                                "ActivateDestination", "ReleaseSource", "Complete"],
    HandoffOrder.DESTINATION_FIRST: ["ReserveDestination", "SubmitPrefill", "StartTransfer",
                                     "ActivateDestination", "ReleaseSource", "Complete"],
}


@pytest.mark.parametrize("order", list(HandoffOrder))
def test_happy_path_is_a_chain_ending_in_success(order: HandoffOrder) -> None:
    spec = load_spec()
    table = compile_table(spec, order)
    path = happy_path(spec, table)
    assert path[0] == table.initial
    assert table.completion(path[-1]) is Completion.SUCCESS
    assert not any(table.is_complete(s) for s in path[:-1])
    diagram = flow_diagram(spec, order)
    primary = [e for e in diagram.edges if e.primary]
    assert [(e.source, e.target) for e in primary] == [
        (f"h{i}", f"h{i + 1}") for i in range(len(path) - 1)
    ]
    emitted = [
        action.strip(", ")
        for e in primary
        for action in " ".join(e.lines).partition(" / ")[2].split()
    ]
    assert emitted == CLEAN_RUN[order]


@pytest.mark.parametrize("order", list(HandoffOrder))
def test_condensed_nodes_cover_every_other_state(order: HandoffOrder) -> None:
    spec = load_spec()
    table = compile_table(spec, order)
    path = happy_path(spec, table)
    diagram = flow_diagram(spec, order)
    counted = len(path)
    for node in diagram.nodes:
        if node.id.startswith("mode_"):
            first, _, rest = node.label.partition("\n")
            counted += int(rest.strip("()").split()[0]) if rest else 1
    assert counted == table.state_count
    kinds = {n.id: n.kind for n in diagram.nodes}
    assert kinds["mode_canceled"] is NodeKind.FINAL
    assert kinds[f"h{len(path) - 1}"] is NodeKind.COMPLETE


def test_failures_on_the_path_show_what_they_cancel() -> None:
    diagram = flow_diagram(load_spec(), HandoffOrder.SOURCE_FIRST)
    arrows = {(e.source, e.target): " ".join(l.strip() for l in e.lines) for e in diagram.edges}
    # Before start nothing was acquired: a terminal fact completes at once.
    assert arrows[("h0", "mode_canceled")] == "Failed | TimedOut | Canceled / Complete"
    # An unacknowledged submit is cancelled too (the source may own the request).
    assert arrows[("h1", "mode_cleanup")] == (
        "Failed | TimedOut | Canceled | SubmitPrefill.Failed / CancelSource"
    )
    last = max(int(n.id[1:]) for n in diagram.nodes if n.id.startswith("h"))
    assert arrows[(f"h{last}", "mode_reopened")] == "Failed | TimedOut | Canceled / CancelDestination"
    assert arrows[("mode_reopened", "mode_canceled")] == (
        "CancelDestination.Applied | CancelDestination.Noop / Complete"
    )


@pytest.mark.parametrize("order", list(HandoffOrder))
def test_every_step_between_drawn_nodes_is_on_an_arrow(order: HandoffOrder) -> None:
    spec = load_spec()
    table = compile_table(spec, order)
    path = happy_path(spec, table)
    diagram = flow_diagram(spec, order)
    arrows = {(e.source, e.target) for e in diagram.edges}
    mode_at = table.region_names.index("mode")

    def node(s: int) -> str:
        return f"h{path.index(s)}" if s in path else f"mode_{table.configs[s][mode_at]}"

    for s in range(table.state_count):
        for entry in table.rows[s]:
            if isinstance(entry, Step) and node(s) != node(entry.next):
                assert (node(s), node(entry.next)) in arrows
