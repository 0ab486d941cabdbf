"""Hypothesis stateful testing kit for any handoff coordinator (ours or a backend team's).

``coordinator_state_machine(factory, order)`` returns a ``RuleBasedStateMachine`` class whose
environment delivers, at any step, any fact (duplicates, foreign ids, adversarial timings),
any outcome for any issued or unknown action id (valid, invalid, FAILED, conflicting), a
second ``start()``, a non-finite fallback, and "healthy" progress (the right answer to the
oldest open action, or the fact that is due) so that runs reach success, reopen and late
cleanup.  After every step it checks the spec's invariants with the same evaluator as
``dmocker check`` (:class:`dmocker.handoff.Monitor`; ``rejection_changes_nothing``
compares snapshots before and after each input); Hypothesis shrinks a failure to a short
step list.

Usage::

    from dmocker.handoff import HandoffOrder
    from dmocker.testing import coordinator_state_machine
    TestMine = coordinator_state_machine(MyCoordinator, HandoffOrder.SOURCE_FIRST).TestCase
"""

from __future__ import annotations

from typing import Callable, Hashable, Protocol, cast

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from dmocker.handoff import (
    FACT_CLASSES,
    Completion,
    DestinationReserved,
    Fact,
    HandoffError,
    HandoffOrder,
    IssuedAction,
    Outcome,
    OutcomeKind,
    Monitor,
    MonitorState,
    ProtocolSpec,
    SourceHeld,
    StepEvent,
    TransferCompleted,
    TransferTiming,
    TransferTimingMode,
    fair_environment,
    load_spec,
)

__all__ = ["CoordinatorLike", "coordinator_state_machine", "TIMINGS", "TOKENS", "FALLBACKS", "structural_key"]


class CoordinatorLike(Protocol):
    """The public API a coordinator needs to be tested (that of HandoffCoordinator)."""

    fallback_transfer_delay_ms: float

    def start(self) -> list[IssuedAction]: ...
    def on_fact(self, fact: Fact) -> list[IssuedAction]: ...
    def on_action_outcome(self, action_id: int, outcome: Outcome) -> list[IssuedAction]: ...
    @property
    def is_complete(self) -> bool: ...
    @property
    def completion(self) -> Completion | None: ...


_FULL = TransferTimingMode.FULL_PROMPT
_MISSING = TransferTimingMode.DESTINATION_MISSING
#: Timing payloads, adversarial ones included (no model, zero/NaN/negative/inf/tiny bandwidth).
TIMINGS: tuple[TransferTiming, ...] = (
    TransferTiming(_FULL, 100),
    TransferTiming(_FULL, 128, 1_000_000, 1.0),
    TransferTiming(_MISSING, 100, 1000, 1.0),
    TransferTiming(_FULL, 100, 1024, 0.0),
    TransferTiming(_FULL, 100, 1024, float("nan")),
    TransferTiming(_FULL, 100, 1024, -1.0),
    TransferTiming(_MISSING, 0, 1 << 60, 1e-300),
    TransferTiming(_FULL, 1 << 60, 1 << 60, 1e-300),
)
#: Transferable-token payloads: zero, small, ordinary, huge.
TOKENS: tuple[int, ...] = (0, 3, 100, 1 << 60)
#: Fallback delays, including non-finite ones assigned after construction.
FALLBACKS: tuple[float, ...] = (0.0, 1.0, float("inf"), float("nan"))


def structural_key(obj: object) -> Hashable:
    """A canonical key of an object's state: its ``snapshot()`` if it has one, else its
    attributes, recursively (floats by repr so NaN equals NaN; dicts sorted)."""
    snap = getattr(obj, "snapshot", None)
    if callable(snap):
        return snap()  # type: ignore[no-any-return]
    return _structure(obj, 0)


