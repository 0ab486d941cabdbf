"""An independent, flag-based model of the reference coordinator semantics.

Written straight from the prose rules, with no use of the spec or the table, so that a
differential test against :class:`dmocker.handoff.HandoffCoordinator` means something.  Like
ours (and unlike the reference) it rejects inputs atomically: it works on a copy and only
keeps the copy when nothing raised.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

from dmocker.handoff import (
    ActivateDestination,
    CancelDestination,
    CancelSource,
    Canceled,
    Complete,
    Completion,
    DestinationReserved,
    Failed,
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
    TimedOut,
    TransferCompleted,
    TransferTiming,
)

ALLOWED = {
    SubmitPrefill: {OutcomeKind.SUBMITTED},
    ReserveDestination: {OutcomeKind.ACCEPTED},
    StartTransfer: {OutcomeKind.SCHEDULED},
    ActivateDestination: {OutcomeKind.APPLIED},
    ReleaseSource: {OutcomeKind.APPLIED, OutcomeKind.NOOP},
    CancelSource: {OutcomeKind.APPLIED, OutcomeKind.NOOP},
    CancelDestination: {OutcomeKind.APPLIED, OutcomeKind.NOOP},
}


def _ok(x: float) -> bool:
    return math.isfinite(x) and x >= 0


@dataclass
class _Flags:
    started: bool = False
    mode: str = "active"  # active | cleaning | complete
    completion: Completion | None = None
    next_id: int = 0
    issued: dict[int, object] = field(default_factory=dict)
    outcomes: dict[int, Outcome] = field(default_factory=dict)
    submit_issued: bool = False
    submitted: bool = False
    held: bool = False
    timing: TransferTiming | None = None
    release_issued: bool = False
    src_cancel_issued: bool = False
    src_clean: bool = False
    reserve_issued: bool = False
    accepted: bool = False
    reserved: bool = False
    tokens: int | None = None
    activation_issued: bool = False
    activation_applied: bool = False
    dst_cancel_issued: bool = False
    dst_clean: bool = False
    transfer_issued: bool = False
    scheduled: bool = False
    transferred: bool = False


class ReferenceModel:
    def __init__(self, hid: object, order: HandoffOrder, fallback: float = 0.0) -> None:
        self.hid = hid
        self.order = order
        self.fallback_transfer_delay_ms = fallback
        self.f = _Flags()

    @property
    def is_complete(self) -> bool:
        return self.f.mode == "complete"

    @property
    def completion(self) -> Completion | None:
        return self.f.completion

    # Each public call runs on a copy; the copy replaces the state only if nothing raised.
    def _atomic(self, fn, *args):  # type: ignore[no-untyped-def]
        saved = copy.deepcopy(self.f)
        try:
            return fn(*args)
        except HandoffError:
            self.f = saved
            raise

    def start(self) -> list[IssuedAction]:
        return self._atomic(self._start)

    def on_fact(self, fact: object) -> list[IssuedAction]:
        return self._atomic(self._fact, fact)

    def on_action_outcome(self, aid: int, outcome: Outcome) -> list[IssuedAction]:
        return self._atomic(self._outcome, aid, outcome)

    def _issue(self, action: object) -> IssuedAction:
        f = self.f
        aid = f.next_id
        f.next_id += 1
        f.issued[aid] = action
        return IssuedAction(aid, action)  # type: ignore[arg-type]

    def _start(self) -> list[IssuedAction]:
        f = self.f
        if f.started or f.mode != "active":
            return []
        f.started = True
        if self.order is HandoffOrder.SOURCE_FIRST:
            f.submit_issued = True
            return [self._issue(SubmitPrefill(self.hid))]
        f.reserve_issued = True
        return [self._issue(ReserveDestination(self.hid))]

    def _fact(self, fact: object) -> list[IssuedAction]:
        f = self.f
        if not (fact.handoff_id == self.hid):  # type: ignore[attr-defined]
            raise HandoffError(HandoffErrorKind.FOREIGN_HANDOFF, "foreign")
        terminal = isinstance(fact, (Failed, TimedOut, Canceled))
        if f.mode != "active":
            if terminal and f.mode == "complete" and f.completion is Completion.SUCCESS:
                f.mode = "cleaning"
                return self._cleanup()
            return []
        if isinstance(fact, SourceHeld):
            if f.held:
                return []
            if not f.submitted:
                raise HandoffError(HandoffErrorKind.HELD_BEFORE_SUBMITTED, "early")
            t = fact.transfer_timing
            if t.bandwidth_gb_s is not None and not _ok(t.bandwidth_gb_s):
                raise HandoffError(HandoffErrorKind.INVALID_BANDWIDTH, "bw")
            full = t.full_prompt_delay_ms()
            if full is not None and not _ok(full):
                raise HandoffError(HandoffErrorKind.INVALID_DELAY, "delay")
            f.held = True
            f.timing = t
            return self._advance()
        if isinstance(fact, DestinationReserved):
            if f.reserved:
                return []
            if not f.accepted:
                raise HandoffError(HandoffErrorKind.RESERVED_BEFORE_ACCEPTED, "early")
            f.reserved = True
            f.tokens = fact.transferable_prompt_tokens
            return self._advance()
        if isinstance(fact, TransferCompleted):
            if f.transferred:
                return []
            if not f.scheduled:
                raise HandoffError(HandoffErrorKind.COMPLETED_BEFORE_SCHEDULED, "early")
            f.transferred = True
            return self._advance()
        assert terminal
        f.mode = "cleaning"
        return self._cleanup()

    def _outcome(self, aid: int, outcome: Outcome) -> list[IssuedAction]:
        f = self.f
        if f.mode == "complete":
            return []
        if aid not in f.issued:
            raise HandoffError(HandoffErrorKind.UNKNOWN_ACTION, "unknown")
        if aid in f.outcomes:
            if f.outcomes[aid] == outcome:
                return []
            raise HandoffError(HandoffErrorKind.CONFLICTING_OUTCOME, "conflict")
        action = f.issued[aid]
        if outcome.kind is OutcomeKind.FAILED:
            if isinstance(action, (CancelSource, CancelDestination)):
                raise HandoffError(HandoffErrorKind.CLEANUP_FAILED, "cleanup failed")
            f.outcomes[aid] = outcome
            f.mode = "cleaning"
            return self._cleanup()
        if outcome.kind not in ALLOWED[type(action)]:
            raise HandoffError(HandoffErrorKind.INVALID_OUTCOME, "invalid")
        f.outcomes[aid] = outcome
        if isinstance(action, SubmitPrefill):
            f.submitted = True
        elif isinstance(action, ReserveDestination):
            f.accepted = True
        elif isinstance(action, StartTransfer):
            f.scheduled = True
        elif isinstance(action, ActivateDestination):
            f.activation_applied = True
        elif isinstance(action, (ReleaseSource, CancelSource)):
            f.src_clean = True
        elif isinstance(action, CancelDestination):
            f.dst_clean = True
        return self._advance() if f.mode == "active" else self._cleanup()

    def _advance(self) -> list[IssuedAction]:
        f = self.f
        if self.order is HandoffOrder.SOURCE_FIRST and f.held and not f.reserve_issued:
            f.reserve_issued = True
            return [self._issue(ReserveDestination(self.hid))]
        if self.order is HandoffOrder.DESTINATION_FIRST and f.reserved and not f.submit_issued:
            f.submit_issued = True
            return [self._issue(SubmitPrefill(self.hid))]
        if f.held and f.reserved and not f.transfer_issued:
            assert f.timing is not None and f.tokens is not None
            model = f.timing.delay_ms(f.tokens)
            delay = self.fallback_transfer_delay_ms if model is None else model
            if not _ok(delay):
                raise HandoffError(HandoffErrorKind.INVALID_DELAY, "scheduled")
            f.transfer_issued = True
            return [self._issue(StartTransfer(self.hid, delay))]
        if f.transferred and not f.activation_issued:
            f.activation_issued = True
            return [self._issue(ActivateDestination(self.hid))]
        if f.activation_applied and not f.release_issued:
            f.release_issued = True
            return [self._issue(ReleaseSource(self.hid))]
        if f.src_clean:
            return [self._complete()]
        return []

    def _cleanup(self) -> list[IssuedAction]:
        f = self.f
        out = []
        if f.submit_issued and not f.src_cancel_issued and not f.src_clean:
            f.src_cancel_issued = True
            out.append(self._issue(CancelSource(self.hid)))
        if f.reserve_issued and not f.dst_cancel_issued and not f.dst_clean:
            f.dst_cancel_issued = True
            out.append(self._issue(CancelDestination(self.hid)))
        if not out and (not f.submit_issued or f.src_clean) and (not f.reserve_issued or f.dst_clean):
            out.append(self._complete())
        return out

    def _complete(self) -> IssuedAction:
        f = self.f
        f.completion = Completion.CANCELED if f.mode == "cleaning" else Completion.SUCCESS
        f.mode = "complete"
        issued = self._issue(Complete(self.hid))
        f.issued.clear()
        f.outcomes.clear()
        return issued
