"""Coordinators a user might write against the public API, for `dmocker check` tests.

Both delegate the protocol to our :class:`HandoffCoordinator` and differ only in what the
checker must cope with: attribute / dict order that the snapshot observes, and a fallback delay
that is only a constructor keyword.
"""

from __future__ import annotations

from typing import Hashable

from dmocker.handoff import Action, Fact, HandoffCoordinator, HandoffOrder, IssuedAction, Outcome


class AttributeOrderCoordinator:
    """Attributes set in non-alphabetical order, a dict in non-sorted key order, a set; the
    snapshot shows all three orders (Python guarantees insertion order, so this is legal)."""

    def __init__(self, handoff_id: Hashable, order: HandoffOrder, *, fallback_transfer_delay_ms: float = 0.0) -> None:
        self.zeta = HandoffCoordinator(handoff_id, order, fallback_transfer_delay_ms=fallback_transfer_delay_ms)
        self.alpha = {"z": 1, "a": 2, "m": 3}
        self.middle = ["x"]

    @property
    def fallback_transfer_delay_ms(self) -> float:
        return self.zeta.fallback_transfer_delay_ms

    @fallback_transfer_delay_ms.setter
    def fallback_transfer_delay_ms(self, value: float) -> None:
        self.zeta.fallback_transfer_delay_ms = value

    def start(self) -> list[IssuedAction]:
        return self.zeta.start()

    def on_fact(self, fact: Fact) -> list[IssuedAction]:
        return self.zeta.on_fact(fact)

    def on_action_outcome(self, action_id: int, outcome: Outcome) -> list[IssuedAction]:
        return self.zeta.on_action_outcome(action_id, outcome)

    @property
    def is_complete(self) -> bool:
        return self.zeta.is_complete

    @property
    def completion(self) -> object:
        return self.zeta.completion

    def snapshot(self) -> Hashable:
        return (tuple(vars(self)), tuple(self.alpha), self.zeta.snapshot())


class ConstructorOnlyFallback:
    """The fallback delay is a constructor keyword and nothing more (all the public API promises):
    there is no assignable ``fallback_transfer_delay_ms`` attribute."""

    __slots__ = ("_inner",)

    def __init__(self, handoff_id: Hashable, order: HandoffOrder, *, fallback_transfer_delay_ms: float = 0.0) -> None:
        self._inner = HandoffCoordinator(handoff_id, order, fallback_transfer_delay_ms=fallback_transfer_delay_ms)

    def start(self) -> list[IssuedAction]:
        return self._inner.start()

    def on_fact(self, fact: Fact) -> list[IssuedAction]:
        return self._inner.on_fact(fact)

    def on_action_outcome(self, action_id: int, outcome: Outcome) -> list[IssuedAction]:
        return self._inner.on_action_outcome(action_id, outcome)

    @property
    def is_complete(self) -> bool:
        return self._inner.is_complete

    @property
    def completion(self) -> object:
        return self._inner.completion

    def snapshot(self) -> Hashable:
        return self._inner.snapshot()


__all__ = ["Action", "AttributeOrderCoordinator", "ConstructorOnlyFallback"]
