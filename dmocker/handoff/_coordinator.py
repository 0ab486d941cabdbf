"""The handoff coordinator: compiled-table state + the action journal + stored payloads.

Everything the coordinator decides comes from the compiled table of the spec; this module only
holds what the table cannot: the journal (which action id is which action, and the outcome
recorded for it), the payloads facts carry (timing, transferable tokens) and the fallback delay.

Inputs are applied atomically: every check runs before anything changes, so a rejected input
(a :class:`HandoffError`) leaves the coordinator exactly as it was.  The reference latches
``held``/``reserved`` before it rejects an invalid scheduled delay, so a corrected re-delivery is
then ignored as a duplicate and the handoff can only be cancelled; here the corrected fact
proceeds.
"""

from __future__ import annotations

import math
from typing import Callable, Final, Hashable, Mapping, cast

from mypy_extensions import mypyc_attr

from dmocker.handoff._registry import ACTION_CLASSES, FACT_CLASSES
from dmocker.handoff._spec import ProtocolSpec, derived
from dmocker.handoff._spec_load import load_spec
from dmocker.handoff._table import (
    STEP_TAG,
    CompiledTable,
    NotApplicable,
    Reject,
    Step,
    compile_table,
)
from dmocker.handoff._types import (
    Action,
    ActivateDestination,
    CancelDestination,
    CancelSource,
    Complete,
    Completion,
    DestinationReserved,
    Fact,
    HandoffError,
    HandoffErrorKind,
    HandoffOrder,
    IssuedAction,
    Outcome,
    OutcomeKind,
    ReleaseSource,
    ReserveDestination,
    SourceHeld,
    StartTransfer,
    SubmitPrefill,
    TransferTiming,
)

# Name <-> class, from the one registry (checked against the spec when it loads).
_ACTION_TYPES: Final[Mapping[str, type]] = ACTION_CLASSES
_ACTION_NAMES: Final[dict[type, str]] = {cls: name for name, cls in ACTION_CLASSES.items()}
_FACT_NAMES: Final[dict[type, str]] = {cls: name for name, cls in FACT_CLASSES.items()}
# Every action but StartTransfer carries its handoff id only: built by calling its class.
_BY_HANDOFF_ID: Final[dict[str, Callable[[Hashable], Action]]] = {
    name: cast(Callable[[Hashable], Action], cls) for name, cls in ACTION_CLASSES.items() if cls is not StartTransfer
}


# One shared message-less Outcome per kind value, journalled by on_outcome_kind (outcomes are
# frozen values compared with ==, so sharing them is invisible).
_PLAIN_OUTCOMES: Final[dict[str, Outcome]] = {kind.value: Outcome(kind) for kind in OutcomeKind}


_isfinite: Final = math.isfinite


def _build(ctor: Callable[[Hashable], Action], hid: Hashable) -> Action:
    """``ctor(hid)``, the registry's classes constructed by name (a direct constructor call
    compiled; a class held in a variable is called through the type).  Anything else is called."""
    if ctor is SubmitPrefill:
        return SubmitPrefill(hid)
    if ctor is ReserveDestination:
        return ReserveDestination(hid)
    if ctor is ActivateDestination:
        return ActivateDestination(hid)
    if ctor is ReleaseSource:
        return ReleaseSource(hid)
    if ctor is CancelSource:
        return CancelSource(hid)
    if ctor is CancelDestination:
        return CancelDestination(hid)
    if ctor is Complete:
        return Complete(hid)
    return ctor(hid)


def _finite_nonnegative(value: float) -> bool:
    return _isfinite(value) and value >= 0.0


class _Plan:
    """A table Step pre-digested for the hot path: constructors instead of names."""

    __slots__ = ("tag", "next", "emits", "checks", "store_timing", "store_tokens", "transfer", "guarded", "plain")

    def __init__(self, step: Step, clears: frozenset[str]) -> None:
        self.tag = STEP_TAG
        self.next = step.next
        self.emits = tuple(
            (_BY_HANDOFF_ID.get(name), name in clears) for name in step.emits
        )
        self.checks = step.checks
        self.store_timing = "transfer_timing" in step.stores
        self.store_tokens = "transferable_prompt_tokens" in step.stores
        self.transfer = "StartTransfer" in step.emits
        # Most steps neither check payloads nor schedule a transfer: one flag lets _commit skip
        # the payload work for them with a single test.
        self.guarded = bool(self.checks) or self.transfer
        # A step that only moves the state (no checks, stores or actions): most acknowledgements
        # (Submitted, Accepted, Scheduled), which on_outcome_kind applies without _commit.
        self.plain = not (self.guarded or self.emits or self.store_timing or self.store_tokens)


