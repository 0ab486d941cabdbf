"""``on_outcome_kind`` (the replay's lean acknowledgement) behaves exactly like the public API.

Two coordinators get the same random input sequence; wherever one is answered through
``on_action_outcome(aid, Outcome(kind))`` the other is answered through
``on_outcome_kind(aid, kind)``.  After every input both must have returned the same actions (or
raised the same error kind and message) and be in the same state with the same snapshot, so the
lean path cannot drift from the validated one on duplicates, conflicts, unknown ids, outcomes an
action does not take, rejections or answers after completion.
"""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from dmocker.handoff import (
    CancelDestination,
    CancelSource,
    Canceled,
    Complete,
    Completion,
    HandoffCoordinator,
    HandoffError,
    HandoffErrorKind,
    HandoffOrder,
    IssuedAction,
    Outcome,
    OutcomeKind,
    SourceHeld,
    SubmitPrefill,
    TransferTiming,
    TransferTimingMode,
)
from dmocker.handoff import success_outcomes
from tests.handoff.test_differential import _apply, op

SUCCESS = success_outcomes()
# Message-less answers, by id (any kind, including ones the action does not take) or "well"
# (the success kind of one of the issued actions), so runs both go deep and hit every error.
KIND = st.tuples(st.just("kind"), st.integers(0, 12), st.sampled_from(list(OutcomeKind)))
WELL = st.tuples(st.just("well"), st.integers(0, 3))
# The healthy facts with valid payloads (a 128 ms transfer), so runs reach success and reopen.
DUE = st.sampled_from([("held", 1, False), ("reserved", 2, False), ("fact", "transferred", False)])
# Answer the oldest action not answered yet with its success kind (what a healthy engine does).
OPEN = st.just(("open",))
STEPS = st.lists(st.one_of(op, KIND, WELL, DUE, OPEN), max_size=50)


def _result(call):  # type: ignore[no-untyped-def]
    try:
        return ("ok", call())
    except HandoffError as exc:
        return ("error", exc.kind, str(exc))


def _answer(
    issued: list[tuple[int, str]], answered: set[int], step: tuple[object, ...]
) -> tuple[int, OutcomeKind] | None:
    if step[0] == "open":
        for aid, name in issued:
            if aid not in answered and name != "Complete":
                return aid, SUCCESS[name]
        return None
    if step[0] == "kind":
        aid, kind = step[1], step[2]
        assert isinstance(aid, int) and isinstance(kind, OutcomeKind)
        return aid, kind
    if step[0] == "well" and issued:
        assert isinstance(step[1], int)
        aid, name = issued[-1 - step[1] % len(issued)]
        return aid, SUCCESS.get(name, OutcomeKind.APPLIED)
    return None


HELD, RESERVED, TRANSFERRED = ("held", 1, False), ("reserved", 2, False), ("fact", "transferred", False)
# A clean run of each order as steps; a test takes a prefix of it so that late states (success,
# reopened cleanup, answers after completion) are common.
HEALTHY = {
    HandoffOrder.SOURCE_FIRST: [("start",), ("open",), HELD, ("open",), RESERVED, ("open",), TRANSFERRED, ("open",), ("open",)],
    HandoffOrder.DESTINATION_FIRST: [("start",), ("open",), RESERVED, ("open",), HELD, ("open",), TRANSFERRED, ("open",), ("open",)],
}


@pytest.mark.slow  # quick twin: test_lean_outcome_examples
@given(st.sampled_from(list(HandoffOrder)), STEPS, st.integers(0, 9), st.integers(0, 9))
def test_lean_outcome_matches_public_api(
    order: HandoffOrder, steps: list[tuple[object, ...]], healthy: int, split: int
) -> None:
    public = HandoffCoordinator("h", order)
    lean = HandoffCoordinator("h", order)
    issued: list[tuple[int, str]] = []
    answered: set[int] = set()
    prefix = HEALTHY[order][:healthy]
    cut = min(split, len(prefix))
    for step in [*prefix[:cut], *steps[:1], *prefix[cut:], *steps[1:]]:
        answer = _answer(issued, answered, step)
        if answer is not None:
            aid, kind = answer
            expected = _result(lambda: public.on_action_outcome(aid, Outcome(kind)))
            got = _result(lambda: lean.on_outcome_kind(aid, kind))
        elif step[0] in ("well", "open"):
            expected = _result(public.start)
            got = _result(lean.start)
        else:
            expected = _result(lambda: _apply(public, step, issued))
            got = _result(lambda: _apply(lean, step, issued))
        assert got == expected, step
        if expected[0] == "ok":
            if answer is not None:
                answered.add(answer[0])
            new: list[IssuedAction] = expected[1]
            issued += [(a.id, type(a.action).__name__) for a in new]
        assert lean.state == public.state
        assert lean.snapshot() == public.snapshot()
        assert (lean.is_complete, lean.completion) == (public.is_complete, public.completion)


def test_lean_outcome_examples() -> None:
    """Each non-fast case spelled out: duplicate, conflict, unknown id, invalid, cleanup failure."""
    c = HandoffCoordinator("h", HandoffOrder.SOURCE_FIRST)
    (submit,) = c.start()
    assert isinstance(submit.action, SubmitPrefill)
    assert c.on_outcome_kind(submit.id, OutcomeKind.SUBMITTED) == []
    assert c.on_outcome_kind(submit.id, OutcomeKind.SUBMITTED) == []  # duplicate: ignored

    def same_error(coord: HandoffCoordinator, aid: int, kind: OutcomeKind) -> HandoffErrorKind:
        lean = _result(lambda: coord.on_outcome_kind(aid, kind))
        public = _result(lambda: coord.on_action_outcome(aid, Outcome(kind)))
        assert lean[0] == "error" and lean == public
        return lean[1]  # type: ignore[no-any-return]

    assert same_error(c, submit.id, OutcomeKind.APPLIED) is HandoffErrorKind.CONFLICTING_OUTCOME
    assert same_error(c, 99, OutcomeKind.SUBMITTED) is HandoffErrorKind.UNKNOWN_ACTION
    (reserve,) = c.on_fact(SourceHeld("h", TransferTiming(TransferTimingMode.FULL_PROMPT, 10)))
    assert same_error(c, reserve.id, OutcomeKind.SCHEDULED) is HandoffErrorKind.INVALID_OUTCOME
    cancels = c.on_fact(Canceled("h"))
    assert [type(a.action) for a in cancels] == [CancelSource, CancelDestination]
    assert same_error(c, cancels[0].id, OutcomeKind.FAILED) is HandoffErrorKind.CLEANUP_FAILED
    # Settled handoff: every answer is ignored, through both entry points.
    assert c.on_outcome_kind(cancels[0].id, OutcomeKind.APPLIED) == []
    assert c.on_outcome_kind(reserve.id, OutcomeKind.ACCEPTED) == []
    (done,) = c.on_outcome_kind(cancels[1].id, OutcomeKind.NOOP)
    assert isinstance(done.action, Complete) and c.completion is Completion.CANCELED
    assert c.on_outcome_kind(12345, OutcomeKind.APPLIED) == c.on_action_outcome(12345, Outcome(OutcomeKind.APPLIED)) == []
