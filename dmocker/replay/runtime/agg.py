"""The aggregated baseline: one pool of workers that each prefill and decode their requests, with
no handoff, driven by the same virtual clock, engines, routers and collector as the
disaggregated replay (``ai-dynamo/dynamo`` ``lib/mocker/src/replay/offline/``, aggregated mode).

A request arrives, its router picks a worker (or holds it in the router's queue), and the worker
gets it as a plain request (:meth:`~dmocker.engines.interface.EngineWorker.submit`): it is
prefilled in chunks under the worker's token budget, decoded in the same passes as the others
(vLLM mixes prefill chunks into decode passes; SGLang runs an extend pass or a decode pass, as
its scheduler does without mixed chunks), and its blocks go back to the worker's prefix cache
when it finishes.  A pass is charged the prefill time of its prompt tokens plus the decode time
of its batch (``WorkerType.AGGREGATED``).

Per time step: pass completions, then arrivals, then the workers' passes, to a fixed point.
The workers' passes are started and completed by the same :class:`~.passes.PassScheduler` as
the disaggregated decode pool's, bulk decode runs included (an arrival on a worker cuts its run
first); this object is its listener.

Why a loop of its own rather than the disaggregated one with a pool left out: that loop's parts
are about the handoff (coordinators, actions, transfers, two pools); this one has none of them
and shares the parts that are not (:class:`~.pool.WorkerPool`, :class:`~.clock.Clock`, the
event queue, routers, the collector and the report).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import IO, Final

from dmocker.engines.hashing import block_hashes_from_trace, block_hashes_from_trace_batch
from dmocker.engines.interface import EngineRequest, EngineWorker, PassCompletion, PassPlan

from ..collector import Collector, TerminalStatus
from ..errors import DeadEndError, ReplayInvariantError
from ..events import EventKind, EventQueue, top_kind, top_time
from ..records import agg_record
from ..report import stable_json_line
from ..request_state import Stage
from ..routing import RoundRobin, Router, RouterError
from ..routing.protocol import Admission
from ..timeseries import TimeSeriesRecorder
from ..workload import AdmissionQueue, ReadyTurn, Turn
from .clock import Clock
from .loop import RuntimeResult
from .passes import PassScheduler
from .pool import WorkerPool
from .requests import ActionQueue

__all__ = ["AggRequest", "AggRuntime"]

_PASS: Final = int(EventKind.PASS_COMPLETION)
_D: Final = int(Stage.DECODE)
_DECODE: Final = Stage.DECODE
_COMPLETED: Final = TerminalStatus.COMPLETED
_REJECTED: Final = TerminalStatus.REJECTED


class AggRequest:
    """A request in flight on the aggregated cluster."""

    __slots__ = ("rid", "turn", "arrival_ms", "request", "worker", "first_admit_ms", "terminal_ms", "prefilled",
                 "overlap")

    def __init__(self, turn: Turn, arrival_ms: float, request: EngineRequest) -> None:
        self.rid = turn.request_id
        self.turn = turn
        self.arrival_ms = arrival_ms
        self.request = request
        self.worker = -1  # the worker it was given to (-1: not routed yet)
        self.first_admit_ms: float | None = None
        self.terminal_ms: float | None = None
        self.prefilled = False  # its first token is out: the router was told its prefill ended
        self.overlap = 0  # the prefix overlap its router saw


class AggRuntime:
    """Drives one aggregated replay; build it, call :meth:`run`, then read ``collector``."""

    def __init__(
        self,
        *,
        admission: AdmissionQueue,
        workers: list[EngineWorker],
        router: Router,
        collector: Collector,
        trace_block: int,
        block_size: int,
        max_sim_time_ms: float | None = None,
        records: IO[str] | None = None,
        on_retired: Callable[[int], None] | None = None,
        sampler: TimeSeriesRecorder | None = None,
        bulk: bool = True,
    ) -> None:
        self.clock = clock = Clock()
        self.events: EventQueue[object] = EventQueue()
        self.pool = WorkerPool(Stage.DECODE, workers, router)
        # The pass scheduler serves pools by stage: the workers are its decode pool, beside an
        # empty prefill pool.  Bulk runs are off with a time cap, as in the disaggregated replay.
        pools = (WorkerPool(Stage.PREFILL, [], RoundRobin()), self.pool)
        self.passes = PassScheduler(clock, self.events, pools, ActionQueue(), self, observer=None,
                                    bulk=bulk and max_sim_time_ms is None)
        for idx in range(len(workers)):
            router.add_worker(idx, 0.0)
        self.admission = admission
        self.collector = collector
        self.cap_ms = max_sim_time_ms
        self.records = records
        self.on_retired = on_retired
        self.sampler = sampler
        self.trace_block = trace_block
        self.block_size = block_size
        self.live: dict[int, AggRequest] = {}
        self.held: dict[int, AggRequest] = {}  # requests the router keeps in its queue
        self.signals = type(router) is not RoundRobin  # the router needs more than route()
        self.kv_feed = router.wants_kv_events
        self.reuse = [0, 0]  # completed requests: reused input tokens, input tokens
        self.hash_cache: dict[int, tuple[int, ...]] = {}
        admission.set_prefetch(self._prefetch_hashes)

    @property
    def in_flight(self) -> int:
        return len(self.live)

    # ------------------------------------------------------------------ main loop

    def run(self) -> RuntimeResult:
        capped = False
        clock = self.clock
        heap = self.events.raw
        admission = self.admission
        self._drain()
        while self.live or not admission.is_drained():
            t = admission.next_ready_time()
            if heap and (t is None or top_time(heap) < t):
                t = top_time(heap)
            if t is None:
                raise DeadEndError(clock.now_ms, self._describe_stuck())
            if self.cap_ms is not None and t > self.cap_ms:
                capped = True
                break
            if t < clock.now_ms:
                raise ReplayInvariantError(f"clock would move backwards: {t} < {clock.now_ms}")
            if self.sampler is not None and t > self.sampler.next_ms:
                self.sampler.sample_until(t)
            clock.now_ms = t
            self._drain()
        now = clock.now_ms
        # As the reference reports an aggregated run: all worker time is decode-pool time.
        self.collector.add_worker_seconds(0.0, len(self.pool.workers) * now / 1000.0)
        return RuntimeResult(now, capped, 0)

    def _drain(self) -> None:
        """The phases of one time step (module docstring), looped to a fixed point."""
        heap = self.events.raw
        admission = self.admission
        pool = self.pool
        passes = self.passes
        passes.started = False
        while True:
            now = self.clock.now_ms
            changed = False
            if heap and top_time(heap) == now and top_kind(heap) == _PASS:
                changed = passes.apply_completions()
            if admission.has_ready(now):
                for item in admission.drain_ready(now):
                    self._arrive(item)
                changed = True
            if pool.any_dirty():
                changed = passes.drive_pool(_DECODE) or changed
            passes.started = True
            if not changed:
                return

    def _describe_stuck(self) -> list[str]:
        out = [f"request {rid} (worker {r.worker}, input_length {r.turn.input_length})"
               for rid, r in sorted(self.live.items())]
        if not out and self.admission.has_pending_release():
            out.append("unreleased workload turns with no future arrival time")
        return out

    # ------------------------------------------------------------------ arrivals and routing

    def _prefetch_hashes(self, turns: list[Turn]) -> None:
        """Hash upcoming first turns in one vectorised batch (same values as one by one)."""
        hashes = block_hashes_from_trace_batch(
            [t.hash_ids for t in turns], [t.input_length for t in turns], self.trace_block, self.block_size
        )
        cache = self.hash_cache
        for t, h in zip(turns, hashes):
            cache[t.request_id] = h

    def _arrive(self, item: ReadyTurn) -> None:
        turn = item.turn
        rid = turn.request_id
        if rid in self.live:
            raise ReplayInvariantError(f"request {rid} is already active")
        hashes = self.hash_cache.pop(rid, None)
        if hashes is None:
            hashes = block_hashes_from_trace(turn.hash_ids, turn.input_length, self.trace_block, self.block_size)
        req = AggRequest(turn, item.arrival_ms, EngineRequest(rid, turn.input_length, turn.output_length, hashes))
        self.collector.on_arrival(rid, item.arrival_ms, turn.input_length)
        self.live[rid] = req
        idx = self.pool.router.route(req.request, self.clock.now_ms)
        if idx is None:
            self.held[rid] = req
        else:
            self._submit(req, idx)

    def _submit(self, req: AggRequest, idx: int) -> None:
        pool = self.pool
        if idx not in pool.active:
            raise RouterError(f"router returned worker {idx}, which is not in the pool {pool.active}")
        req.worker = idx
        if self.signals:
            req.overlap = pool.router.overlap_tokens(req.rid)
        # A plain request only joins the worker's waiting queue, also while a pass is in flight;
        # a bulk run in flight is cut first, where the pass-by-pass replay would be.
        self.passes.settle(_D, idx)
        pool.workers[idx].submit(req.request)
        pool.dirty[idx] = True

    def _released(self, admitted: Sequence[Admission]) -> None:
        """Submit the requests the router released from its queue, in its order."""
        for rid, idx in admitted:
            req = self.held.pop(rid, None)
            if req is None:
                raise RouterError(f"router released request {rid}, which it does not hold")
            self._submit(req, idx)

    # ------------------------------------------------------------------ passes (the PassListener)

    def pass_started(self, stage: Stage, plan: PassPlan, idx: int) -> None:
        now = self.clock.now_ms
        collector = self.collector
        for adm in plan.admissions:
            req = self.live.get(adm.request_id)
            if req is None:
                raise ReplayInvariantError(f"admission of unknown request {adm.request_id}")
            collector.on_admit(req.rid, adm.reused_input_tokens)
            collector.on_decode_admit(req.rid, idx)
            if req.first_admit_ms is None:
                req.first_admit_ms = now
        if self.kv_feed and plan.pass_start_kv_events:
            self.pool.router.on_kv_events(idx, plan.pass_start_kv_events, now)

    def pass_done(self, stage: Stage, done: PassCompletion, idx: int) -> None:
        """Worker ``idx`` ended a pass: KV events, tokens, first tokens to the router, terminals."""
        now = self.clock.now_ms
        router = self.pool.router
        if self.kv_feed and done.kv_events:
            router.on_kv_events(idx, done.kv_events, now)
        self.collector.on_tokens(done.emitted, now, idx, done.run_times, done.delta)
        if self.signals:
            live = self.live
            for rid in done.emitted.tolist():
                req = live.get(rid)
                if req is not None and not req.prefilled:
                    req.prefilled = True
                    released = router.on_prefill_complete(rid, now)
                    if released:
                        self._released(released)
        for rid in done.finished:
            self._end(rid, _COMPLETED)
        for rid in done.rejected:
            self._end(rid, _REJECTED)

    def _end(self, rid: int, status: TerminalStatus) -> None:
        req = self.live.pop(rid, None)
        if req is None:
            return
        now = self.clock.now_ms
        if self.collector.on_terminal(rid, status, now):
            req.terminal_ms = now
        if status is _COMPLETED:
            self.reuse[0] += self.collector.reused_of(rid)
            self.reuse[1] += req.turn.input_length
        released = self.pool.router.on_free(rid, now)
        if released:
            self._released(released)
        self.admission.on_request_terminal(rid, now)
        if self.records is not None:
            self.records.write(stable_json_line(agg_record(req.rid, req.turn, req.arrival_ms, req.first_admit_ms,
                                                           req.terminal_ms, req.worker, self.collector)))
        if self.on_retired is not None:
            self.on_retired(rid)

    def write_incomplete_records(self) -> None:
        """Records of requests still in flight at the end (time cap), in request-id order."""
        if self.records is None:
            return
        for rid in sorted(self.live):
            r = self.live[rid]
            self.records.write(stable_json_line(agg_record(r.rid, r.turn, r.arrival_ms, r.first_admit_ms,
                                                           r.terminal_ms, r.worker, self.collector)))

    def summary(self) -> dict[str, float]:
        """Prefix reuse over completed requests (routers other than round robin)."""
        reused, total = self.reuse
        return {"prefix_cache_reused_ratio_routed": reused / total if total else 0.0}

    # ------------------------------------------------------------------ end state (invariants.EndState)

    def live_requests(self) -> list[int]:
        return sorted(self.live)

    def workers(self, stage: int) -> tuple[EngineWorker, ...]:
        """The pool's workers as the decode stage (the reference books aggregated workers there)."""
        return tuple(self.pool.workers) if stage == Stage.DECODE else ()

    @property
    def routed_unreleased(self) -> int:
        """Requests a router was told of and not freed yet (0 at the end of a complete run)."""
        return len(self.live) if self.signals else 0

    def routers(self) -> tuple[Router, ...]:
        return (self.pool.router,)

    def coordinator_of(self, request_id: int) -> None:
        return None
