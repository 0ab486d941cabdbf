"""The stateful kit must find real bugs: wrap our coordinator with known historical bugs."""

from __future__ import annotations

import pytest
from hypothesis import settings

from dmocker.handoff import (
    HandoffCoordinator,
    HandoffOrder,
    IssuedAction,
    StartTransfer,
    SubmitPrefill,
)
from dmocker.testing import coordinator_state_machine


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


@pytest.mark.parametrize("mutant", [StartAfterTerminal, NegativeDelay], ids=lambda m: m.__name__)
def test_kit_flags_mutant(mutant: type[HandoffCoordinator]) -> None:
    machine = coordinator_state_machine(mutant, HandoffOrder.SOURCE_FIRST)
    case = machine.TestCase
    case.settings = settings(case.settings, max_examples=300, stateful_step_count=30, derandomize=True)
    with pytest.raises(AssertionError):
        case("runTest").runTest()