class _Compiled:
    """Per-(spec, order) lookups precomputed once and shared by every coordinator."""

    __slots__ = (
        "table",
        "rows",
        "start",
        "fact_events",
        "outcome_events",
        "outcome_by_type",
        "outcome_by_type_value",
        "clears_journal",
        "allowed",
        "cleanup",
        "complete",
    )

    def __init__(self, spec: ProtocolSpec, order: HandoffOrder) -> None:
        self.table: CompiledTable = compile_table(spec, order)
        self.complete = self.table.complete  # per state: the handoff is complete (hot path)
        events = self.table.events
        self.start = events.index("start")
        self.fact_events = {cls: events.index(name) for cls, name in _FACT_NAMES.items()}
        self.outcome_events: dict[tuple[str, OutcomeKind], int] = {}
        for action in spec.actions:
            if action.pending is None:
                continue
            for kind in OutcomeKind:
                self.outcome_events[(action.name, kind)] = events.index(f"{action.name}.{kind.value}")
        # Hot path: action type -> {outcome kind -> event index} (no tuple key to build per call).
        self.outcome_by_type: dict[type, dict[OutcomeKind, int]] = {
            cls: {kind: event for (name, kind), event in self.outcome_events.items() if name == action_name}
            for action_name, cls in _ACTION_TYPES.items()
        }
        # The same, keyed by the kind's value string for on_outcome_kind (a str hashes from its
        # cached hash; an enum member does not).
        self.outcome_by_type_value: dict[type, dict[str, int]] = {
            cls: {kind.value: event for kind, event in by_kind.items()} for cls, by_kind in self.outcome_by_type.items()
        }
        self.clears_journal = frozenset(a.name for a in spec.actions if a.clears_journal)
        self.allowed = {a.name: a.allowed for a in spec.actions}
        self.cleanup = frozenset(a.name for a in spec.actions if a.cleanup)
        self.rows: tuple[tuple[object, ...], ...] = tuple(
            tuple(_Plan(e, self.clears_journal) if isinstance(e, Step) else e for e in row) for row in self.table.rows
        )


_DEFAULT: dict[HandoffOrder, _Compiled] = {}


# The last (spec, order) looked up and its tables: a driver that builds one coordinator per
# request (the replay) always asks for the same pair, and an identity test spares the dict
# lookup below.
_LAST: list[tuple[ProtocolSpec | None, HandoffOrder, _Compiled]] = []


def _compiled(spec: ProtocolSpec | None, order: HandoffOrder) -> _Compiled:
    if _LAST:
        last_spec, last_order, last = _LAST[0]
        if spec is last_spec and order is last_order:
            return last
    found = _lookup_compiled(spec, order)
    _LAST[:] = [(spec, order, found)]
    return found


def _lookup_compiled(spec: ProtocolSpec | None, order: HandoffOrder) -> _Compiled:
    if spec is None:
        # The default spec is resolved once per process: constructing a coordinator per request
        # must not touch the file system.
        found = _DEFAULT.get(order)
        if found is None:
            found = _DEFAULT[order] = _lookup_compiled(load_spec(), order)
        return found
    the_spec = spec
    return derived(the_spec, ("coordinator", order), lambda: _Compiled(the_spec, order))


