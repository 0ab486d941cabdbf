"""The stateful kit must find real bugs: wrap our coordinator with known historical bugs.

The kit and ``dmocker check`` share one invariant evaluator (dmocker.handoff.Monitor),
so the kit also catches mutants from the checker's catalogue, including one only the spec's
``each_action_once_per_epoch`` (formerly a checker built-in) sees.
"""

from __future__ import annotations

import pytest
from hypothesis import Phase, settings

from dmocker.handoff import (
    HandoffCoordinator,
    HandoffOrder,
    IssuedAction,
    StartTransfer,
    SubmitPrefill,
    load_spec,
)
from dmocker.testing import coordinator_state_machine
from dmocker.check.mutant_catalogue import MUTANTS


class StartAfterTerminal(HandoffCoordinator):
    """Reference bug: start() after a terminal fact completed the coordinator issues SubmitPrefill."""

    __slots__ = ("_started",)

    def __init__(self, *a: object, **k: object) -> None:
        super().__init__(*a, **k)  # type: ignore[arg-type]
        self._started = False

    def start(self) -> list[IssuedAction]:
        if self.is_complete and not self._started:
            self._started = True
            return [IssuedAction(99, SubmitPrefill(self.handoff_id))]
        self._started = True
        return super().start()


class NegativeDelay(HandoffCoordinator):
    """Issues a transfer with a negative delay."""

    __slots__ = ()

    def on_fact(self, fact):  # type: ignore[no-untyped-def]
        out = super().on_fact(fact)
        return [IssuedAction(a.id, StartTransfer(a.action.handoff_id, -1.0)) if isinstance(a.action, StartTransfer) else a for a in out]


def _flags(factory: object, expected: str, examples: int = 300) -> None:
    """The kit fails on ``factory``, naming ``expected`` (a regex over invariant ids)."""
    machine = coordinator_state_machine(factory, HandoffOrder.SOURCE_FIRST)  # type: ignore[arg-type]
    case = machine.TestCase
    # finding the bug is the kit's job; shrinking it is Hypothesis' (and the slow part): skip it
    case.settings = settings(case.settings, max_examples=examples, stateful_step_count=30, derandomize=True,
                             phases=(Phase.explicit, Phase.reuse, Phase.generate))
    with pytest.raises(AssertionError, match=expected):
        case("runTest").runTest()


@pytest.mark.parametrize(("mutant", "expected"), [
    pytest.param(StartAfterTerminal, "nothing_after_cancel", marks=pytest.mark.slow),
    (NegativeDelay, "finite_delay"),
], ids=lambda m: getattr(m, "__name__", m))
def test_kit_flags_mutant(mutant: type[HandoffCoordinator], expected: str) -> None:
    _flags(mutant, expected)


@pytest.mark.parametrize(("name", "expected"), [
    # foreign facts taken as ours break one invariant or another (which one depends on the run);
    # the kit's old evaluator counted foreign facts as ours, so it could not see reserve_after_held
    pytest.param("no_foreign_check", "|".join(inv.id for inv in load_spec().invariants),
                 marks=pytest.mark.slow),
    ("duplicate_held_re_reserves", "each_action_once_per_epoch"),
], ids=["no_foreign_check", "duplicate_held_re_reserves"])
def test_kit_flags_catalogue_mutant(name: str, expected: str) -> None:
    (mutant,) = [m for m in MUTANTS if m.name == name]
    _flags(mutant.factory, expected, 300)


HISTORICAL = [m for m in MUTANTS if m.historical]


# the kit takes longest to find this one
_SLOW_TO_FIND = {"reopen_only_for_canceled"}


@pytest.mark.parametrize("name", [pytest.param(m.name, marks=pytest.mark.slow) if m.name in _SLOW_TO_FIND else m.name
                                  for m in HISTORICAL])
def test_kit_flags_every_historical_reference_bug(name: str) -> None:
    """The five documented bugs of the reference, in a bounded profile, each named by its invariant."""
    (mutant,) = [m for m in HISTORICAL if m.name == name]
    _flags(mutant.factory, mutant.expected, 300)
