"""The Hypothesis kit for the workers' clocks finds each clock mutant, shrunk to the checker's
shortest counterexample, and nothing in the safe configurations."""

from __future__ import annotations

import pytest

from dmocker.check.clock_mutants import CLOCK_MUTANTS, REFERENCE
from dmocker.check.clocks import check_clocks
from dmocker.handoff import HandoffOrder, load_workers
from dmocker.testing.clocks import find_clock_violation

W = load_workers()
MUTANTS = {m.name: m for m in CLOCK_MUTANTS}
SF, DF = HandoffOrder.SOURCE_FIRST, HandoffOrder.DESTINATION_FIRST


def _assert_found_shortest(name: str, order: HandoffOrder) -> None:
    mutated = MUTANTS[name].edit(W)
    config = W.configurations[REFERENCE]
    finding = find_clock_violation(mutated, config, order)
    assert finding is not None, name
    report = check_clocks(mutated, config, order)
    shortest = {r.prop: len(r.moves) for r in report.results if not r.ok}
    props = {v.prop for v in finding.violations}
    assert props & set(shortest), (name, props, shortest)
    # shrunk: no longer than the checker's shortest counterexample for a property it broke
    assert len(finding.moves) <= max(shortest[p] for p in props & set(shortest))


def test_kit_finds_the_quick_mutants() -> None:
    _assert_found_shortest("cancel_does_not_notify_source", SF)
    _assert_found_shortest("destination_never_times_out", DF)


def test_kit_finds_vllm_use_after_free() -> None:
    finding = find_clock_violation(W, W.configurations["vllm-abort-timeout"], SF, max_examples=500)
    assert finding is not None
    assert finding.moves == ("prefill_done", "hold_expiry", "room_free", "transfer_done")
    assert "no_read_from_freed_source" in {v.prop for v in finding.violations}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MUTANTS))
@pytest.mark.parametrize("order", [SF, DF])
def test_kit_finds_every_mutant_where_the_checker_does(name: str, order: HandoffOrder) -> None:
    report = check_clocks(MUTANTS[name].edit(W), W.configurations[REFERENCE], order)
    if not report.failed:
        pytest.skip("the checker proves this mutant harmless in this order")
    _assert_found_shortest(name, order)


@pytest.mark.slow
@pytest.mark.parametrize("config", ["dmocker", "sglang"])
def test_kit_finds_nothing_in_safe_configurations(config: str) -> None:
    c = W.configurations[config]
    for order in c.orders:
        assert find_clock_violation(W, c, order, max_examples=1500) is None
