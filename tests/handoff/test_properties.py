"""One example test per coordinator property of the reference's coordinator tests (``ai-dynamo/dynamo`` ``lib/mocker/src/common/handoff_tests.rs``)."""

from __future__ import annotations

import math

import pytest

from dmocker.handoff import (
    CancelDestination,
    CancelSource,
    Canceled,
    Complete,
    Completion,
    DestinationReserved,
    Failed,
    HandoffCoordinator,
    HandoffError,
    HandoffErrorKind,
    HandoffOrder,
    IssuedAction,
    Outcome,
    OutcomeKind,
    ReserveDestination,
    SourceHeld,
    StartTransfer,
    TimedOut,
    TransferCompleted,
    TransferTiming,
    TransferTimingMode,
    order_for_engine,
)

SF, DF = HandoffOrder.SOURCE_FIRST, HandoffOrder.DESTINATION_FIRST
H = "h"
T = TransferTiming(TransferTimingMode.FULL_PROMPT, 100)
SUB, ACC, SCH, APP, NOOP = (Outcome(k) for k in (OutcomeKind.SUBMITTED, OutcomeKind.ACCEPTED, OutcomeKind.SCHEDULED, OutcomeKind.APPLIED, OutcomeKind.NOOP))


def kinds(issued: list[IssuedAction]) -> list[type]:
    return [type(a.action) for a in issued]


def one(issued: list[IssuedAction]) -> IssuedAction:
    assert len(issued) == 1, issued
    return issued[0]


def to_scheduled(c: HandoffCoordinator, timing: TransferTiming = T, tokens: int = 100) -> IssuedAction:
    """Drive a clean run up to the issued StartTransfer."""
    first = one(c.start())
    if c.order is SF:
        c.on_action_outcome(first.id, SUB)
        reserve = one(c.on_fact(SourceHeld(H, timing)))
        c.on_action_outcome(reserve.id, ACC)
        return one(c.on_fact(DestinationReserved(H, tokens)))
    c.on_action_outcome(first.id, ACC)
    submit = one(c.on_fact(DestinationReserved(H, tokens)))
    c.on_action_outcome(submit.id, SUB)
    return one(c.on_fact(SourceHeld(H, timing)))


def to_success(c: HandoffCoordinator) -> None:
    transfer = to_scheduled(c)
    c.on_action_outcome(transfer.id, SCH)
    activate = one(c.on_fact(TransferCompleted(H)))
    release = one(c.on_action_outcome(activate.id, APP))
    assert kinds(c.on_action_outcome(release.id, APP)) == [Complete]


@pytest.mark.parametrize("order", [SF, DF])
def test_both_orders_reach_safe_completion_and_late_outcomes_are_ignored(order: HandoffOrder) -> None:
    c = HandoffCoordinator(H, order)
    to_success(c)
    assert c.is_complete and c.completion is Completion.SUCCESS
    assert c.on_action_outcome(0, SUB) == [] and c.on_action_outcome(999, APP) == []


NORMALIZED = {
    "source_held": "SourceHeld",
    "destination_accepted": "DestinationAccepted",
    "destination_reserved": "DestinationReserved",
    "destination_activated": "DestinationActivated",
    "source_released": "SourceReleased",
    "completed": "Completed",
}
REFERENCE_LIFECYCLES = {
    SF: ["SourceHeld", "DestinationAccepted", "DestinationReserved", "DestinationActivated", "SourceReleased", "Completed"],
    DF: ["DestinationAccepted", "DestinationReserved", "SourceHeld", "DestinationActivated", "SourceReleased", "Completed"],
}


