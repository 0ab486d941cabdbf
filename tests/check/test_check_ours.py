"""Our coordinator passes every property in both orders, fast."""

from __future__ import annotations

import dataclasses

import networkx as nx

from dmocker.check import DEFAULT_VALUES, Status, check, load_target, target_from_factory
from dmocker.check.core import Category
from dmocker.handoff import HandoffCoordinator, HandoffOrder, load_spec
from dmocker.check.mutant_catalogue import WrappedCoordinator


def test_ours_passes_both_orders() -> None:
    report = check(load_target(None))
    assert report.exit_code == 0
    assert [o.order for o in report.orders] == list(HandoffOrder)
    for o in report.orders:
        assert not o.truncated and not o.stopped_early
        assert o.states > 100 and o.transitions > 10 * o.states
        assert all(p.status is Status.PASS for p in o.properties), [p for p in o.properties if p.status is not Status.PASS]
        names = [p.name for p in o.properties]
        assert {"no_deadlock", "termination", "cleanup_liveness", "api_contract", "finite_delay"} <= set(names)
        # the clean run is start + 8 answers/facts; cleanup: terminal fact + two cancel acks
        assert o.termination_steps == 9
        assert o.cleanup_steps == 3
    assert report.seconds < 20  # the bench measures the real number (< 2 s on an idle machine)


def test_order_specific_invariants_come_from_the_spec() -> None:
    report = check(load_target(None))
    sf, df = ([p.name for p in o.properties] for o in report.orders)
    assert "reserve_after_held" in sf and "reserve_after_held" not in df
    assert "submit_after_reserved" in df and "submit_after_reserved" not in sf


def test_graph_is_networkx_and_bfs_depths_are_consistent() -> None:
    report = check(load_target(None), (HandoffOrder.SOURCE_FIRST,))
    ex = report.orders[0].exploration
    g = ex.graph()
    assert isinstance(g, nx.DiGraph) and g.number_of_nodes() == ex.states
    for u, v in g.edges:
        assert ex.depth[v] <= ex.depth[u] + 1  # BFS: no edge skips a level
    assert all(len(ex.path(n)[1]) == ex.depth[n] for n in range(0, ex.states, 37))


def test_safety_properties_are_the_spec_invariants_then_api_contract() -> None:
    spec = load_spec()
    report = check(load_target(None), (HandoffOrder.SOURCE_FIRST,), spec=spec)
    safety = [(p.name, p.source) for p in report.orders[0].properties if p.category is Category.SAFETY]
    spec_ids = [inv.id for inv in spec.invariants_for(HandoffOrder.SOURCE_FIRST)]
    assert safety == [(i, "spec") for i in spec_ids] + [("api_contract", "checker")]
    assert "each_action_once_per_epoch" in spec_ids  # declared in the spec, not built into the checker


class _Plain(WrappedCoordinator):
    """Our coordinator behind the wrapper, without a snapshot() hook: structural keys."""

    snapshot = None  # type: ignore[assignment]


def test_structural_key_without_snapshot_hook() -> None:
    t = target_from_factory(_Plain)
    assert t.snapshot_mode == "structural key"
    values = dataclasses.replace(DEFAULT_VALUES, configs=DEFAULT_VALUES.configs[:1])
    report = check(t, (HandoffOrder.DESTINATION_FIRST,), values=values)
    assert report.exit_code == 0
    ours = check(target_from_factory(HandoffCoordinator), (HandoffOrder.DESTINATION_FIRST,), values=values)
    # absolute ids in the structural key merge fewer states, never more
    assert report.orders[0].states >= ours.orders[0].states


def test_max_states_makes_it_inconclusive() -> None:
    report = check(load_target(None), (HandoffOrder.SOURCE_FIRST,), max_states=50)
    o = report.orders[0]
    assert o.truncated and o.states == 50
    assert report.exit_code == 3
    assert all(p.status is Status.INCONCLUSIVE for p in o.properties)
