"""Further plausible coordinator bugs, one per class (see __init__.MUTANTS for the list)."""

from __future__ import annotations

import dataclasses

from dmocker.handoff import (
    ActivateDestination,
    CancelDestination,
    CancelSource,
    Complete,
    Completion,
    Fact,
    HandoffError,
    HandoffOrder,
    IssuedAction,
    Outcome,
    OutcomeKind,
    ReleaseSource,
    ReserveDestination,
    SourceHeld,
    StartTransfer,
    SubmitPrefill,
    TransferCompleted,
)

from ._base import WrappedCoordinator
from .historical import TracksPayloads, scheduling_error


class NoCancelDestination(WrappedCoordinator):
    """Cleanup never cancels the destination (the inner coordinator waits for it forever)."""

    def _translate(self, ia: IssuedAction) -> list[IssuedAction]:
        if isinstance(ia.action, CancelDestination):
            return []
        return super()._translate(ia)


class CleanupForgetsUnansweredReserve(WrappedCoordinator):
    """No CancelDestination when the reserve was issued but not yet acknowledged (ownership assumed absent)."""

    def _translate(self, ia: IssuedAction) -> list[IssuedAction]:
        if isinstance(ia.action, CancelDestination) and self._unanswered("ReserveDestination"):
            return self._ack_inner(ia.id, Outcome(OutcomeKind.NOOP))
        return super()._translate(ia)

    def _unanswered(self, name: str) -> bool:
        return name in self._names.values() and not self._flags.get(f"answered:{name}")

    def on_action_outcome(self, action_id: int, outcome: Outcome) -> list[IssuedAction]:
        name = self._name_of(action_id)
        out = super().on_action_outcome(action_id, outcome)
        if name is not None:
            self._flags[f"answered:{name}"] = True
        return out


class CleanupIgnoresOutstandingSubmit(CleanupForgetsUnansweredReserve):
    """No CancelSource for a submit that was not acknowledged yet (the prefill may still run)."""

    def _translate(self, ia: IssuedAction) -> list[IssuedAction]:
        if isinstance(ia.action, CancelSource) and self._unanswered("SubmitPrefill"):
            return self._ack_inner(ia.id, Outcome(OutcomeKind.NOOP))
        return WrappedCoordinator._translate(self, ia)


class CompleteBeforeSourceReleased(WrappedCoordinator):
    """Completes as soon as ReleaseSource is issued, not when it is acknowledged."""

    def _translate(self, ia: IssuedAction) -> list[IssuedAction]:
        out = super()._translate(ia)
        if isinstance(ia.action, ReleaseSource):
            self._flags["early_complete"] = True
            out.append(self._invent(Complete(self._hid)))
        return out

    @property
    def is_complete(self) -> bool:
        return bool(self._flags.get("early_complete")) or self._inner.is_complete

    @property
    def completion(self) -> Completion | None:
        if self._flags.get("early_complete") and self._inner.completion is None:
            return Completion.SUCCESS
        return self._inner.completion


class StartTransferTwice(WrappedCoordinator):
    """Issues StartTransfer twice (e.g. once per side becoming ready)."""

    def _translate(self, ia: IssuedAction) -> list[IssuedAction]:
        out = super()._translate(ia)
        if isinstance(ia.action, StartTransfer):
            out.append(self._invent(StartTransfer(self._hid, ia.action.delay_ms)))
        return out


class StartTransferOnEveryDuplicate(WrappedCoordinator):
    """Re-issues StartTransfer on every duplicate fact once both sides are held: infinite states."""

    def _translate(self, ia: IssuedAction) -> list[IssuedAction]:
        if isinstance(ia.action, StartTransfer):
            self._flags["delay"] = ia.action.delay_ms
        return super()._translate(ia)

    def on_fact(self, fact: Fact) -> list[IssuedAction]:
        out = super().on_fact(fact)
        delay = self._flags.get("delay")
        if not out and isinstance(delay, float) and fact.handoff_id == self._hid and not self.is_complete:
            out = [self._invent(StartTransfer(self._hid, delay))]
        return out


class DuplicateHeldReReserves(WrappedCoordinator):
    """Duplicate SourceHeld facts are not suppressed: each one reserves the destination again."""

    def on_fact(self, fact: Fact) -> list[IssuedAction]:
        seen = bool(self._flags.get("held"))
        out = super().on_fact(fact)
        if isinstance(fact, SourceHeld) and fact.handoff_id == self._hid:
            if seen and not out and self._order is HandoffOrder.SOURCE_FIRST and not self.is_complete:
                out = [self._invent(ReserveDestination(self._hid))]
            self._flags["held"] = True
        return out


class ReleaseBeforeActivation(WrappedCoordinator):
    """Releases the source when activation is issued, before it is applied."""

    def _translate(self, ia: IssuedAction) -> list[IssuedAction]:
        out = super()._translate(ia)
        if isinstance(ia.action, ActivateDestination):
            out.append(self._invent(ReleaseSource(self._hid)))
        return out


