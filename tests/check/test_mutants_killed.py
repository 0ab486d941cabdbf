"""Mutation proof: `dmocker check` flags every mutant, by the expected property, shortest first.

The table pins, per order, the first failing property and the length of its (BFS-shortest)
counterexample.  A change in a length means the search order or a mutant changed: look at the
new counterexample before updating the table.
"""

from __future__ import annotations


import pytest

from dmocker.check import Status, check, load_catalogue, run_mutant, target_from_factory
from dmocker.check.counterexample import run_steps
from dmocker.check.mutants import DEFAULT_CATALOGUE, MutantResult, kill_table
from dmocker.handoff import HandoffOrder, load_spec
from dmocker.handoff import Monitor

CATALOGUE = DEFAULT_CATALOGUE
MUTANTS = load_catalogue(CATALOGUE)

# (source-first, destination-first): (property, counterexample length); None = survives that order
EXPECTED: dict[str, tuple[tuple[str | None, int | None], tuple[str | None, int | None]]] = {
    "start_after_terminal_submits": (("nothing_after_cancel", 2), ("nothing_after_cancel", 2)),
    "reopen_only_for_canceled": (("reopen_cancels_destination", 10), ("reopen_cancels_destination", 10)),
    "invalid_outcome_journalled": (("rejection_changes_nothing", 2), ("rejection_changes_nothing", 2)),
    "dm_delay_not_validated": (("finite_delay", 5), ("finite_delay", 5)),
    "transfer_latched_before_validation": (("rejection_changes_nothing", 5), ("rejection_changes_nothing", 5)),
    "no_cancel_destination": (("reopen_cancels_destination", 10), ("reopen_cancels_destination", 10)),
    "cancel_destination_waits_for_reserve_ack": (("cleanup_liveness", 5), ("cleanup_liveness", 2)),
    "cleanup_forgets_unanswered_reserve": (("canceled_means_clean", 5), ("canceled_means_clean", 2)),
    "cleanup_ignores_outstanding_submit": (("canceled_means_clean", 2), ("canceled_means_clean", 5)),
    "complete_before_source_released": (("only_cleanup_after_success", 9), ("only_cleanup_after_success", 9)),
    "start_transfer_twice": (("each_action_once_per_epoch", 5), ("each_action_once_per_epoch", 5)),
    "start_transfer_on_every_duplicate": (("each_action_once_per_epoch", 6), ("each_action_once_per_epoch", 6)),
    "duplicate_held_re_reserves": (("each_action_once_per_epoch", 4), (None, None)),
    "release_before_activation": (("release_after_activation", 7), ("release_after_activation", 7)),
    "activate_before_transfer_completed": (("activate_after_transfer", 5), ("activate_after_transfer", 5)),
    "reserve_before_held": (("reserve_after_held", 2), ("each_action_once_per_epoch", 4)),
    "submit_before_reserved": (("each_action_once_per_epoch", 1), ("submit_after_reserved", 1)),
    "no_foreign_check": (("reserve_after_held", 3), ("submit_after_reserved", 3)),
    "cancel_failed_as_applied": (("canceled_means_clean", 3), ("canceled_means_clean", 3)),
    "fallback_not_validated": (("finite_delay", 5), ("finite_delay", 5)),
    "reopen_cancels_source": (("only_cleanup_after_success", 10), ("only_cleanup_after_success", 10)),
    "ids_restart_after_complete": (("api_contract", 10), ("api_contract", 10)),
    "silent_after_failed_submit": (("no_deadlock", 2), ("no_deadlock", 4)),
    "ignores_transfer_completed": (("termination", 7), ("termination", 7)),
}

HISTORICAL = {
    "start_after_terminal_submits",
    "reopen_only_for_canceled",
    "invalid_outcome_journalled",
    "dm_delay_not_validated",
    "transfer_latched_before_validation",
}

_RESULTS: dict[str, MutantResult] = {}


def _result(name: str) -> MutantResult:
    if name not in _RESULTS:
        (mutant,) = [m for m in MUTANTS if m.name == name]
        _RESULTS[name] = run_mutant(mutant)
    return _RESULTS[name]


def test_catalogue_shape() -> None:
    names = [m.name for m in MUTANTS]
    assert len(names) == len(set(names)) >= 15
    assert {m.name for m in MUTANTS if m.historical} == HISTORICAL
    assert set(names) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_mutant_is_killed_by_the_expected_property(name: str) -> None:
    result = _result(name)
    got = tuple((k.property, k.length) for k in result.kills)
    assert got == EXPECTED[name]
    assert result.killed
    assert result.mutant.expected in result.properties


def test_kill_rate_is_100_percent() -> None:
    results = [_result(m.name) for m in MUTANTS]
    table = kill_table(results)
    assert f"killed {len(MUTANTS)}/{len(MUTANTS)} mutants (100%)" in table
    assert "historical reference bugs killed 5/5" in table


@pytest.mark.parametrize("name", sorted(HISTORICAL))
def test_historical_counterexamples_reproduce(name: str) -> None:
    (mutant,) = [m for m in MUTANTS if m.name == name]
    target = target_from_factory(mutant.factory, f"mutant:{name}")
    report = check(target, (HandoffOrder.SOURCE_FIRST,), max_states=50_000)
    failure = report.first_failure()
    assert failure is not None and failure[1].counterexample is not None
    cex = failure[1].counterexample
    monitor = Monitor.for_order(load_spec(), cex.order)
    assert run_steps(target, cex, monitor).reproduced
    # the same inputs do not break our coordinator
    assert not run_steps(target_from_factory(_ours()), cex, monitor).reproduced


def _ours() -> type:
    from dmocker.handoff import HandoffCoordinator

    return HandoffCoordinator


def test_infinite_mutant_is_caught_on_the_fly() -> None:
    """StartTransfer on every duplicate makes the state space infinite; safety still fails, not 'inconclusive'."""
    (mutant,) = [m for m in MUTANTS if m.name == "start_transfer_on_every_duplicate"]
    target = target_from_factory(mutant.factory)
    report = check(target, (HandoffOrder.SOURCE_FIRST,), max_states=800, stop_at_first=False)
    o = report.orders[0]
    assert o.truncated  # it never runs out of states...
    statuses = {p.name: p.status for p in o.properties}
    assert statuses["each_action_once_per_epoch"] is Status.FAIL  # ...yet the violation is found
    assert statuses["no_deadlock"] is Status.INCONCLUSIVE
    assert report.exit_code == 1

