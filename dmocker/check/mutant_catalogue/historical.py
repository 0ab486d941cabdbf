"""The five documented historical bugs of the reference coordinator, re-created as mutants.

Each mutant reproduces the bug's first observable symptom on top of our coordinator.
"""

from __future__ import annotations

import math

from dmocker.handoff import (
    Completion,
    DestinationReserved,
    Fact,
    Failed,
    HandoffError,
    HandoffErrorKind,
    HandoffOrder,
    IssuedAction,
    Outcome,
    ReserveDestination,
    SourceHeld,
    StartTransfer,
    SubmitPrefill,
    TimedOut,
    TransferTiming,
    TransferTimingMode,
)

from ._base import WrappedCoordinator


class StartAfterTerminalSubmits(WrappedCoordinator):
    """Old reference: start() after a terminal fact already completed the handoff still submits."""

    def start(self) -> list[IssuedAction]:
        first = not self._flags.get("started")
        self._flags["started"] = True
        if first and self.is_complete and self.completion is Completion.CANCELED:
            action = SubmitPrefill(self._hid) if self._order is HandoffOrder.SOURCE_FIRST else ReserveDestination(self._hid)
            return [self._invent(action)]
        return super().start()


class ReopenOnlyForCanceled(WrappedCoordinator):
    """Old reference: after success only a Canceled fact reopens cleanup; Failed/TimedOut are dropped."""

    def on_fact(self, fact: Fact) -> list[IssuedAction]:
        if (
            isinstance(fact, (Failed, TimedOut))
            and fact.handoff_id == self._hid
            and self.is_complete
            and self.completion is Completion.SUCCESS
        ):
            return []
        return super().on_fact(fact)


class InvalidOutcomeJournalled(WrappedCoordinator):
    """Old reference: the outcome is journalled before it is validated, so a rejected outcome sticks."""

    def on_action_outcome(self, action_id: int, outcome: Outcome) -> list[IssuedAction]:
        recorded = self._flags.get(f"journal:{action_id}")
        if recorded is not None and not self.is_complete:
            if recorded == (outcome.kind.value, outcome.message):
                return []
            raise HandoffError(HandoffErrorKind.CONFLICTING_OUTCOME, f"conflicting outcome for {action_id}")
        try:
            return super().on_action_outcome(action_id, outcome)
        except HandoffError as exc:
            if exc.kind is HandoffErrorKind.INVALID_OUTCOME:
                self._flags[f"journal:{action_id}"] = (outcome.kind.value, outcome.message)
            raise


def _timing_key(t: TransferTiming) -> tuple[str, int, int | None, float | None, int]:
    return (t.mode.value, t.full_prompt_tokens, t.kv_bytes_per_token, t.bandwidth_gb_s, t.state_bytes)


def _valid(x: float | None) -> bool:
    return x is None or (math.isfinite(x) and x >= 0.0)


def scheduling_error(fact: Fact, exc: HandoffError) -> bool:
    """Whether an INVALID_DELAY came from the delay to schedule (not from SourceHeld validation)."""
    if exc.kind is not HandoffErrorKind.INVALID_DELAY:
        return False
    if isinstance(fact, SourceHeld):
        t = fact.transfer_timing
        return _valid(t.bandwidth_gb_s) and _valid(t.full_prompt_delay_ms())
    return True


class TracksPayloads(WrappedCoordinator):
    """Remembers the payloads the inner coordinator took, to compute the delay it refused."""

    def on_fact(self, fact: Fact) -> list[IssuedAction]:
        out = super().on_fact(fact)
        if isinstance(fact, SourceHeld) and fact.handoff_id == self._hid and "timing" not in self._flags:
            self._flags["timing"] = _timing_key(fact.transfer_timing)
        if isinstance(fact, DestinationReserved) and fact.handoff_id == self._hid and "tokens" not in self._flags:
            self._flags["tokens"] = fact.transferable_prompt_tokens
        return out

    def _payloads(self, fact: Fact) -> tuple[TransferTiming | None, int]:
        if isinstance(fact, SourceHeld):
            timing: TransferTiming | None = fact.transfer_timing
        else:
            raw = self._flags.get("timing")
            timing = None
            if isinstance(raw, tuple):
                mode, full, kv, bw, state = raw
                timing = TransferTiming(TransferTimingMode(mode), full, kv, bw, state)
        stored = self._flags.get("tokens")
        tokens = fact.transferable_prompt_tokens if isinstance(fact, DestinationReserved) else (
            stored if isinstance(stored, int) else 0
        )
        return timing, tokens

    def _scheduled_delay(self, timing: TransferTiming | None, tokens: int) -> float:
        model = None if timing is None else timing.delay_ms(tokens)
        return float(self.fallback_transfer_delay_ms) if model is None else model


class DestinationMissingDelayNotValidated(TracksPayloads):
    """Old reference: in DESTINATION_MISSING mode the delay actually scheduled is not validated."""

    def on_fact(self, fact: Fact) -> list[IssuedAction]:
        try:
            return super().on_fact(fact)
        except HandoffError as exc:
            timing, tokens = self._payloads(fact)
            if scheduling_error(fact, exc) and timing is not None and timing.mode is TransferTimingMode.DESTINATION_MISSING:
                self._flags["unvalidated_transfer"] = True
                return [self._invent(StartTransfer(self._hid, self._scheduled_delay(timing, tokens)))]
            raise


class TransferLatchedBeforeValidation(WrappedCoordinator):
    """Old reference: the transfer is latched as issued before its delay is validated."""

    def on_fact(self, fact: Fact) -> list[IssuedAction]:
        try:
            return super().on_fact(fact)
        except HandoffError as exc:
            if scheduling_error(fact, exc):
                self._flags["transfer_latched"] = True
            raise

    def _translate(self, ia: IssuedAction) -> list[IssuedAction]:
        if isinstance(ia.action, StartTransfer) and self._flags.get("transfer_latched"):
            return []  # "already issued": the corrected re-delivery never transfers
        return super()._translate(ia)