@pytest.mark.parametrize("order", [SF, DF])
def test_clean_run_produces_the_reference_normalized_lifecycle(order: HandoffOrder) -> None:
    """Walk a clean run through the table; its observable logs, normalized, are the reference's."""
    from dmocker.handoff import compile_table, load_spec
    from dmocker.handoff import Step

    spec = load_spec()
    table = compile_table(spec, order)
    c = HandoffCoordinator(H, order)
    logs: list[str] = []

    def step(event: str, call) -> list[IssuedAction]:  # type: ignore[no-untyped-def]
        entry = table.entry(c.state, table.event_index(event))
        assert isinstance(entry, Step)
        logs.extend(entry.logs)
        issued = call()
        assert [type(a.action).__name__ for a in issued] == list(entry.emits)
        return issued

    first = one(step("start", c.start))
    if order is SF:
        step("SubmitPrefill.Submitted", lambda: c.on_action_outcome(first.id, SUB))
        reserve = one(step("SourceHeld", lambda: c.on_fact(SourceHeld(H, T))))
        step("ReserveDestination.Accepted", lambda: c.on_action_outcome(reserve.id, ACC))
        transfer = one(step("DestinationReserved", lambda: c.on_fact(DestinationReserved(H, 9))))
    else:
        step("ReserveDestination.Accepted", lambda: c.on_action_outcome(first.id, ACC))
        submit = one(step("DestinationReserved", lambda: c.on_fact(DestinationReserved(H, 9))))
        step("SubmitPrefill.Submitted", lambda: c.on_action_outcome(submit.id, SUB))
        transfer = one(step("SourceHeld", lambda: c.on_fact(SourceHeld(H, T))))
    step("StartTransfer.Scheduled", lambda: c.on_action_outcome(transfer.id, SCH))
    activate = one(step("TransferCompleted", lambda: c.on_fact(TransferCompleted(H))))
    release = one(step("ActivateDestination.Applied", lambda: c.on_action_outcome(activate.id, APP)))
    step("ReleaseSource.Applied", lambda: c.on_action_outcome(release.id, APP))
    normalized = [NORMALIZED[k] for k in logs if k in NORMALIZED]
    assert normalized == REFERENCE_LIFECYCLES[order] == list(spec.lifecycle(order))
    assert c.completion is Completion.SUCCESS


def test_cancel_after_held_with_reserve_unacknowledged_issues_both_cancels() -> None:
    c = HandoffCoordinator(H, SF)
    c.on_action_outcome(one(c.start()).id, SUB)
    one(c.on_fact(SourceHeld(H, T)))
    cancels = c.on_fact(Canceled(H))
    assert kinds(cancels) == [CancelSource, CancelDestination]
    assert c.on_action_outcome(cancels[0].id, NOOP) == []
    assert kinds(c.on_action_outcome(cancels[1].id, NOOP)) == [Complete]
    assert c.completion is Completion.CANCELED


@pytest.mark.parametrize("terminal", [TimedOut, Failed])
def test_lost_activation_ack_is_cleaned_up_and_late_applied_ignored(terminal: type) -> None:
    c = HandoffCoordinator(H, SF)
    transfer = to_scheduled(c)
    c.on_action_outcome(transfer.id, SCH)
    activate = one(c.on_fact(TransferCompleted(H)))
    cancels = c.on_fact(terminal(H))
    assert kinds(cancels) == [CancelSource, CancelDestination]
    for a in cancels:
        c.on_action_outcome(a.id, APP)
    assert c.completion is Completion.CANCELED
    assert c.on_action_outcome(activate.id, APP) == []


def test_ordering_violations_are_rejected() -> None:
    c = HandoffCoordinator(H, SF)
    with pytest.raises(HandoffError) as e:
        c.on_fact(SourceHeld(H, T))
    assert e.value.kind is HandoffErrorKind.HELD_BEFORE_SUBMITTED
    with pytest.raises(HandoffError) as e:
        c.on_fact(DestinationReserved(H, 1))
    assert e.value.kind is HandoffErrorKind.RESERVED_BEFORE_ACCEPTED
    with pytest.raises(HandoffError) as e:
        c.on_fact(TransferCompleted(H))
    assert e.value.kind is HandoffErrorKind.COMPLETED_BEFORE_SCHEDULED


@pytest.mark.parametrize(
    "timing,kind",
    [
        (TransferTiming(TransferTimingMode.FULL_PROMPT, 10, 1, float("nan")), HandoffErrorKind.INVALID_BANDWIDTH),
        (TransferTiming(TransferTimingMode.FULL_PROMPT, 10, 1, -1.0), HandoffErrorKind.INVALID_BANDWIDTH),
        (TransferTiming(TransferTimingMode.FULL_PROMPT, 10, 1, float("inf")), HandoffErrorKind.INVALID_BANDWIDTH),
        (TransferTiming(TransferTimingMode.FULL_PROMPT, 1 << 60, 1 << 60, 1e-300), HandoffErrorKind.INVALID_DELAY),
    ],
)
def test_invalid_timing_is_rejected_and_nothing_latched(timing: TransferTiming, kind: HandoffErrorKind) -> None:
    c = HandoffCoordinator(H, SF)
    c.on_action_outcome(one(c.start()).id, SUB)
    before = c.snapshot()
    with pytest.raises(HandoffError) as e:
        c.on_fact(SourceHeld(H, timing))
    assert e.value.kind is kind and c.snapshot() == before
    assert kinds(c.on_fact(SourceHeld(H, T))) == [ReserveDestination]  # the corrected fact proceeds