# Compiled by mypyc with the replay's core (setup.py).  It stays open to subclasses written in
# Python (the checker's mutants, fault injection, a user's coordinator): mypyc then keeps method
# calls overridable.
@mypyc_attr(allow_interpreted_subclasses=True)
class HandoffCoordinator:
    """Pure state machine for one prefill-to-decode handoff, driven by the spec's table.

    ``handoff_id`` is any hashable value compared with ``==``.  ``fallback_transfer_delay_ms``
    is the delay used when the timing has no model; it must be finite and >= 0 (it may be
    reassigned later; a non-finite value then makes the transfer step fail INVALID_DELAY).
    """

    __slots__ = (
        "_handoff_id",
        "_order",
        "_c",
        "_state",
        "_next_id",
        "_issued",
        "_outcomes",
        "_timing",
        "_tokens",
        "_fallback",
        "_snapshot",
    )

    def __init__(
        self,
        handoff_id: Hashable,
        order: HandoffOrder,
        *,
        fallback_transfer_delay_ms: float = 0.0,
        spec: ProtocolSpec | None = None,
    ) -> None:
        # ``type(...) is`` rather than isinstance: same answer (an enum with members cannot be
        # subclassed) without EnumType's slow instance check, once per request in the replay.
        if type(order) is not HandoffOrder:
            raise ValueError(f"order must be a HandoffOrder, got {order!r}")
        fallback = float(fallback_transfer_delay_ms)
        if not _finite_nonnegative(fallback):
            raise ValueError(f"fallback_transfer_delay_ms must be finite and >= 0, got {fallback_transfer_delay_ms!r}")
        self._handoff_id = handoff_id
        self._order = order
        self._c = _compiled(spec, order)
        self._state = self._c.table.initial
        self._next_id = 0
        self._issued: dict[int, Action] = {}
        self._outcomes: dict[int, Outcome] = {}
        self._timing: TransferTiming | None = None
        self._tokens: int | None = None
        self._fallback = fallback
        self._snapshot: Hashable | None = None

    @property
    def fallback_transfer_delay_ms(self) -> float:
        """Delay used when the timing has no model. May be reassigned (even to a bad value:
        the transfer step then fails INVALID_DELAY, which the checker exercises)."""
        return self._fallback

    @fallback_transfer_delay_ms.setter
    def fallback_transfer_delay_ms(self, value: float) -> None:
        self._fallback = value
        self._snapshot = None

    # --- public API --------------------------------------------------------------------------

    @property
    def handoff_id(self) -> Hashable:
        return self._handoff_id

    @property
    def order(self) -> HandoffOrder:
        return self._order

    @property
    def is_complete(self) -> bool:
        return self._c.table.complete[self._state]

    @property
    def completion(self) -> Completion | None:
        return self._c.table.completions[self._state]

    @property
    def state(self) -> int:
        """Index of the current product state in the compiled table."""
        return self._state

    @property
    def table(self) -> CompiledTable:
        return self._c.table

    def state_label(self) -> str:
        return self._c.table.state_label(self._state)

    def start(self) -> list[IssuedAction]:
        entry = self._c.rows[self._state][self._c.start]
        if not isinstance(entry, _Plan):
            return []
        return self._commit(entry, None, None)

    def on_fact(self, fact: Fact) -> list[IssuedAction]:
        if not (fact.handoff_id == self._handoff_id):
            raise HandoffError(
                HandoffErrorKind.FOREIGN_HANDOFF,
                f"fact {type(fact).__name__} belongs to handoff {fact.handoff_id!r}, not {self._handoff_id!r}",
            )
        event = self._c.fact_events.get(type(fact))
        if event is None:
            raise TypeError(f"not a handoff fact: {fact!r}")
        entry = self._c.rows[self._state][event]
        if type(entry) is _Plan:
            timing = fact.transfer_timing if isinstance(fact, SourceHeld) else None
            tokens = fact.transferable_prompt_tokens if isinstance(fact, DestinationReserved) else None
            return self._commit(entry, timing, tokens)
        if isinstance(entry, Reject):
            raise HandoffError(entry.kind, self._reject_message(entry.kind, type(fact).__name__))
        return []

    def on_action_outcome(self, action_id: int, outcome: Outcome) -> list[IssuedAction]:
        table = self._c.table
        if table.complete[self._state]:
            return []
        action = self._issued.get(action_id)
        if action is None:
            raise HandoffError(
                HandoffErrorKind.UNKNOWN_ACTION,
                f"unknown handoff action {action_id!r} for handoff {self._handoff_id!r}",
            )
        previous = self._outcomes.get(action_id)
        if previous is not None:
            if previous == outcome:
                return []
            raise HandoffError(
                HandoffErrorKind.CONFLICTING_OUTCOME,
                f"conflicting outcome for handoff action {action_id}: {_show(outcome)} after {_show(previous)}",
            )
        event = self._c.outcome_by_type[type(action)].get(outcome.kind)
        if event is not None:
            entry = self._c.rows[self._state][event]
            if isinstance(entry, _Plan):
                return self._commit(entry, None, None, action_id, outcome)
        name = _ACTION_NAMES[type(action)]
        if event is None:
            raise HandoffError(HandoffErrorKind.INVALID_OUTCOME, f"{name} takes no outcome, got {_show(outcome)}")
        if isinstance(entry, Reject):
            if entry.kind is HandoffErrorKind.CLEANUP_FAILED:
                raise HandoffError(entry.kind, f"handoff cleanup action {action_id} ({name}) failed: {outcome.message}")
            allowed = ", ".join(self._c.allowed[name]) or "none"
            raise HandoffError(
                entry.kind, f"invalid outcome {_show(outcome)} for {name} (action {action_id}; allowed: {allowed})"
            )
        if isinstance(entry, NotApplicable):  # pragma: no cover - the journal and the table disagree
            raise AssertionError(f"journal holds unanswered {name} but the table has it settled")
        return []

    def on_outcome_kind(self, action_id: int, kind: OutcomeKind) -> list[IssuedAction]:
        """``on_action_outcome(action_id, Outcome(kind))``, for drivers answering without a message.

        The replay acknowledges ~5 actions per request this way.  The common case (a journalled,
        unanswered action whose outcome steps the table) is resolved here without building or
        comparing an Outcome and without hashing enum members; every other case (complete,
        unknown id, duplicate or conflicting answer, an outcome the action does not take, a
        rejection, an ignored input) is handed to :meth:`on_action_outcome` unchanged, so
        results, errors and messages are exactly those of the public API.
        """
        action = self._issued.get(action_id)
        outcomes = self._outcomes
        c = self._c
        state = self._state
        if action is not None and action_id not in outcomes and not c.complete[state]:
            value = kind._value_
            event = c.outcome_by_type_value[type(action)].get(value)
            if event is not None:
                entry = c.rows[state][event]
                if type(entry) is _Plan:
                    if entry.plain:  # _commit's apply part for a step that only moves the state
                        self._snapshot = None
                        outcomes[action_id] = _PLAIN_OUTCOMES[value]
                        self._state = entry.next
                        return []
                    return self._commit(entry, None, None, action_id, _PLAIN_OUTCOMES[value])
        return self.on_action_outcome(action_id, Outcome(kind))

    def snapshot(self) -> Hashable:
        """A canonical, hashable key of everything that decides future behaviour.

        Action ids appear relative to the next id, so two coordinators that differ only in how
        many actions they issued in the past (with the same journal shape) have equal keys.
        Floats are keyed by ``repr`` so NaN compares equal to itself.  Cached until the next change.
        """
        if self._snapshot is not None:
            return self._snapshot
        journal = tuple(
            (
                self._next_id - aid,
                _ACTION_NAMES[type(action)],
                _float_key(action.delay_ms) if isinstance(action, StartTransfer) else None,
                None if aid not in self._outcomes else (self._outcomes[aid].kind.value, self._outcomes[aid].message),
            )
            for aid, action in sorted(self._issued.items())
        )
        timing = self._timing
        timing_key = (
            None
            if timing is None
            else (
                timing.mode.value,
                timing.full_prompt_tokens,
                timing.kv_bytes_per_token,
                _float_key(timing.bandwidth_gb_s),
                timing.state_bytes,
            )
        )
        self._snapshot = (
            self._order.value, self._state, journal, timing_key, self._tokens, _float_key(self._fallback)
        )
        return self._snapshot

    # --- internals ---------------------------------------------------------------------------

    def _commit(
        self,
        plan: _Plan,
        timing: TransferTiming | None,
        tokens: int | None,
        answered_id: int = -1,
        answered: Outcome | None = None,
    ) -> list[IssuedAction]:
        """Run the step's checks on the payloads, then apply it; nothing changes on failure.

        ``answered`` (with its action id ``answered_id``) is the outcome this step consumes,
        journalled on success; passed as two arguments so the hot path builds no tuple.
        """
        delay: float | None = None
        if plan.guarded:
            timing_now = timing if timing is not None else self._timing
            tokens_now = tokens if tokens is not None else self._tokens
            for guard, error in plan.checks:
                ok, delay = self._guard(guard, timing_now, tokens_now, delay)
                if not ok:
                    raise HandoffError(error, self._guard_message(guard, timing_now, delay))
            if plan.transfer and delay is None:
                delay = self._scheduled_delay(timing_now, tokens_now)
        # Everything checked: apply.
        self._snapshot = None
        if answered is not None:
            self._outcomes[answered_id] = answered
        if plan.store_timing:
            self._timing = timing
        if plan.store_tokens:
            self._tokens = tokens
        self._state = plan.next
        issued: list[IssuedAction] = []
        if not plan.emits:
            return issued
        hid = self._handoff_id
        for ctor, clears in plan.emits:
            action: Action
            if ctor is None:  # StartTransfer, the one action with a payload
                assert delay is not None  # a transfer step is guarded: its delay is set above
                action = StartTransfer(hid, delay)
            else:
                action = _build(ctor, hid)
            aid = self._next_id
            self._next_id = aid + 1
            self._issued[aid] = action
            issued.append(IssuedAction(aid, action))
            if clears:
                self._issued.clear()
                self._outcomes.clear()
        return issued

    def _scheduled_delay(self, timing: TransferTiming | None, tokens: int | None) -> float:
        model = None if timing is None or tokens is None else timing.delay_ms(tokens)
        return float(self._fallback) if model is None else model

    def _guard(
        self, guard: str, timing: TransferTiming | None, tokens: int | None, delay: float | None
    ) -> tuple[bool, float | None]:
        # _finite_nonnegative is spelled out inline here: three guards run per replayed request.
        if guard == "bandwidth_valid":
            bw = None if timing is None else timing.bandwidth_gb_s
            return (bw is None or (_isfinite(bw) and bw >= 0.0)), delay
        if guard == "full_prompt_delay_valid":
            full = None if timing is None else timing.full_prompt_delay_ms()
            return (full is None or (_isfinite(full) and full >= 0.0)), delay
        if guard == "scheduled_delay_valid":
            model = None if timing is None or tokens is None else timing.delay_ms(tokens)
            scheduled = float(self._fallback) if model is None else model
            return (_isfinite(scheduled) and scheduled >= 0.0), scheduled
        raise AssertionError(f"unknown guard {guard!r}")  # pragma: no cover - spec loader checks

    def _guard_message(self, guard: str, timing: TransferTiming | None, delay: float | None) -> str:
        if guard == "bandwidth_valid":
            return f"invalid handoff transfer bandwidth {timing.bandwidth_gb_s if timing else None!r}"
        if guard == "full_prompt_delay_valid":
            return f"invalid handoff transfer delay {timing.full_prompt_delay_ms() if timing else None!r} (full prompt)"
        return f"invalid handoff transfer delay {delay!r} (scheduled)"

    def _reject_message(self, kind: HandoffErrorKind, fact: str) -> str:
        what = {
            HandoffErrorKind.HELD_BEFORE_SUBMITTED: "source held before prefill submission was acknowledged",
            HandoffErrorKind.RESERVED_BEFORE_ACCEPTED: "destination reserved before ownership was accepted",
            HandoffErrorKind.COMPLETED_BEFORE_SCHEDULED: "transfer completed before it was scheduled",
        }.get(kind, kind.value)
        return f"{what} ({fact} for handoff {self._handoff_id!r} in {self.state_label()})"

    def __repr__(self) -> str:
        return f"HandoffCoordinator({self._handoff_id!r}, {self._order}, {self.state_label()})"


def _float_key(value: float | None) -> str | None:
    return None if value is None else repr(float(value))


def _show(outcome: Outcome) -> str:
    return outcome.kind.value if not outcome.message else f"{outcome.kind.value}({outcome.message!r})"