def _structure(value: object, depth: int) -> Hashable:
    if depth > 8:
        return repr(value)
    if isinstance(value, float):
        return ("f", repr(value))
    if isinstance(value, (int, str, bool, type(None))):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(_structure(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return tuple(sorted(((repr(k), _structure(v, depth + 1)) for k, v in value.items())))
    if isinstance(value, (set, frozenset)):
        return tuple(sorted(repr(v) for v in value))
    slots = getattr(type(value), "__slots__", ())
    attrs = dict(getattr(value, "__dict__", {}))
    for name in slots if isinstance(slots, (list, tuple)) else ():
        if hasattr(value, name):
            attrs[name] = getattr(value, name)
    if attrs:
        return (type(value).__name__, _structure(attrs, depth + 1))
    return repr(value)


def coordinator_state_machine(
    factory: Callable[[Hashable, HandoffOrder], CoordinatorLike],
    order: HandoffOrder,
    *,
    spec: ProtocolSpec | None = None,
    handoff_id: Hashable = "handoff-0",
) -> type[RuleBasedStateMachine]:
    """A RuleBasedStateMachine class exercising ``factory(handoff_id, order)``."""
    the_spec = spec if spec is not None else load_spec()
    fair = fair_environment(the_spec)
    good = fair.success
    terminal_facts = tuple(FACT_CLASSES[name] for name in the_spec.terminal_facts)

    class CoordinatorMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.coordinator = factory(handoff_id, order)
            self.monitor = Monitor.for_order(the_spec, order)
            self.monitor_state: MonitorState = self.monitor.initial
            self.issued: list[IssuedAction] = []
            #: action name per issued id (the first issue wins, as in the checker)
            self.names: dict[int, str] = {}
            self.answered: dict[int, Outcome] = {}
            self.facts: set[str] = set()
            self.violations: list[str] = []

        # --- delivery with bookkeeping --------------------------------------------------

        def _deliver(
            self,
            call: Callable[[], list[IssuedAction]],
            fact: Fact | None = None,
            action_id: int | None = None,
            outcome: Outcome | None = None,
        ) -> None:
            before = structural_key(self.coordinator)
            error = None
            issued: list[IssuedAction] = []
            try:
                issued = list(call())
            except HandoffError as exc:
                error = exc.kind
            changed = structural_key(self.coordinator) != before
            answered = self.names.get(action_id) if action_id is not None else None
            event = StepEvent(
                handoff_id,
                fact=fact,
                outcome=outcome,
                answered_action=answered,
                issued=tuple(issued),
                error=error,
                changed=changed,
                completion=self.coordinator.completion,
            )
            if error is None:
                if fact is not None:
                    self.facts.add(type(fact).__name__)
                if action_id is not None and outcome is not None and answered is not None:
                    self.answered.setdefault(action_id, outcome)
            self.issued.extend(issued)
            for a in issued:
                self.names.setdefault(a.id, type(a.action).__name__)
            self.monitor_state, found = self.monitor.step(self.monitor_state, event)
            assert not found, "; ".join(f"{v.invariant}: {v.message}" for v in found)

        def _fact(self, fact: Fact) -> None:
            self._deliver(lambda: self.coordinator.on_fact(fact), fact=fact)

        def _outcome(self, aid: int, outcome: Outcome) -> None:
            self._deliver(lambda: self.coordinator.on_action_outcome(aid, outcome), action_id=aid, outcome=outcome)

        # --- rules ------------------------------------------------------------------------

        @rule()
        def start(self) -> None:
            self._deliver(self.coordinator.start)

        @rule(timing=st.sampled_from(TIMINGS), foreign=st.booleans())
        def source_held(self, timing: TransferTiming, foreign: bool) -> None:
            self._fact(SourceHeld(("other", handoff_id) if foreign else handoff_id, timing))

        @rule(tokens=st.sampled_from(TOKENS), foreign=st.booleans())
        def destination_reserved(self, tokens: int, foreign: bool) -> None:
            self._fact(DestinationReserved(("other", handoff_id) if foreign else handoff_id, tokens))

        @rule(foreign=st.booleans())
        def transfer_completed(self, foreign: bool) -> None:
            self._fact(TransferCompleted(("other", handoff_id) if foreign else handoff_id))

        @rule(kind=st.sampled_from(terminal_facts), foreign=st.booleans())
        def terminal(self, kind: type[Fact], foreign: bool) -> None:
            make = cast(Callable[[Hashable], Fact], kind)  # terminal facts carry no payload
            self._fact(make(("other", handoff_id) if foreign else handoff_id))

        @rule(pick=st.integers(0, 63), kind=st.sampled_from(list(OutcomeKind)), message=st.sampled_from(["", "boom"]))
        def any_outcome(self, pick: int, kind: OutcomeKind, message: str) -> None:
            aid = self.issued[pick % len(self.issued)].id if self.issued else pick
            self._outcome(aid, Outcome(kind, message))

        @rule(offset=st.integers(1, 3))
        def unknown_outcome(self, offset: int) -> None:
            top = max((a.id for a in self.issued), default=-1)
            self._outcome(top + offset, Outcome(OutcomeKind.APPLIED))

        @rule(fallback=st.sampled_from(FALLBACKS))
        def set_fallback(self, fallback: float) -> None:
            self.coordinator.fallback_transfer_delay_ms = fallback

        @rule(timing=st.sampled_from(TIMINGS), tokens=st.sampled_from(TOKENS), steps=st.integers(1, 12))
        def healthy_progress(self, timing: TransferTiming, tokens: int, steps: int) -> None:
            for _ in range(steps):
                if not self._progress_once(timing, tokens):
                    return

        def _progress_once(self, timing: TransferTiming, tokens: int) -> bool:
            for issued in self.issued:
                name = type(issued.action).__name__
                if name not in fair.unanswered and issued.id not in self.answered and not self.coordinator.is_complete:
                    self._outcome(issued.id, Outcome(good[name]))
                    return True
            if not self.issued:
                self._deliver(self.coordinator.start)
                return True
            done = {type(a.action).__name__ for a in self.issued}
            payloads: dict[str, object] = {"transfer_timing": timing, "transferable_prompt_tokens": tokens}
            for due in fair.due_facts:
                if due.action in done and due.fact not in self.facts and self._answered_ok(due.action):
                    self._fact(due.build(handoff_id, payloads))
                    return True
            return False

        def _answered_ok(self, name: str) -> bool:
            return any(
                type(a.action).__name__ == name and self.answered.get(a.id, Outcome(OutcomeKind.FAILED)).kind is good[name]
                for a in self.issued
            )

        @invariant()
        def completion_is_consistent(self) -> None:
            if self.coordinator.is_complete:
                assert self.coordinator.completion is not None

    CoordinatorMachine.__name__ = f"CoordinatorMachine_{order.name}"
    CoordinatorMachine.__qualname__ = CoordinatorMachine.__name__
    return CoordinatorMachine