def test_timeout_before_first_ack_cleans_only_the_issued_side() -> None:
    c = HandoffCoordinator(H, SF)
    c.start()
    assert kinds(c.on_fact(TimedOut(H))) == [CancelSource]


def test_destination_first_unacknowledged_submit_cleans_both_sides() -> None:
    c = HandoffCoordinator(H, DF)
    c.on_action_outcome(one(c.start()).id, ACC)
    one(c.on_fact(DestinationReserved(H, 10)))  # SubmitPrefill issued, never acknowledged
    assert kinds(c.on_fact(TimedOut(H))) == [CancelSource, CancelDestination]


def test_timeout_after_scheduled_and_lost_release_ack_clean_both() -> None:
    c = HandoffCoordinator(H, SF)
    transfer = to_scheduled(c)
    c.on_action_outcome(transfer.id, SCH)
    assert kinds(c.on_fact(TimedOut(H))) == [CancelSource, CancelDestination]
    c2 = HandoffCoordinator(H, SF)
    transfer = to_scheduled(c2)
    c2.on_action_outcome(transfer.id, SCH)
    activate = one(c2.on_fact(TransferCompleted(H)))
    one(c2.on_action_outcome(activate.id, APP))  # ReleaseSource issued, ack lost
    assert kinds(c2.on_fact(Failed(H))) == [CancelSource, CancelDestination]


def test_duplicates_idempotent_conflicts_and_foreign_ids_are_errors() -> None:
    c = HandoffCoordinator(H, SF)
    submit = one(c.start())
    assert c.on_action_outcome(submit.id, SUB) == []
    assert c.on_action_outcome(submit.id, SUB) == []
    with pytest.raises(HandoffError) as e:
        c.on_action_outcome(submit.id, Outcome(OutcomeKind.FAILED, "x"))
    assert e.value.kind is HandoffErrorKind.CONFLICTING_OUTCOME
    one(c.on_fact(SourceHeld(H, T)))
    assert c.on_fact(SourceHeld(H, TransferTiming(TransferTimingMode.FULL_PROMPT, 1, 1, -5.0))) == []
    with pytest.raises(HandoffError) as e:
        c.on_fact(Canceled("other"))
    assert e.value.kind is HandoffErrorKind.FOREIGN_HANDOFF
    with pytest.raises(HandoffError) as e:
        c.on_action_outcome(77, APP)
    assert e.value.kind is HandoffErrorKind.UNKNOWN_ACTION


def test_start_twice_or_after_terminal_issues_nothing() -> None:
    c = HandoffCoordinator(H, SF)
    assert len(c.start()) == 1 and c.start() == []
    d = HandoffCoordinator(H, DF)
    assert kinds(d.on_fact(Canceled(H))) == [Complete]
    assert d.completion is Completion.CANCELED and d.start() == []


@pytest.mark.parametrize("bandwidth", [None, 0.0])
def test_zero_or_missing_bandwidth_uses_fallback(bandwidth: float | None) -> None:
    c = HandoffCoordinator(H, SF, fallback_transfer_delay_ms=7.5)
    transfer = to_scheduled(c, TransferTiming(TransferTimingMode.DESTINATION_MISSING, 10, 1024, bandwidth))
    assert isinstance(transfer.action, StartTransfer) and transfer.action.delay_ms == 7.5


def test_delay_formula_examples() -> None:
    assert TransferTiming(TransferTimingMode.FULL_PROMPT, 128, 1_000_000, 1.0).delay_ms(0) == 128.0
    missing = TransferTiming(TransferTimingMode.DESTINATION_MISSING, 100, 1000, 1.0)
    assert math.isclose(missing.delay_ms(20) or 0, 0.02) and math.isclose(missing.full_prompt_delay_ms() or 0, 0.1)
    assert TransferTiming(TransferTimingMode.FULL_PROMPT, 1, 1, 1.0, state_bytes=999).delay_ms(0) == pytest.approx(0.001)


