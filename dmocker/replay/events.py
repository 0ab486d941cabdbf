"""The replay's event heap and its ordering key (the replay's two run-time errors live in
:mod:`.errors` and are re-exported here).

Why this shape: the reference replay is a discrete-event simulation whose results depend on
the order in which same-time work is applied.  Its heap orders events by time, then by a
fixed phase rank (:class:`EventKind`: pass completions before worker-ready before transfer
completions before planner ticks), then by a push sequence number.  We keep exactly that key,
with an integer sequence number as the only tie-break, so that nothing depends on object
identity or hash order.

The per-timestamp drain loop is the runtime's (:mod:`dmocker.replay.runtime.loop`): at each timestamp it
pops the due events rank by rank, then releases arrivals (not heap events: the admission queue
reports its own next time), runs handoff actions and starts passes, and repeats until a whole
sweep changes nothing (a fixed point).  Nothing here knows about requests or engines: payloads
are opaque.
"""

from __future__ import annotations

import enum
import heapq
import math
from collections.abc import Callable, Iterator
from typing import Final, Generic, TypeAlias, TypeVar, cast

from .errors import DeadEndError, ReplayInvariantError

__all__ = [
    "Entry",
    "EventKind",
    "EventQueue",
    "top_kind",
    "top_time",
    "DeadEndError",
    "ReplayInvariantError",
]

P = TypeVar("P")

_heappush: Final = heapq.heappush


class EventKind(enum.IntEnum):
    """Heap event kinds; the value is the phase rank among events at the same time.

    Arrivals are not heap events: the admission queue reports its own next ready time.
    """

    PASS_COMPLETION = 0
    WORKER_READY = 1
    TRANSFER_COMPLETE = 2
    TIMER = 3  # a callback at a time (fault injection, tests): its payload is the callback
    PLANNER_TICK = 4


#: A heap entry, ``(time_ms, kind, order_ms, rank, seq, payload)``, declared a tuple of any
#: length and read through :func:`top_time` / :func:`top_kind` (one field at a time).
Entry: TypeAlias = "tuple[object, ...]"


def top_time(heap: list[Entry]) -> float:
    """The time of the earliest event of a non-empty :attr:`EventQueue.raw`."""
    return cast(float, heap[0][0])


def top_kind(heap: list[Entry]) -> int:
    """The kind (:class:`EventKind` value) of the earliest event of a non-empty heap."""
    return cast(int, heap[0][1])


class EventQueue(Generic[P]):
    """A min-heap of ``(time_ms, kind rank, order_ms, rank, seq, payload)``.

    One flat tuple per event, not a nested key: a push builds one tuple, and a comparison that
    gets past the time and kind compares the next fields in place (the sequence number is unique,
    so the payload is never compared).

    ``pop_ready(now, kind)`` pops the top event only if it is due exactly at ``now`` and of
    ``kind``: because the rank sits before the sequence number, all same-time events of a
    lower rank are necessarily gone first, which is the reference's phase order.
    """

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[Entry] = []
        self._seq = 0

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, time_ms: float, kind: int, payload: P, order_ms: float = -math.inf,
             rank: int = 0) -> None:
        """Schedule ``payload`` at ``time_ms`` as an event of ``kind`` (an :class:`EventKind`,
        stored as a plain int).  Same-time events of one kind pop in the order
        of ``order_ms`` (the caller's clock when it pushes), then of ``rank``, then of pushing;
        a bulk decode run's completion passes the start of its last pass and the rank of the
        point in that time step where the per-pass simulation would have pushed it."""
        if time_ms - time_ms != 0.0:  # inf or nan
            raise ReplayInvariantError(f"event scheduled at non-finite time {time_ms!r}")
        _heappush(self._heap, (time_ms, kind, order_ms, rank, self._seq, payload))
        self._seq += 1

    def top_is(self, kind: EventKind) -> bool:
        """Whether the earliest event is of ``kind`` (False when the queue is empty)."""
        return bool(self._heap) and top_kind(self._heap) == kind

    def peek_payload(self) -> P | None:
        return cast(P, self._heap[0][5]) if self._heap else None

    @property
    def raw(self) -> list[Entry]:
        """The heap list itself (read-only use: the drain loop peeks at ``raw[0]``)."""
        return self._heap

    def pop_ready(self, now_ms: float, kind: EventKind) -> tuple[bool, P | None]:
        """Pop the top event if it is ``kind`` due at ``now_ms``; returns (popped, payload)."""
        heap = self._heap
        if heap and top_time(heap) == now_ms and top_kind(heap) == kind:
            return True, cast(P, heapq.heappop(heap)[5])
        return False, None

    def ready(self, now_ms: float, kind: EventKind) -> Iterator[P]:
        """Pop and yield, one at a time, the payloads of the ``kind`` events due at ``now_ms``
        at the top of the heap (what the caller pushes meanwhile is seen too)."""
        heap = self._heap
        rank = int(kind)
        while heap and top_time(heap) == now_ms and top_kind(heap) == rank:
            yield cast(P, heapq.heappop(heap)[5])

    def pop_top(self) -> P:
        return cast(P, heapq.heappop(self._heap)[5])

    def remove(self, kind: EventKind, payload: P) -> bool:
        """Drop the first event of ``kind`` with this payload (a worker's pass completion when
        its bulk run is cut); False if there is none.  Cheaper than :meth:`retain`: no call per
        event, and the heap is rebuilt (in C) only when an event was taken out."""
        heap = self._heap
        rank = int(kind)
        for i, e in enumerate(heap):
            if e[1] == rank and e[5] == payload:
                last = heap.pop()
                if i < len(heap):
                    heap[i] = last
                    heapq.heapify(heap)
                return True
        return False

    def retain(self, keep: Callable[[EventKind, P], bool]) -> int:
        """Drop every event for which ``keep`` is false; returns how many were dropped.

        Used for bulk pruning of stale transfer completions; order is preserved because the
        heap keys (time, rank, seq) are untouched.
        """
        before = len(self._heap)
        # In place: the runtime's drain loop holds a reference to this list.
        self._heap[:] = [e for e in self._heap if keep(EventKind(cast(int, e[1])), cast(P, e[5]))]
        heapq.heapify(self._heap)
        return before - len(self._heap)

