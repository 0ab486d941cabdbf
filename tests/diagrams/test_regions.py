"""The per-region view: one cluster per spec region, arrows derived from the spec."""

from __future__ import annotations

import pytest

from dmocker.diagrams.model import Cluster, Diagram, NodeKind
from dmocker.diagrams.regions import region_diagram
from dmocker.handoff import load_spec
from dmocker.handoff import HandoffOrder


def _cluster(diagram: Diagram, name: str) -> Cluster:
    (cluster,) = [c for c in diagram.clusters if c.label == name]
    return cluster


def _arrows(cluster: Cluster) -> dict[tuple[str, str], str]:
    prefix = cluster.label + "_"
    return {
        (e.source.removeprefix(prefix), e.target.removeprefix(prefix)): "\n".join(e.lines)
        for e in cluster.edges
    }


@pytest.mark.parametrize("order", list(HandoffOrder))
def test_one_cluster_per_region_with_all_states(order: HandoffOrder) -> None:
    spec = load_spec()
    diagram = region_diagram(spec, order)
    assert [c.label for c in diagram.clusters] == [r.name for r in spec.regions]
    for cluster, region in zip(diagram.clusters, spec.regions):
        assert [n.label for n in cluster.nodes] == list(region.states)
        assert cluster.initial == f"{region.name}_{region.initial}"


def test_order_specific_acquisition() -> None:
    spec = load_spec()
    sf = region_diagram(spec, HandoffOrder.SOURCE_FIRST)
    df = region_diagram(spec, HandoffOrder.DESTINATION_FIRST)
    sf_source = _arrows(_cluster(sf, "source"))
    df_source = _arrows(_cluster(df, "source"))
    assert sf_source[("not_submitted", "submit_pending")] == "start [mode=idle] / SubmitPrefill"
    assert df_source[("not_submitted", "submit_pending")] == (
        "[mode=active, destination=reserved] / SubmitPrefill"
    )
    sf_dest = _arrows(_cluster(sf, "destination"))
    df_dest = _arrows(_cluster(df, "destination"))
    assert sf_dest[("not_reserved", "reserve_pending")] == "[mode=active, source=held] / ReserveDestination"
    assert df_dest[("not_reserved", "reserve_pending")] == "start [mode=idle] / ReserveDestination"
    assert _arrows(_cluster(sf, "mode"))[("idle", "active")] == "start / SubmitPrefill"
    assert _arrows(_cluster(df, "mode"))[("idle", "active")] == "start / ReserveDestination"


def test_guards_outcomes_and_cleanup_arrows() -> None:
    diagram = region_diagram(load_spec(), HandoffOrder.SOURCE_FIRST)
    source = _arrows(_cluster(diagram, "source"))
    assert source[("submitted", "held")] == "SourceHeld [bandwidth_valid, full_prompt_delay_valid]"
    assert source[("release_pending", "released")] == "ReleaseSource.Applied | ReleaseSource.Noop"
    transfer = _arrows(_cluster(diagram, "transfer"))
    assert "scheduled_delay_valid] / StartTransfer" in transfer[("none", "pending")]
    mode = _arrows(_cluster(diagram, "mode"))
    assert mode[("idle", "cleanup")] == "Failed | TimedOut | Canceled"
    assert mode[("succeeded", "reopened")] == "Failed | TimedOut | Canceled"
    # begin_cleanup outcomes are merged into one (A | B).Failed group.
    flat = mode[("active", "cleanup")].replace("\n ", "")
    assert "(SubmitPrefill | ReserveDestination | StartTransfer | ActivateDestination" in flat
    assert "CancelSource" not in flat  # cancels cannot fail: rejected, not drawn
    assert mode[("cleanup", "canceled")].count("/ Complete") == 4
    dcancel = _arrows(_cluster(diagram, "destination_cancel"))
    assert dcancel[("none", "pending")].startswith(
        "[mode in (cleanup, reopened), destination!=not_reserved]"
    )
    # Self-loops of begin_cleanup in cleanup (cleanup -> cleanup) are not drawn.
    assert ("cleanup", "cleanup") not in mode


@pytest.mark.parametrize("order", list(HandoffOrder))
def test_every_step_of_the_order_is_drawn(order: HandoffOrder) -> None:
    spec = load_spec()
    # Wrapped continuation lines start with two spaces: undo the wrap before searching.
    text = "\n".join(
        " ".join(line.strip() for line in e.lines) for e in region_diagram(spec, order).all_edges()
    )
    for t in (*spec.transitions, *spec.rules):
        if not t.applies_to(order) or t.result != "step":
            continue
        if t.event is not None:
            head, _, kind = t.event.partition(".")
            assert head in text and kind in text, t.id
        for action in t.emit:
            assert f"/ {action}" in text or f", {action}" in text, t.id


def test_terminal_marks() -> None:
    diagram = region_diagram(load_spec(), HandoffOrder.SOURCE_FIRST)
    kinds = {n.id: n.kind for n in diagram.all_nodes()}
    assert kinds["mode_canceled"] is NodeKind.FINAL
    assert kinds["mode_succeeded"] is NodeKind.COMPLETE
    assert kinds["mode_active"] is NodeKind.NORMAL
    assert kinds["source_released"] is NodeKind.FINAL  # no arrow out within the region
    assert kinds["source_held"] is NodeKind.NORMAL
