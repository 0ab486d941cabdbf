"""Event heap ordering (time, phase rank, sequence), pruning and the dead-end message.

The drain loop itself is the runtime's (``DisaggRuntime._drain``), covered by the replay tests."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmocker.replay.events import (
    DeadEndError,
    EventKind,
    EventQueue,
    ReplayInvariantError,
)


def test_same_time_events_pop_in_phase_then_push_order() -> None:
    q: EventQueue[str] = EventQueue()
    q.push(5.0, EventKind.TRANSFER_COMPLETE, "t1")
    q.push(5.0, EventKind.PASS_COMPLETION, "p1")
    q.push(5.0, EventKind.PASS_COMPLETION, "p2")
    q.push(4.0, EventKind.TRANSFER_COMPLETE, "early")
    assert q.raw[0][0] == 4.0
    assert q.pop_ready(5.0, EventKind.TRANSFER_COMPLETE) == (False, None)  # not due at 5 yet: 4 is first
    assert q.pop_ready(4.0, EventKind.TRANSFER_COMPLETE) == (True, "early")
    # a transfer at 5 waits until every pass completion at 5 has been popped
    assert q.pop_ready(5.0, EventKind.TRANSFER_COMPLETE) == (False, None)
    assert q.pop_ready(5.0, EventKind.PASS_COMPLETION) == (True, "p1")
    assert q.pop_ready(5.0, EventKind.PASS_COMPLETION) == (True, "p2")
    assert q.pop_ready(5.0, EventKind.TRANSFER_COMPLETE) == (True, "t1")
    assert len(q) == 0 and not q.raw


def test_ready_yields_due_events_of_one_kind_including_those_pushed_meanwhile() -> None:
    q: EventQueue[str] = EventQueue()
    q.push(5.0, EventKind.TRANSFER_COMPLETE, "t1")
    q.push(5.0, EventKind.PASS_COMPLETION, "p1")
    q.push(6.0, EventKind.PASS_COMPLETION, "later")
    assert list(q.ready(5.0, EventKind.TRANSFER_COMPLETE)) == []  # a pass completion comes first
    seen = []
    for payload in q.ready(5.0, EventKind.PASS_COMPLETION):
        seen.append(payload)
        if payload == "p1":
            q.push(5.0, EventKind.PASS_COMPLETION, "p2")  # due now: yielded in the same sweep
    assert seen == ["p1", "p2"]
    assert list(q.ready(5.0, EventKind.TRANSFER_COMPLETE)) == ["t1"]
    assert [e[5] for e in q.raw] == ["later"]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from(list(EventKind))), max_size=40))
def test_pop_order_is_time_rank_sequence(items: list[tuple[int, EventKind]]) -> None:
    q: EventQueue[int] = EventQueue()
    for i, (t, k) in enumerate(items):
        q.push(float(t), k, i)
    popped = [q.pop_top() for _ in range(len(items))]
    expected = [i for i, _ in sorted(enumerate(items), key=lambda e: (e[1][0], int(e[1][1]), e[0]))]
    assert popped == expected


def test_retain_keeps_order() -> None:
    q: EventQueue[int] = EventQueue()
    for i in range(10):
        q.push(float(i % 3), EventKind.TRANSFER_COMPLETE, i)
    assert q.retain(lambda kind, p: p % 2 == 0) == 5
    assert [q.pop_top() for _ in range(5)] == [0, 6, 4, 2, 8]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.sampled_from(list(EventKind))), min_size=1, max_size=40), st.data())
def test_remove_is_as_if_never_pushed(items: list[tuple[int, EventKind]], data: st.DataObject) -> None:
    gone = data.draw(st.integers(0, len(items) - 1))
    q: EventQueue[int] = EventQueue()
    for i, (t, k) in enumerate(items):
        q.push(float(t), k, i)
    assert q.remove(items[gone][1], gone)
    assert not q.remove(items[gone][1], gone)  # once only
    popped = [q.pop_top() for _ in range(len(items) - 1)]
    expected = [i for i, _ in sorted(enumerate(items), key=lambda e: (e[1][0], int(e[1][1]), e[0])) if i != gone]
    assert popped == expected


def test_remove_matches_kind_and_payload() -> None:
    q: EventQueue[int] = EventQueue()
    q.push(1.0, EventKind.TRANSFER_COMPLETE, 7)
    assert not q.remove(EventKind.PASS_COMPLETION, 7)
    assert len(q) == 1


def test_non_finite_times_are_refused() -> None:
    q: EventQueue[int] = EventQueue()
    with pytest.raises(ReplayInvariantError):
        q.push(math.inf, EventKind.PASS_COMPLETION, 1)
    with pytest.raises(ReplayInvariantError):
        q.push(math.nan, EventKind.PASS_COMPLETION, 1)


def test_dead_end_message_lists_requests() -> None:
    err = DeadEndError(12.5, [f"request {i}" for i in range(12)])
    assert "12 request(s)" in str(err) and "request 0" in str(err) and "(+2 more)" in str(err)


@pytest.mark.parametrize("t", [math.inf, -math.inf, math.nan])
def test_an_event_at_a_non_finite_time_is_refused(t: float) -> None:
    q: EventQueue[int] = EventQueue()
    with pytest.raises(ReplayInvariantError, match="non-finite time"):
        q.push(t, EventKind.PASS_COMPLETION, 1)
    q.push(1e300, EventKind.PASS_COMPLETION, 2)  # large but finite
    assert len(q) == 1
