"""A wrapper around our HandoffCoordinator that mutants bend in one place each.

Mutants only use the coordinator's public API, so they stay valid when its internals change.
The wrapper renumbers actions: the ids it hands out are its own, mapped to the inner
coordinator's ids, so a mutant can drop, duplicate or invent actions and still keep ids
consecutive (an id bug is then a mutant of its own, not an accident).  Invented actions
(``inner id None``) have their outcomes recorded by the wrapper.
"""

from __future__ import annotations

from typing import Hashable

from dmocker.handoff import (
    Action,
    Completion,
    Fact,
    HandoffCoordinator,
    HandoffError,
    HandoffErrorKind,
    HandoffOrder,
    IssuedAction,
    Outcome,
)

_NEVER_ISSUED = 10**12  # an inner id the inner coordinator never hands out


class WrappedCoordinator:
    """Behaves exactly like HandoffCoordinator; mutants override the ``_after_*`` hooks."""

    def __init__(self, handoff_id: Hashable, order: HandoffOrder, *, fallback_transfer_delay_ms: float = 0.0) -> None:
        self._inner = HandoffCoordinator(handoff_id, order, fallback_transfer_delay_ms=fallback_transfer_delay_ms)
        self._hid = handoff_id
        self._order = order
        self._next = 0
        self._to_inner: dict[int, int | None] = {}
        self._from_inner: dict[int, int] = {}
        self._invented: dict[int, tuple[str, Outcome | None]] = {}
        self._names: dict[int, str] = {}
        self._flags: dict[str, Hashable] = {}

    # --- API ---------------------------------------------------------------------------------

    @property
    def fallback_transfer_delay_ms(self) -> float:
        return self._inner.fallback_transfer_delay_ms

    @fallback_transfer_delay_ms.setter
    def fallback_transfer_delay_ms(self, value: float) -> None:
        self._inner.fallback_transfer_delay_ms = value

    @property
    def is_complete(self) -> bool:
        return self._inner.is_complete

    @property
    def completion(self) -> Completion | None:
        return self._inner.completion

    def start(self) -> list[IssuedAction]:
        return self._out(self._inner.start())

    def on_fact(self, fact: Fact) -> list[IssuedAction]:
        return self._out(self._inner.on_fact(fact))

    def on_action_outcome(self, action_id: int, outcome: Outcome) -> list[IssuedAction]:
        if action_id in self._invented:
            return self._answer_invented(action_id, outcome)
        inner = self._to_inner.get(action_id)
        return self._out(self._inner.on_action_outcome(_NEVER_ISSUED if inner is None else inner, outcome))

    def snapshot(self) -> Hashable:
        return (
            self._inner.snapshot(),
            self._next,
            tuple(sorted(self._to_inner.items(), key=lambda kv: kv[0])),
            tuple(sorted(self._invented.items(), key=lambda kv: kv[0])),
            tuple(sorted(self._names.items())),
            tuple(sorted(self._flags.items())),
        )

    # --- helpers for mutants -----------------------------------------------------------------

    def _emit(self, action: Action, inner_id: int | None) -> IssuedAction:
        oid = self._next
        self._next += 1
        self._names[oid] = type(action).__name__
        if inner_id is None:
            self._invented[oid] = (type(action).__name__, None)
        else:
            self._to_inner[oid] = inner_id
            self._from_inner[inner_id] = oid
        return IssuedAction(oid, action)

    def _invent(self, action: Action) -> IssuedAction:
        return self._emit(action, None)

    def _out(self, issued: list[IssuedAction]) -> list[IssuedAction]:
        out: list[IssuedAction] = []
        for ia in issued:
            out.extend(self._translate(ia))
        return out

    def _translate(self, ia: IssuedAction) -> list[IssuedAction]:
        """Hook: what the outside sees for one inner action (default: the same action)."""
        return [self._emit(ia.action, ia.id)]

    def _answer_invented(self, action_id: int, outcome: Outcome) -> list[IssuedAction]:
        if self.is_complete:
            return []
        name, previous = self._invented[action_id]
        if previous is not None:
            if previous == outcome:
                return []
            raise HandoffError(HandoffErrorKind.CONFLICTING_OUTCOME, f"conflicting outcome for {action_id}")
        self._invented[action_id] = (name, outcome)
        return []

    def _name_of(self, outer_id: int) -> str | None:
        return self._names.get(outer_id)

    def _ack_inner(self, inner_id: int, outcome: Outcome) -> list[IssuedAction]:
        """Answer an inner action ourselves (a mutant that pretends something was acknowledged)."""
        return self._out(self._inner.on_action_outcome(inner_id, outcome))
