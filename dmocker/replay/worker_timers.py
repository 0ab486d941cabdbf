"""The workers' own clocks in a replay: the source's hold expiry (source-first) and the
destination's wait timeout (destination-first).

- vLLM's NixlConnector frees a finished prefill's held blocks by itself once
  VLLM_NIXL_ABORT_REQUEST_TIMEOUT (480 s by default) has passed without a read
  (``vllm-project/vllm`` ``vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py``,
  ``get_finished``).  In the replay a transfer starts as soon as the destination is reserved
  and the timeout outlasts every transfer, so the race left is the one the spec's
  ``hold_expiry`` names: the destination is not reserved in time (its pool is full).
- SGLang's decode side fails a request whose KV has not started to arrive
  SGLANG_DISAGGREGATION_WAITING_TIMEOUT (300 s by default) after it bootstrapped
  (``sgl-project/sglang`` ``python/sglang/srt/disaggregation/common/conn.py``): with the
  destination-first order, a prefill that has not finished that long after the reservation.

Both follow the spec's reference semantics (``workers.configurations.dmocker``): the timer fails
the handoff with ``TimedOut`` and the coordinator's cleanup frees both sides.  The timers keep no
run alive (:meth:`ClusterControl.at_idle`), so a run where none fires writes exactly what it
wrote without them; the summary gains ``worker_timers`` only when one fired.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

from dmocker.engines.interface import LifecycleEvent
from dmocker.handoff import SourceHeld, TimedOut

from .faults import FaultCause
from .report import JsonValue
from .runtime import DisaggRuntime

__all__ = ["WorkerTimers"]


class _Deadlines:
    """One kind of timer for every request, as a queue: every timer of a kind runs the same
    time, so they fall due in the order they were armed, and one event on the runtime's heap
    (for the earliest) stands for all of them -- a replay arms one per request, and a heap
    entry per request would cost as much as the rest of the run."""

    __slots__ = ("_runtime", "_delay_ms", "_fire", "_queue", "_armed")

    def __init__(self, runtime: DisaggRuntime, delay_ms: float, fire: Callable[[int, float], None]) -> None:
        self._runtime = runtime
        self._delay_ms = delay_ms
        self._fire = fire  # (request id, the time the timer was armed)
        self._queue: deque[tuple[float, int, float]] = deque()  # (due, request id, armed at)
        self._armed = False

    def arm(self, request_id: int, now_ms: float) -> None:
        self._queue.append((now_ms + self._delay_ms, request_id, now_ms))
        if not self._armed:
            self._schedule()

    def _schedule(self) -> None:
        self._armed = True
        self._runtime.control.at_idle(self._queue[0][0], self._due)

    def _due(self) -> None:
        queue = self._queue
        now = self._runtime.now_ms
        while queue and queue[0][0] <= now:
            _, request_id, armed = queue.popleft()
            self._fire(request_id, armed)
        self._armed = False
        if queue:
            self._schedule()


class WorkerTimers:
    """Arms each request's worker timers and fires those whose condition still holds."""

    def __init__(self, *, abort_timeout_s: float | None, waiting_timeout_s: float | None,
                 prefill_block: int, decode_block: int) -> None:
        self.abort_timeout_s = abort_timeout_s
        self.waiting_timeout_s = waiting_timeout_s
        self.prefill_block = prefill_block
        self.decode_block = decode_block
        self.source_expirations = 0
        self.destination_timeouts = 0
        self.stranded_block_seconds = 0.0  # blocks x seconds held for a reader that never read them
        self.causes: dict[int, FaultCause] = {}
        self._runtime: DisaggRuntime | None = None

    @property
    def fired(self) -> int:
        return self.source_expirations + self.destination_timeouts

    def attach(self, runtime: DisaggRuntime) -> None:
        self._runtime = runtime
        if self.abort_timeout_s is not None:
            expiries = _Deadlines(runtime, self.abort_timeout_s * 1000.0, self._expire)
            previous = runtime.effects.held_sink

            def held(events: tuple[LifecycleEvent, ...], now_ms: float) -> None:
                if previous is not None:
                    previous(events, now_ms)
                for ev in events:
                    if isinstance(ev, SourceHeld):
                        rid = ev.handoff_id
                        assert isinstance(rid, int)  # the replay's handoff ids are its request ids
                        expiries.arm(rid, now_ms)

            runtime.effects.held_sink = held
        if self.waiting_timeout_s is not None:
            runtime.handoffs.reserved_sink = _Deadlines(runtime, self.waiting_timeout_s * 1000.0,
                                                        self._time_out_wait).arm

    def _fail(self, request_id: int, blocks: int, since_ms: float) -> bool:
        runtime = self._runtime
        assert runtime is not None
        live, recorded = runtime.control.deliver(request_id, TimedOut)
        if not live:
            return False
        self.stranded_block_seconds += blocks * (runtime.now_ms - since_ms) / 1000.0
        if recorded:
            self.causes[request_id] = FaultCause.TRANSFER_TIMEOUT
        return True

    def _expire(self, request_id: int, held_ms: float) -> None:
        assert self._runtime is not None
        req = self._runtime.table.live.get(request_id)
        # read in time (its destination was reserved and the transfer started), or over
        if req is None or req.destination_reserved_ms is not None or req.terminal_ms is not None:
            return
        if self._fail(request_id, math.ceil((req.held_tokens or 0) / self.prefill_block), held_ms):
            self.source_expirations += 1

    def _time_out_wait(self, request_id: int, reserved_ms: float) -> None:
        assert self._runtime is not None
        req = self._runtime.table.live.get(request_id)
        # the KV started to arrive (the source is held: the transfer began), or over
        if req is None or req.source_held_ms is not None or req.terminal_ms is not None:
            return
        if self._fail(request_id, math.ceil(req.turn.input_length / self.decode_block), reserved_ms):
            self.destination_timeouts += 1

    def summary_fields(self) -> dict[str, JsonValue]:
        """The summary's ``worker_timers`` section (only added when a timer fired)."""
        out: dict[str, JsonValue] = {}
        if self.abort_timeout_s is not None:
            out["kv_abort_timeout_s"] = self.abort_timeout_s
            out["source_expirations"] = self.source_expirations
        if self.waiting_timeout_s is not None:
            out["disaggregation_waiting_timeout_s"] = self.waiting_timeout_s
            out["destination_timeouts"] = self.destination_timeouts
        out["stranded_block_seconds"] = round(self.stranded_block_seconds, 6)
        return out
