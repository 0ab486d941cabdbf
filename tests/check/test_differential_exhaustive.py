"""Exhaustive differential check: ours and the independent reference model in lockstep.

The lockstep coordinator feeds every input to both and raises AssertionError (not a
HandoffError, so the checker reports an ``api_contract`` violation with a shortest
counterexample) as soon as they disagree on the actions issued, the error kind, or the
completion.  Exploring it checks the two agree on *every* input sequence of the value set.
"""

from __future__ import annotations

import dataclasses
from typing import Hashable

from dmocker.check import DEFAULT_VALUES, check, target_from_factory
from dmocker.handoff import (
    Completion,
    Fact,
    HandoffCoordinator,
    HandoffError,
    HandoffOrder,
    IssuedAction,
    Outcome,
)
from tests.handoff.reference_model import ReferenceModel

_MODEL_KEY = target_from_factory(
    lambda hid, order, fallback_transfer_delay_ms=0.0: ReferenceModel(hid, order, fallback_transfer_delay_ms),
    "reference-model",
)


class Lockstep:
    def __init__(self, handoff_id: Hashable, order: HandoffOrder, *, fallback_transfer_delay_ms: float = 0.0) -> None:
        self.ours = HandoffCoordinator(handoff_id, order, fallback_transfer_delay_ms=fallback_transfer_delay_ms)
        self.model = ReferenceModel(handoff_id, order, fallback_transfer_delay_ms)

    @property
    def fallback_transfer_delay_ms(self) -> float:
        return self.ours.fallback_transfer_delay_ms

    @fallback_transfer_delay_ms.setter
    def fallback_transfer_delay_ms(self, value: float) -> None:
        self.ours.fallback_transfer_delay_ms = value
        self.model.fallback_transfer_delay_ms = value

    @property
    def is_complete(self) -> bool:
        return self.ours.is_complete

    @property
    def completion(self) -> Completion | None:
        return self.ours.completion

    def snapshot(self) -> Hashable:
        # the model's dataclass repr covers every field (floats by repr, so NaN equals itself)
        return (self.ours.snapshot(), repr(self.model.f))

    def _both(self, name: str, fast: str, *args: object) -> list[IssuedAction]:
        results = []
        try:
            results.append(("ok", getattr(self.ours, name)(*args)))
        except HandoffError as exc:
            results.append(("error", exc.kind))
        # The model deep-copies its state on every public call to be atomic, which dominates the
        # run time.  Call its unguarded method instead; keep a (cheap, structural) backup only
        # when ours rejected, i.e. when the model is expected to reject and roll back too.
        backup = _MODEL_KEY.clone(self.model) if results[0][0] == "error" else None
        try:
            results.append(("ok", getattr(self.model, fast)(*args)))
        except HandoffError as exc:
            results.append(("error", exc.kind))
            if backup is not None:
                self.model = backup  # type: ignore[assignment]
        if results[0] != results[1]:
            raise AssertionError(f"{name}{args}: ours {results[0]!r} != model {results[1]!r}")
        if (self.ours.is_complete, self.ours.completion) != (self.model.is_complete, self.model.completion):
            raise AssertionError(f"{name}{args}: completion differs")
        tag, value = results[0]
        if tag == "error":
            raise HandoffError(value, "both rejected")
        return value  # type: ignore[no-any-return]

    def start(self) -> list[IssuedAction]:
        return self._both("start", "_start")

    def on_fact(self, fact: Fact) -> list[IssuedAction]:
        return self._both("on_fact", "_fact", fact)

    def on_action_outcome(self, action_id: int, outcome: Outcome) -> list[IssuedAction]:
        return self._both("on_action_outcome", "_outcome", action_id, outcome)


def test_ours_agrees_with_the_reference_model_on_every_explored_input() -> None:
    # the model copies its whole state on every call, so one root keeps this test fast
    values = dataclasses.replace(DEFAULT_VALUES, configs=DEFAULT_VALUES.configs[:1])
    report = check(target_from_factory(Lockstep), values=values)
    failure = report.first_failure()
    assert failure is None, (failure[1].message, failure[1].counterexample) if failure else None
    assert all(o.states > 150 and not o.truncated for o in report.orders)