class ActivateBeforeTransferCompleted(WrappedCoordinator):
    """Activates the destination as soon as the transfer starts."""

    def _translate(self, ia: IssuedAction) -> list[IssuedAction]:
        out = super()._translate(ia)
        if isinstance(ia.action, StartTransfer):
            out.append(self._invent(ActivateDestination(self._hid)))
        return out


class ReserveBeforeHeld(WrappedCoordinator):
    """Source-first reserves the destination when the prefill is submitted, not when it is held."""

    def on_action_outcome(self, action_id: int, outcome: Outcome) -> list[IssuedAction]:
        out = super().on_action_outcome(action_id, outcome)
        if self._name_of(action_id) == "SubmitPrefill" and outcome.kind is OutcomeKind.SUBMITTED and not self._flags.get("early"):
            self._flags["early"] = True
            out.append(self._invent(ReserveDestination(self._hid)))
        return out


class SubmitBeforeReserved(WrappedCoordinator):
    """Destination-first submits the prefill at start, without waiting for the reservation."""

    def start(self) -> list[IssuedAction]:
        out = super().start()
        if out:
            out.append(self._invent(SubmitPrefill(self._hid)))
        return out


class NoForeignCheck(WrappedCoordinator):
    """Facts for another handoff id are taken as ours."""

    def on_fact(self, fact: Fact) -> list[IssuedAction]:
        return super().on_fact(dataclasses.replace(fact, handoff_id=self._hid))


class CancelFailedAsApplied(WrappedCoordinator):
    """A FAILED cancel is treated as done instead of CLEANUP_FAILED."""

    def on_action_outcome(self, action_id: int, outcome: Outcome) -> list[IssuedAction]:
        if outcome.kind is OutcomeKind.FAILED and self._name_of(action_id) in ("CancelSource", "CancelDestination"):
            outcome = Outcome(OutcomeKind.APPLIED)
        return super().on_action_outcome(action_id, outcome)


class FallbackNotValidated(TracksPayloads):
    """A non-finite fallback delay is scheduled as is when the timing has no model."""

    def on_fact(self, fact: Fact) -> list[IssuedAction]:
        try:
            return super().on_fact(fact)
        except HandoffError as exc:
            timing, tokens = self._payloads(fact)
            if scheduling_error(fact, exc) and (timing is None or timing.delay_ms(tokens) is None):
                self._flags["unvalidated_transfer"] = True
                return [self._invent(StartTransfer(self._hid, self._scheduled_delay(timing, tokens)))]
            raise


class ReopenCancelsSource(WrappedCoordinator):
    """The post-success reopen cancels the (already released) source as well."""

    def _translate(self, ia: IssuedAction) -> list[IssuedAction]:
        out = super()._translate(ia)
        if isinstance(ia.action, CancelDestination) and self._inner.completion is Completion.SUCCESS:
            out.insert(0, self._invent(CancelSource(self._hid)))
        return out


class IdsRestartAfterComplete(WrappedCoordinator):
    """Action ids restart at 0 when Complete clears the journal."""

    def _translate(self, ia: IssuedAction) -> list[IssuedAction]:
        out = super()._translate(ia)
        if isinstance(ia.action, Complete):
            self._next = 0
        return out


class SilentAfterFailedSubmit(WrappedCoordinator):
    """A FAILED submit swallows the cleanup, and the coordinator goes quiet: a deadlock."""

    def on_action_outcome(self, action_id: int, outcome: Outcome) -> list[IssuedAction]:
        if self._flags.get("dead"):
            return []
        out = super().on_action_outcome(action_id, outcome)
        if self._name_of(action_id) == "SubmitPrefill" and outcome.kind is OutcomeKind.FAILED and not self.is_complete:
            self._flags["dead"] = True
            return []
        return out

    def on_fact(self, fact: Fact) -> list[IssuedAction]:
        return [] if self._flags.get("dead") else super().on_fact(fact)

    def start(self) -> list[IssuedAction]:
        return [] if self._flags.get("dead") else super().start()


class IgnoresTransferCompleted(WrappedCoordinator):
    """TransferCompleted is dropped, so the destination is never activated."""

    def on_fact(self, fact: Fact) -> list[IssuedAction]:
        if isinstance(fact, TransferCompleted) and fact.handoff_id == self._hid:
            return []
        return super().on_fact(fact)


class CancelDestinationWaitsForReserveAck(CleanupForgetsUnansweredReserve):
    """Cleanup defers CancelDestination until the reserve is acknowledged: a lost ack never cleans up."""

    def _translate(self, ia: IssuedAction) -> list[IssuedAction]:
        if isinstance(ia.action, CancelDestination) and self._unanswered("ReserveDestination"):
            self._flags["deferred_cancel"] = ia.id
            return []
        return WrappedCoordinator._translate(self, ia)

    def on_action_outcome(self, action_id: int, outcome: Outcome) -> list[IssuedAction]:
        out = super().on_action_outcome(action_id, outcome)
        deferred = self._flags.get("deferred_cancel")
        if isinstance(deferred, int) and self._name_of(action_id) == "ReserveDestination":
            del self._flags["deferred_cancel"]
            out.append(self._emit(CancelDestination(self._hid), deferred))
        return out
