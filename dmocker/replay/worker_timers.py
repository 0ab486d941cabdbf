"""The workers' own clocks in a replay (docs/faults.md#the-workers-own-clocks): timers that fire
without the coordinator asking, and what the workers then do.

Source-first (vLLM):

- the source's hold expiry: vLLM's NixlConnector frees a finished prefill's held blocks by itself
  once VLLM_NIXL_ABORT_REQUEST_TIMEOUT (480 s by default) has passed without a completed read
  (``vllm-project/vllm`` ``vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py``,
  ``request_finished`` / ``get_finished``): its destination was not reserved in time (its pool
  is full), or the transfer stalled.  Then, by ``kv_load_failure_policy``
  (``vllm/config/kv_transfer.py``): ``fail`` fails the handoff (``TimedOut``: the spec's
  reference semantics, a read of freed blocks fails); ``recompute`` lets the destination
  recompute the prompt, for the time one prefill pass of it takes on the destination's timing,
  and the request goes on.

Destination-first (SGLang, ``sgl-project/sglang`` ``python/sglang/srt/disaggregation/common/conn.py``
and ``python/sglang/srt/environ.py``):

- the bootstrap timeout (SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT, 300 s): the prefill side gives
  up on a request whose decode side has not made room for it (accepted, not reserved);
- the waiting timeout (SGLANG_DISAGGREGATION_WAITING_TIMEOUT, 300 s): the decode side fails a
  reservation whose KV has not fully arrived (KVPoll.WaitingForInput that long after bootstrap);
- heartbeats (SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL 5 s, ..._MAX_FAILURE 2): the decode side
  probes each prefill worker and, after that many failed probes in a row, fails every transfer
  from it that has not completed; probes fail only under a heartbeat-loss fault.

A timer that fails a handoff writes its own event-log line (the spec's ``observable.worker_kinds``)
just before the fact it delivers, and the coordinator's cleanup frees both sides.  The timers
keep no run alive (:meth:`ClusterControl.at_idle`), so a run where none fires writes exactly
what it wrote without them; the summary gains ``worker_timers`` only when one fired.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from dmocker.engines.interface import EngineArgs, LifecycleEvent
from dmocker.engines.timing import PassTiming
from dmocker.handoff import Failed, HandoffOrder, SourceHeld, TerminalFact, TimedOut

from .config_sections import KvLoadFailurePolicy, TransferConfig
from .faults import FaultCause, HeartbeatLoss
from .report import JsonValue
from .request_state import Phase, RequestState
from .runtime import DisaggRuntime

__all__ = ["TimerSettings", "WorkerTimers", "heartbeat_detections", "timer_settings"]


@dataclass(frozen=True)
class TimerSettings:
    """The timers one run arms (None: not armed), each order its own."""

    abort_timeout_s: float | None = None
    load_failure: KvLoadFailurePolicy = KvLoadFailurePolicy.FAIL
    bootstrap_timeout_s: float | None = None
    waiting_timeout_s: float | None = None
    heartbeat_interval_s: float = 5.0
    heartbeat_max_failure: int = 2
    losses: tuple[HeartbeatLoss, ...] = ()

    @property
    def any_armed(self) -> bool:
        return (self.abort_timeout_s is not None or self.bootstrap_timeout_s is not None
                or self.waiting_timeout_s is not None or bool(self.losses))


def timer_settings(clocks: TransferConfig, order: HandoffOrder, *, bootstrap: bool = True,
                   losses: tuple[HeartbeatLoss, ...] = ()) -> TimerSettings:
    """The timers of ``order``'s workers from the configuration's ``transfer`` section."""
    if order is HandoffOrder.SOURCE_FIRST:
        return TimerSettings(abort_timeout_s=clocks.kv_abort_timeout_s, load_failure=clocks.kv_load_failure_policy)
    return TimerSettings(
        bootstrap_timeout_s=clocks.disaggregation_bootstrap_timeout_s if bootstrap else None,
        waiting_timeout_s=clocks.disaggregation_waiting_timeout_s,
        heartbeat_interval_s=clocks.disaggregation_heartbeat_interval_s,
        heartbeat_max_failure=clocks.disaggregation_heartbeat_max_failure,
        losses=losses,
    )


def heartbeat_detections(loss: HeartbeatLoss, interval_s: float, max_failure: int) -> list[float]:
    """The times (ms) at which the decode side declares prefill worker ``loss.index`` dead: probes
    go out every ``interval_s`` from time 0; those inside the loss fail, and every
    ``max_failure``-th failure in a row is a detection (the count starts again after one, as
    SGLang forgets a peer it declared dead until a new request connects to it)."""
    interval = interval_s * 1000.0
    first = math.ceil(loss.t_ms / interval)
    if first * interval < loss.t_ms:  # the division rounded down (a start of a few ulps)
        first += 1
    end = loss.t_ms + loss.duration_ms
    out: list[float] = []
    failed = 0
    k = first
    while k * interval < end:
        failed += 1
        if failed == max_failure:
            out.append(k * interval)
            failed = 0
        k += 1
    return out


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

    def __init__(self, settings: TimerSettings, *, prefill_args: EngineArgs, decode_args: EngineArgs) -> None:
        self.settings = settings
        self.prefill_block = prefill_args.page_tokens
        self.decode_block = decode_args.page_tokens
        self._decode_timing = PassTiming(decode_args)
        self.source_expirations = 0
        self.bootstrap_timeouts = 0
        self.destination_timeouts = 0
        self.heartbeat_failures = 0
        self.recomputed_prefills = 0
        self.stranded_block_seconds = 0.0  # blocks x seconds held for a reader that never read them
        self.causes: dict[int, FaultCause] = {}
        self._recompute: set[int] = set()  # sources expired before their transfer started
        self._runtime: DisaggRuntime | None = None

    @property
    def fired(self) -> int:
        return (self.source_expirations + self.bootstrap_timeouts + self.destination_timeouts
                + self.heartbeat_failures)

    def attach(self, runtime: DisaggRuntime) -> None:
        self._runtime = runtime
        s = self.settings
        if s.abort_timeout_s is not None:
            expiries = _Deadlines(runtime, s.abort_timeout_s * 1000.0, self._expire)
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
            if s.load_failure is KvLoadFailurePolicy.RECOMPUTE:
                delay = runtime.executor.transfer_delay

                def recompute_instead(request_id: int, delay_ms: float) -> float:
                    if request_id in self._recompute:
                        self._recompute.discard(request_id)
                        return self._recompute_ms(request_id)
                    return delay(request_id, delay_ms) if delay is not None else delay_ms

                runtime.executor.transfer_delay = recompute_instead
        if s.bootstrap_timeout_s is not None:
            runtime.executor.accepted_sink = _Deadlines(runtime, s.bootstrap_timeout_s * 1000.0,
                                                        self._time_out_bootstrap).arm
        if s.waiting_timeout_s is not None:
            runtime.handoffs.reserved_sink = _Deadlines(runtime, s.waiting_timeout_s * 1000.0,
                                                        self._time_out_wait).arm
        for loss in s.losses:
            for t_ms in heartbeat_detections(loss, s.heartbeat_interval_s, s.heartbeat_max_failure):
                runtime.control.at_idle(t_ms, _bind_detect(self, loss.index))

    # ------------------------------------------------------------------ helpers

    def _live(self, request_id: int) -> RequestState | None:
        """The request, if it is still waiting for its KV and nothing ended it."""
        assert self._runtime is not None
        req = self._runtime.table.live.get(request_id)
        if req is None or req.transfer_done_ms is not None or req.terminal_ms is not None:
            return None
        return req

    def _log(self, kind: str, request_id: int, worker: int) -> None:
        assert self._runtime is not None
        writer = self._runtime.handoffs.event_log
        if writer is not None:
            writer.log_worker(self._runtime.now_ms, request_id, kind, worker)

    def _fail(self, req: RequestState, kind: str, worker: int, fact: type[TerminalFact], cause: FaultCause,
              blocks: int, since_ms: float) -> None:
        runtime = self._runtime
        assert runtime is not None
        self._log(kind, req.rid, worker)
        _, recorded = runtime.control.deliver(req.rid, fact)
        self.stranded_block_seconds += blocks * (runtime.now_ms - since_ms) / 1000.0
        if recorded:
            self.causes[req.rid] = cause

    def _recompute_ms(self, request_id: int) -> float:
        assert self._runtime is not None
        req = self._runtime.table.live.get(request_id)
        tokens = req.turn.input_length if req is not None else 0
        return self._decode_timing.prefill_ms(1, tokens, 0)

    # ------------------------------------------------------------------ the timers

    def _expire(self, request_id: int, held_ms: float) -> None:
        req = self._live(request_id)
        if req is None:  # read in time, or over
            return
        self.source_expirations += 1
        blocks = math.ceil((req.held_tokens or 0) / self.prefill_block)
        if self.settings.load_failure is KvLoadFailurePolicy.FAIL:
            self._fail(req, "source_expired", req.prefill_worker, TimedOut, FaultCause.TRANSFER_TIMEOUT, blocks, held_ms)
            return
        runtime = self._runtime
        assert runtime is not None
        self.recomputed_prefills += 1
        self.stranded_block_seconds += blocks * (runtime.now_ms - held_ms) / 1000.0
        self._log("kv_recomputed", request_id, req.decode_worker)
        self._free_source(request_id)
        if req.phase is Phase.TRANSFER_PENDING:  # the read in flight fails: recompute from now
            runtime.executor.restart_transfer(req, self._recompute_ms(request_id))
        else:  # the destination recomputes when it gets its room
            self._recompute.add(request_id)

    def _free_source(self, request_id: int) -> None:
        """The source frees the expired hold itself, at the end of its pass in flight if it has one."""
        runtime = self._runtime
        assert runtime is not None
        req = runtime.table.live.get(request_id)
        if req is None or req.source_released_ms is not None:
            return
        if not runtime.executor.free_source(req):
            span = runtime.control.settle_worker(0, req.prefill_worker)
            if span is not None:
                runtime.control.at_idle(span[1], lambda: self._free_source(request_id))

    def _time_out_bootstrap(self, request_id: int, accepted_ms: float) -> None:
        req = self._live(request_id)
        if req is None or req.destination_reserved_ms is not None:  # room made in time, or over
            return
        self.bootstrap_timeouts += 1
        self._fail(req, "bootstrap_timed_out", req.prefill_worker, TimedOut, FaultCause.TRANSFER_TIMEOUT, 0, accepted_ms)

    def _time_out_wait(self, request_id: int, reserved_ms: float) -> None:
        req = self._live(request_id)
        if req is None:  # the KV arrived in time, or over
            return
        self.destination_timeouts += 1
        self._fail(req, "destination_timed_out", req.decode_worker, TimedOut, FaultCause.TRANSFER_TIMEOUT,
                   math.ceil(req.turn.input_length / self.decode_block), reserved_ms)

    def heartbeat_failed(self, prefill_worker: int) -> None:
        """The decode side declared ``prefill_worker`` dead: every transfer from it that has not
        completed fails (KVPoll.Failed), in request order."""
        runtime = self._runtime
        assert runtime is not None
        live = runtime.table.live
        for rid in sorted(live):
            req = self._live(rid)
            if req is None or req.prefill_worker != prefill_worker:
                continue
            self.heartbeat_failures += 1
            self._fail(req, "heartbeat_lost", req.decode_worker, Failed, FaultCause.HEARTBEAT_LOSS, 0, runtime.now_ms)

    def summary_fields(self) -> dict[str, JsonValue]:
        """The summary's ``worker_timers`` section (only added when a timer fired)."""
        s = self.settings
        out: dict[str, JsonValue] = {}
        if s.abort_timeout_s is not None:
            out["kv_abort_timeout_s"] = s.abort_timeout_s
            out["kv_load_failure_policy"] = s.load_failure.value
            out["source_expirations"] = self.source_expirations
            if s.load_failure is KvLoadFailurePolicy.RECOMPUTE:
                out["recomputed_prefills"] = self.recomputed_prefills
        if s.bootstrap_timeout_s is not None:
            out["disaggregation_bootstrap_timeout_s"] = s.bootstrap_timeout_s
            out["bootstrap_timeouts"] = self.bootstrap_timeouts
        if s.waiting_timeout_s is not None:
            out["disaggregation_waiting_timeout_s"] = s.waiting_timeout_s
            out["destination_timeouts"] = self.destination_timeouts
        if s.losses:
            out["disaggregation_heartbeat_interval_s"] = s.heartbeat_interval_s
            out["disaggregation_heartbeat_max_failure"] = s.heartbeat_max_failure
            out["heartbeat_failures"] = self.heartbeat_failures
        out["stranded_block_seconds"] = round(self.stranded_block_seconds, 6)
        return out


def _bind_detect(timers: WorkerTimers, prefill_worker: int) -> Callable[[], None]:
    return lambda: timers.heartbeat_failed(prefill_worker)