@pytest.mark.parametrize("terminal", [Canceled, Failed, TimedOut])
def test_every_terminal_fact_reopens_cleanup_after_success(terminal: type) -> None:
    c = HandoffCoordinator(H, SF)
    to_success(c)
    cancel = one(c.on_fact(terminal(H)))
    assert isinstance(cancel.action, CancelDestination)
    assert not c.is_complete and c.completion is Completion.SUCCESS
    with pytest.raises(HandoffError) as e:
        c.on_action_outcome(0, SUB)  # issued before the first Complete
    assert e.value.kind is HandoffErrorKind.UNKNOWN_ACTION
    assert c.on_fact(terminal(H)) == []
    assert kinds(c.on_action_outcome(cancel.id, APP)) == [Complete]
    assert c.is_complete and c.completion is Completion.CANCELED
    assert c.on_fact(Canceled(H)) == []


def test_destination_missing_validates_the_scheduled_delay_and_a_corrected_fact_proceeds() -> None:
    timing = TransferTiming(TransferTimingMode.DESTINATION_MISSING, 0, 1 << 60, 1e-300)
    c = HandoffCoordinator(H, SF)
    c.on_action_outcome(one(c.start()).id, SUB)
    reserve = one(c.on_fact(SourceHeld(H, timing)))  # full-prompt delay (0 tokens) is finite
    c.on_action_outcome(reserve.id, ACC)
    before = c.snapshot()
    with pytest.raises(HandoffError) as e:
        c.on_fact(DestinationReserved(H, 1 << 60))  # scheduled delay overflows to inf
    assert e.value.kind is HandoffErrorKind.INVALID_DELAY and c.snapshot() == before
    assert kinds(c.on_fact(DestinationReserved(H, 0))) == [StartTransfer]


def test_non_finite_fallback_rejected_at_construction_and_when_scheduled() -> None:
    with pytest.raises(ValueError):
        HandoffCoordinator(H, SF, fallback_transfer_delay_ms=float("nan"))
    with pytest.raises(ValueError):
        HandoffCoordinator(H, SF, fallback_transfer_delay_ms=-1.0)
    c = HandoffCoordinator(H, SF)
    c.fallback_transfer_delay_ms = float("inf")
    with pytest.raises(HandoffError) as e:
        to_scheduled(c)
    assert e.value.kind is HandoffErrorKind.INVALID_DELAY


def test_rejected_outcome_is_not_journalled() -> None:
    c = HandoffCoordinator(H, SF)
    submit = one(c.start())
    with pytest.raises(HandoffError) as e:
        c.on_action_outcome(submit.id, APP)
    assert e.value.kind is HandoffErrorKind.INVALID_OUTCOME
    with pytest.raises(HandoffError) as e:
        c.on_action_outcome(submit.id, APP)  # still invalid, not "conflicting"
    assert e.value.kind is HandoffErrorKind.INVALID_OUTCOME
    assert c.on_action_outcome(submit.id, SUB) == []


def test_failed_cancel_is_a_cleanup_error_and_failed_normal_action_starts_cleanup() -> None:
    c = HandoffCoordinator(H, SF)
    submit = one(c.start())
    cancel = one(c.on_action_outcome(submit.id, Outcome(OutcomeKind.FAILED, "no room")))
    assert isinstance(cancel.action, CancelSource)
    with pytest.raises(HandoffError) as e:
        c.on_action_outcome(cancel.id, Outcome(OutcomeKind.FAILED))
    assert e.value.kind is HandoffErrorKind.CLEANUP_FAILED
    assert kinds(c.on_action_outcome(cancel.id, NOOP)) == [Complete]


def test_action_ids_keep_counting_after_the_journal_is_cleared() -> None:
    c = HandoffCoordinator(H, SF)
    to_success(c)
    assert one(c.on_fact(Canceled(H))).id == 6


def test_order_for_engine() -> None:
    assert order_for_engine("vLLM") is SF and order_for_engine("TRT-LLM") is SF and order_for_engine("trtllm") is SF
    assert order_for_engine("SGLang") is DF
    with pytest.raises(ValueError):
        order_for_engine("tgi")
    assert HandoffOrder.parse("destination-first") is DF
