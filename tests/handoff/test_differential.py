"""Our table-driven coordinator agrees with an independent flag model on random input sequences."""

from __future__ import annotations

from hypothesis import given, strategies as st

from dmocker.handoff import (
    Canceled,
    DestinationReserved,
    Failed,
    HandoffCoordinator,
    HandoffError,
    HandoffOrder,
    Outcome,
    OutcomeKind,
    SourceHeld,
    TimedOut,
    TransferCompleted,
)
from tests.handoff.payloads import FALLBACKS, TIMINGS, TOKENS
from tests.handoff.reference_model import ReferenceModel

HID = "h"

op = st.one_of(
    st.just(("start",)),
    st.tuples(st.just("held"), st.sampled_from(range(len(TIMINGS))), st.booleans()),
    st.tuples(st.just("reserved"), st.sampled_from(range(len(TOKENS))), st.booleans()),
    st.tuples(st.just("fact"), st.sampled_from(["transferred", "failed", "timed_out", "canceled"]), st.booleans()),
    st.tuples(st.just("outcome"), st.integers(0, 12), st.sampled_from(list(OutcomeKind)), st.sampled_from(["", "x"])),
    st.tuples(st.just("fallback"), st.sampled_from(range(len(FALLBACKS)))),
)
# Bias towards outcomes that are "right" for the issued action so runs get deep.
GOOD = st.tuples(st.just("good"), st.integers(0, 3))
# "progress": do what a healthy environment does next (answer the oldest open action well, or
# deliver the fact that is due), so that runs reach success, reopen and late cleanup often.
PROGRESS = st.tuples(st.just("progress"), st.sampled_from(range(len(TIMINGS))), st.sampled_from(range(len(TOKENS))))


def _fact(kind: str, hid: object):  # type: ignore[no-untyped-def]
    return {"transferred": TransferCompleted, "failed": Failed, "timed_out": TimedOut, "canceled": Canceled}[kind](hid)


def _apply(target, step, issued):  # type: ignore[no-untyped-def]
    tag = step[0]
    if tag == "start":
        return target.start()
    if tag == "held":
        return target.on_fact(SourceHeld(HID if not step[2] else "other", TIMINGS[step[1]]))
    if tag == "reserved":
        return target.on_fact(DestinationReserved(HID if not step[2] else "other", TOKENS[step[1]]))
    if tag == "fact":
        return target.on_fact(_fact(step[1], "other" if step[2] else HID))
    if tag == "outcome":
        return target.on_action_outcome(step[1], Outcome(step[2], step[3]))
    if tag == "good":
        if not issued:
            return target.start()
        aid, name = issued[-1 - step[1] % len(issued)]
        kind = {
            "SubmitPrefill": OutcomeKind.SUBMITTED,
            "ReserveDestination": OutcomeKind.ACCEPTED,
            "StartTransfer": OutcomeKind.SCHEDULED,
        }.get(name, OutcomeKind.APPLIED)
        return target.on_action_outcome(aid, Outcome(kind))
    if tag == "fallback":
        target.fallback_transfer_delay_ms = FALLBACKS[step[1]]
        return []
    raise AssertionError(step)


GOOD_KIND = {"SubmitPrefill": OutcomeKind.SUBMITTED, "ReserveDestination": OutcomeKind.ACCEPTED, "StartTransfer": OutcomeKind.SCHEDULED}


def _plan(model: ReferenceModel, step):  # type: ignore[no-untyped-def]
    """Decide the healthy next input from the model's flags (so both sides get the same one)."""
    f = model.f
    for aid in sorted(f.issued):
        if aid not in f.outcomes:
            name = type(f.issued[aid]).__name__
            return ("outcome", aid, GOOD_KIND.get(name, OutcomeKind.APPLIED), "")
    if not f.started:
        return ("start",)
    if f.mode == "active":
        if f.submitted and not f.held:
            return ("held", step[1], False)
        if f.accepted and not f.reserved:
            return ("reserved", step[2], False)
        if f.scheduled and not f.transferred:
            return ("fact", "transferred", False)
    return ("fact", ("canceled", "failed", "timed_out")[step[1] % 3], False)


def _run(target, step, issued):  # type: ignore[no-untyped-def]
    try:
        return ("ok", _apply(target, step, issued))
    except HandoffError as exc:
        return ("error", exc.kind)


@given(
    order=st.sampled_from(list(HandoffOrder)),
    steps=st.lists(st.one_of(op, GOOD, PROGRESS, PROGRESS), min_size=1, max_size=60),
    healthy=st.integers(0, 30),
)
def test_coordinator_matches_flag_model(order: HandoffOrder, steps: list[tuple[object, ...]], healthy: int) -> None:
    ours = HandoffCoordinator(HID, order)
    model = ReferenceModel(HID, order)
    issued: list[tuple[int, str]] = []
    # A healthy prefix of `healthy` progress steps, so late states (success, reopen) are common.
    prefix = [("progress", i % len(TIMINGS), i % len(TOKENS)) for i in range(healthy)]
    for step in [*prefix[: healthy // 2], *steps[:1], *prefix[healthy // 2 :], *steps[1:]]:
        if step[0] == "progress":
            step = _plan(model, step)
        got = _run(ours, step, issued)
        want = _run(model, step, issued)
        assert got == want, (step, ours.state_label())
        assert ours.is_complete == model.is_complete
        assert ours.completion == model.completion
        if got[0] == "ok":
            issued.extend((a.id, type(a.action).__name__) for a in got[1])  # type: ignore[union-attr]
