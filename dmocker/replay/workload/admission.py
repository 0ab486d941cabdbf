"""The admission queue: when each turn of the workload is released into the cluster.

Why a separate room: the reference folds arrival pacing, concurrency caps and multi-turn
gating into its 1,800-line runtime.  Here the runtime only asks three things -- when is the
next release, what is ready now, and "this request ended" -- so trace mode and concurrency
mode are swappable and testable without engines.

* Trace mode: a first turn is released at its arrival time; a later turn at the previous
  turn's terminal time + its delay (the reference's workload driver).
* Concurrency mode (``max_in_flight``): arrival times are ignored; at most ``max_in_flight``
  *sessions* are open at once and each keeps its slot through all its turns and think times
  (depth-first), so a single-turn workload keeps ``max_in_flight`` requests in flight.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final, cast, final

from ..events import top_time
from .types import NO_NEXT, SessionStart, Turn, Workload, WorkloadError

__all__ = ["AdmissionQueue", "ReadyTurn"]


@final
@dataclass(init=False, slots=True, unsafe_hash=True)
class ReadyTurn:
    """A turn released at ``arrival_ms``."""

    turn: Final[Turn]
    arrival_ms: Final[float]

    def __init__(self, turn: Turn, arrival_ms: float) -> None:
        self.turn = turn
        self.arrival_ms = arrival_ms


class AdmissionQueue:
    """Releases workload turns in trace or concurrency mode (see module docstring)."""

    __slots__ = (
        "_workload",
        "_starts",
        "_lookahead",
        "_ready",
        "_seq",
        "_next_of",
        "_max_in_flight",
        "_open_sessions",
        "_released",
        "_outstanding",
        "_buffer",
        "_buffer_at",
        "_prefetch",
        "_batch",
        "_preloaded",
    )

    def __init__(
        self,
        workload: Workload,
        *,
        max_in_flight: int | None = None,
        prefetch: Callable[[list[Turn]], None] | None = None,
        batch: int = 256,
    ) -> None:
        """``prefetch`` sees upcoming first turns in batches of ``batch`` before they are
        released (the runtime hashes their blocks in one vectorised call)."""
        if max_in_flight is not None and (
            isinstance(max_in_flight, bool) or not isinstance(max_in_flight, int) or max_in_flight <= 0
        ):
            raise WorkloadError(f"must be a positive integer, got {max_in_flight!r}", field="max_in_flight")
        self._workload = workload
        self._starts: Iterator[SessionStart] = workload.session_starts()
        # Pulled session starts, read from ``_buffer_at`` on
        self._buffer: list[SessionStart] = []
        self._buffer_at = 0
        self._prefetch = prefetch
        self._batch = max(1, batch)
        self._preloaded: dict[int, Turn] = {}
        self._lookahead: SessionStart | None = self._next_start()
        # Follow-up turns, a heap of (ready_ms, seq, request_id), typed as tuples of any length
        # and read through events.top_time.
        self._ready: list[tuple[object, ...]] = []
        self._seq = 0
        self._next_of: dict[int, tuple[int, float]] = {}  # in-flight id -> (next id, delay)
        self._max_in_flight = max_in_flight
        self._open_sessions = 0
        self._released = 0
        self._outstanding = 0  # released turns whose terminal has not been reported

    def _next_start(self) -> SessionStart | None:
        at = self._buffer_at
        if at == len(self._buffer):
            chunk: list[SessionStart] = []
            for start in self._starts:
                chunk.append(start)
                if len(chunk) >= self._batch:
                    break
            if not chunk:
                return None
            if self._prefetch is not None:
                turns = self._load_all(chunk)
                for turn in turns:
                    self._preloaded[turn.request_id] = turn
                self._prefetch(turns)
            self._buffer = chunk
            at = 0
        self._buffer_at = at + 1
        return self._buffer[at]

    def _load_all(self, starts: list[SessionStart]) -> list[Turn]:
        workload = self._workload
        return [workload.load(st.request_id) for st in starts]

    def set_prefetch(self, prefetch: Callable[[list[Turn]], None] | None) -> None:
        """Install the prefetch hook (see ``__init__``).  The first batch, pulled when the queue
        was built, is handed to it now (its turns loaded once, kept for their release), so
        every first turn goes through the hook, the first ``batch`` included."""
        self._prefetch = prefetch
        if prefetch is None:
            return
        pulled = ([self._lookahead] if self._lookahead is not None else []) + self._buffer[self._buffer_at:]
        preloaded = self._preloaded
        turns = self._load_all([st for st in pulled if st.request_id not in preloaded])
        for turn in turns:
            self._preloaded[turn.request_id] = turn
        if turns:
            prefetch(turns)

    @property
    def total_requests(self) -> int:
        return self._workload.num_requests

    @property
    def trace_block_size(self) -> int:
        return self._workload.trace_block_size

    @property
    def released(self) -> int:
        return self._released

    def next_ready_time(self) -> float | None:
        """Earliest time something could be released without another terminal.

        In concurrency mode a new session can only start when a slot frees, which happens at a
        terminal, i.e. inside a drain; so only follow-up turns count as future wakeups, plus
        "now" when a slot is free (reported as the lookahead's own time, never in the past of
        the caller because the caller drains first).
        """
        best = top_time(self._ready) if self._ready else None
        if self._lookahead is not None:
            if self._max_in_flight is None:
                t = self._lookahead.arrival_ms
                best = t if best is None or t < best else best
        return best

    def has_ready(self, now_ms: float) -> bool:
        """Whether :meth:`drain_ready` would release anything at ``now_ms`` (cheap check)."""
        if self._ready and top_time(self._ready) <= now_ms:
            return True
        la = self._lookahead
        if la is None:
            return False
        if self._max_in_flight is None:
            return la.arrival_ms <= now_ms
        return self._open_sessions < self._max_in_flight

    def drain_ready(self, now_ms: float) -> list[ReadyTurn]:
        """Everything released at ``now_ms``, in (time, order-of-becoming-known) order."""
        out: list[ReadyTurn] = []
        if self._max_in_flight is None:
            # Merge first turns and follow-ups by time; first turns known earlier win ties.
            while True:
                la = self._lookahead
                ready = self._ready
                take_first = la is not None and la.arrival_ms <= now_ms
                take_follow = bool(ready) and top_time(ready) <= now_ms
                if not take_first and not take_follow:
                    break
                # (``la is not None`` again, for the type checker)
                if take_first and la is not None and (not take_follow or la.arrival_ms <= top_time(ready)):
                    self._lookahead = self._next_start()
                    out.append(self._release(la.request_id, la.arrival_ms))
                else:
                    rid = cast(int, heapq.heappop(ready)[2])
                    out.append(self._release(rid, now_ms))
            return out
        # Concurrency mode: follow-ups first (their sessions already hold slots), then new
        # sessions while slots are free.  Arrival is "now".
        ready = self._ready
        while ready and top_time(ready) <= now_ms:
            rid = cast(int, heapq.heappop(ready)[2])
            out.append(self._release(rid, now_ms))
        while self._lookahead is not None and self._open_sessions < self._max_in_flight:
            la = self._lookahead
            self._lookahead = self._next_start()
            self._open_sessions += 1
            out.append(self._release(la.request_id, now_ms))
        return out

    def _release(self, request_id: int, arrival_ms: float) -> ReadyTurn:
        turn = self._preloaded.pop(request_id, None)
        if turn is None:
            turn = self._workload.load(request_id)
        self._next_of[request_id] = (turn.next_request_id, turn.delay_ms)
        self._released += 1
        self._outstanding += 1
        return ReadyTurn(turn, arrival_ms)

    def push(self, turn: Turn, arrival_ms: float) -> None:
        """A turn that arrives from outside the workload (a live server's request), released at
        ``arrival_ms``; ties with other turns ready then go in the order they became known."""
        if turn.request_id in self._preloaded or turn.request_id in self._next_of:
            raise WorkloadError(f"request {turn.request_id} is already known", field="request_id")
        self._preloaded[turn.request_id] = turn
        heapq.heappush(self._ready, (arrival_ms, self._seq, turn.request_id))
        self._seq += 1

    def on_request_terminal(self, request_id: int, now_ms: float) -> None:
        """A released turn ended (any status): gate its session's next turn on it."""
        nxt = self._next_of.pop(request_id, None)
        if nxt is None:
            raise KeyError(f"request {request_id} was not released or already ended")
        self._outstanding -= 1
        next_id, _ = nxt
        if next_id == NO_NEXT:
            if self._max_in_flight is not None:
                self._open_sessions -= 1
            return
        # The follow-up's delay is stored on the follow-up row itself; peek it when loading.
        delay = self._workload.delay_of(next_id)
        heapq.heappush(self._ready, (now_ms + delay, self._seq, next_id))
        self._seq += 1

    def is_drained(self) -> bool:
        return self._lookahead is None and not self._ready and self._outstanding == 0

    def has_pending_release(self) -> bool:
        """True when turns remain that are not released yet (first or follow-up)."""
        return self._lookahead is not None or bool(self._ready)
