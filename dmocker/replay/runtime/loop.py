"""The replay's event loop: a virtual clock moved from event to event, and at each time step the
phases that apply what is due, in the reference's order (``ai-dynamo/dynamo``
``lib/mocker/src/replay/offline/disagg.rs``).

Per time step the phases run in a fixed order -- pass completions, workers becoming ready
(planner), transfer completions, timers (faults, tests), arrivals, handoff actions, prefill
passes, decode passes, then the planner -- looped to a fixed point.  With work left and no
future event the run stops with a :class:`DeadEndError` naming the requests.

:class:`DisaggRuntime` is also where the parts are built and wired, bottom up:

* :class:`~.pool.WorkerPool` x 2, :class:`~.requests.RequestTable`, :class:`~.requests.ActionQueue`
  and the :class:`~.clock.Clock`: state, no behaviour beyond their own;
* :class:`~.handoffs.Handoffs`: the coordinator boundary (arrivals, facts, outcomes, event log);
* :class:`~.routes.Routing`: the routers' signals and the requests they release;
* :class:`~.lifecycle.Lifecycle`: a request's end, its retirement and record;
* :class:`~.pass_effects.PassEffects`: what a completed pass means for its requests;
* :class:`~.passes.PassScheduler`: starting passes, bulk runs and their cuts;
* :class:`~.executor.ActionExecutor`: the coordinator's actions against the engines;
* :class:`~.control.ClusterControl`: what planners, faults and end-of-run checks use.

Calls point down that list, with two exceptions made explicit by small protocols: the pass
scheduler reports completed passes to a ``PassListener`` (the pass effects), and routing hands
the requests a router releases to a ``Dispatcher`` (this loop, which forwards to the executor).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Final, cast

from dmocker.engines.interface import EngineArgs, EngineWorker
from dmocker.handoff import EventLogWriter, HandoffCoordinator, HandoffOrder, IssuedAction, TransferCompleted, load_spec

from ..collector import Collector
from ..errors import DeadEndError, ReplayInvariantError
from ..events import EventKind, EventQueue, top_kind, top_time
from ..request_state import Phase, RequestState, Stage
from ..routing import RoundRobin, Router
from ..timeseries import TimeSeriesRecorder
from ..workload import AdmissionQueue
from .clock import Clock
from .control import ClusterControl
from .executor import ActionExecutor
from .handoffs import CoordinatorFactory, Handoffs
from .lifecycle import Lifecycle
from .observer import ClusterPlanner
from .pass_effects import PassEffects
from .passes import PassScheduler
from .pool import WorkerPool
from .requests import ActionQueue, RequestTable
from .routes import Routing


__all__ = ["DisaggRuntime", "RuntimeResult"]

_PASS: Final = int(EventKind.PASS_COMPLETION)
_READY: Final = int(EventKind.WORKER_READY)
_TRANSFER: Final = int(EventKind.TRANSFER_COMPLETE)
_TIMER: Final = int(EventKind.TIMER)
_TICK: Final = int(EventKind.PLANNER_TICK)
# Planner ticks in a row with work left, no arrival to come and no worker starting, after which
# the run is a dead end (a planner that has not scaled in this many ticks will not).
_IDLE_TICKS_LIMIT: Final = 1000
# Stale transfer completions (their request already gone) tolerated in the heap before the
# loop sweeps them out in bulk.
_STALE_SWEEP: Final = 32
_DONE: Final = Phase.DONE


@dataclass(frozen=True, slots=True)
class RuntimeResult:
    """What a finished run hands to the report builder."""

    now_ms: float
    capped: bool
    stale_transfers_pruned: int


class DisaggRuntime:
    """Drives one replay; build it, call :meth:`run`, then read ``collector``."""

    def __init__(
        self,
        *,
        admission: AdmissionQueue,
        prefill_args: EngineArgs,
        decode_args: EngineArgs,
        prefill_workers: list[EngineWorker],
        decode_workers: list[EngineWorker],
        order: HandoffOrder,
        collector: Collector,
        max_sim_time_ms: float | None = None,
        records: IO[str] | None = None,
        events: IO[str] | None = None,
        on_retired: Callable[[int], None] | None = None,
        prefill_router: Router | None = None,
        decode_router: Router | None = None,
        fallback_transfer_delay_ms: float = 0.0,
        planner: ClusterPlanner | None = None,
        sampler: TimeSeriesRecorder | None = None,
        coordinator_factory: CoordinatorFactory | None = None,
        bulk: bool = True,
    ) -> None:
        self.clock = clock = Clock()
        self.collector = collector
        self.admission = admission
        self.planner = planner
        self.sampler = sampler  # time series for the HTML report; None unless asked
        self.cap_ms = max_sim_time_ms
        self.stale_pruned = 0
        self.events: EventQueue[object] = EventQueue()
        p_router, d_router = prefill_router or RoundRobin(), decode_router or RoundRobin()
        self.pools = pools = (
            WorkerPool(Stage.PREFILL, prefill_workers, p_router),
            WorkerPool(Stage.DECODE, decode_workers, d_router),
        )
        for pool in pools:
            for idx in range(len(pool.workers)):
                pool.router.add_worker(idx, 0.0)
        self.table = table = RequestTable()
        self.queue = queue = ActionQueue()
        spec = load_spec()
        engine = prefill_args.engine
        # The one event-log writer (shared with the conformance fixture), fed by the spec.
        event_log = EventLogWriter(events.write, engine, spec) if events is not None else None
        self.handoffs = handoffs = Handoffs(
            clock, table, queue, collector, order=order, spec=spec,
            make_coord=coordinator_factory or HandoffCoordinator, fallback_ms=fallback_transfer_delay_ms,
            event_log=event_log, observer=planner, trace_block=admission.trace_block_size,
            block_size=prefill_args.page_tokens,
        )
        signals = not all(type(pool.router) is RoundRobin for pool in pools)
        self.routing = routing = Routing(clock, pools, collector, self, signals=signals,
                                         keep_overlap=records is not None)
        self.lifecycle = lifecycle = Lifecycle(clock, table, queue, pools, routing, admission, collector,
                                               observer=planner, records=records, on_retired=on_retired)
        self.effects = effects = PassEffects(clock, collector, handoffs, routing, lifecycle, observer=planner)
        # Bulk decode runs are off with a time cap: a run reports its passes' tokens when it
        # completes, so a run crossing the cap would leave out the passes it ended by the cap.
        self.passes = passes = PassScheduler(clock, self.events, pools, queue, effects,
                                             observer=planner, bulk=bulk and max_sim_time_ms is None)
        self.executor = ActionExecutor(clock, self.events, pools, passes, handoffs, routing, lifecycle, collector,
                                       observer=planner)
        self.control = ClusterControl(clock, self.events, pools, table, queue, passes, handoffs, routing, collector,
                                      admission)
        if planner is not None:
            self.control.plan_pools()
        admission.set_prefetch(handoffs.prefetch_hashes)
        if events is not None:
            events.write('{"dmocker_event_log":"1.0"}\n')

    @property
    def now_ms(self) -> float:
        return self.clock.now_ms

    def dispatch(self, req: RequestState, issued: IssuedAction, stage: int, idx: int) -> bool:
        """Routing's :class:`~.routes.Dispatcher`: the executor applies what a router released."""
        return self.executor.dispatch(req, issued, stage, idx)

    # ------------------------------------------------------------------ main loop

    def start(self) -> None:
        """Time 0: the planner's first look, and what is due at once."""
        if self.planner is not None:
            self.planner.start()
        self._drain()

    def run(self) -> RuntimeResult:
        capped = False
        self.start()
        heap = self.events.raw
        admission = self.admission
        control = self.control
        clock = self.clock
        cap = self.cap_ms
        sampler = self.sampler
        idle_steps = 0  # consecutive steps at which only planner ticks could change anything
        while not control.is_done():
            t = admission.next_ready_time()
            if t is None and len(heap) == control.idle_events and heap:
                idle_steps = self._count_idle_step(idle_steps)
            else:
                idle_steps = 0
            if heap and (t is None or top_time(heap) < t):
                t = top_time(heap)
            if t is None:
                raise DeadEndError(clock.now_ms, self._describe_stuck())
            if cap is not None and t > cap:
                capped = True
                break
            if t < clock.now_ms:
                raise ReplayInvariantError(f"clock would move backwards: {t} < {clock.now_ms}")
            if sampler is not None and t > sampler.next_ms:  # time series: once per bucket
                sampler.sample_until(t)
            clock.now_ms = t
            self._drain()
        now = clock.now_ms
        if self.planner is None:
            n_p, n_d = len(self.pools[0].workers), len(self.pools[1].workers)
            self.collector.add_worker_seconds(n_p * now / 1000.0, n_d * now / 1000.0)
        else:
            self.collector.add_worker_seconds(*self.planner.worker_seconds(now))
        return RuntimeResult(now, capped, self.stale_pruned)

    def next_due_ms(self) -> float | None:
        """When something is next due: an event, or a turn's release (None: nothing is)."""
        heap = self.events.raw
        t = self.admission.next_ready_time()
        if heap and (t is None or top_time(heap) < t):
            t = top_time(heap)
        return t

    def advance(self, until_ms: float) -> None:
        """Apply, in order, everything due up to ``until_ms``, then stand at ``until_ms``: how a
        live edge drives the run from its own clock, pushing arrivals between calls.  The
        same steps as :meth:`run`, so the same arrivals give the same results."""
        clock = self.clock
        if until_ms < clock.now_ms:
            raise ReplayInvariantError(f"clock would move backwards: {until_ms} < {clock.now_ms}")
        while True:
            t = self.next_due_ms()
            if t is None or t > until_ms:
                break
            clock.now_ms = max(t, clock.now_ms)
            self._drain()
        clock.now_ms = until_ms

    def _count_idle_step(self, steps: int) -> int:
        """Work is left, no request can arrive and the heap holds only planner ticks and
        worker start-ups: the planner alone can unblock the run.  Count such steps (a pending
        start-up resets the count: a worker is coming); after ``_IDLE_TICKS_LIMIT`` of them the
        planner is not going to act, and the run is a dead end rather than an endless loop."""
        if any(cast(int, e[1]) == _READY for e in self.events.raw):
            return 0
        if steps >= _IDLE_TICKS_LIMIT:
            raise DeadEndError(self.clock.now_ms, self._describe_stuck(),
                               f" (only planner ticks left, none of the last {_IDLE_TICKS_LIMIT} changed the cluster)")
        return steps + 1

    def _drain(self) -> None:
        """The per-timestamp phases (in the fixed order above), looped to a fixed point.

        Each phase is guarded by a cheap "anything to do?" test: the drain runs once per
        distinct timestamp.
        """
        heap = self.events.raw
        admission = self.admission
        table = self.table
        queue = self.queue
        passes = self.passes
        pool_p, pool_d = self.pools
        planner = self.planner
        sweeps = 0
        passes.started = False
        while True:
            now = self.clock.now_ms
            changed = False
            if heap:
                if table.stale_transfers > _STALE_SWEEP or top_kind(heap) == _TRANSFER:
                    changed = self._prune_stale_transfers()
                if heap and top_time(heap) == now:
                    if top_kind(heap) == _PASS:
                        changed = passes.apply_completions() or changed
                    if heap and top_time(heap) == now and top_kind(heap) == _READY and planner is not None:
                        changed = planner.apply_ready(now) or changed
                    if heap and top_time(heap) == now and top_kind(heap) == _TRANSFER:
                        changed = self._apply_transfer_completions() or changed
                    if heap and top_time(heap) == now and top_kind(heap) == _TIMER:
                        changed = self._run_timers() or changed
            if admission.has_ready(now):
                changed = self._release_arrivals() or changed
            if queue.items:
                changed = self._drive_actions() or changed
            if pool_p.any_dirty():
                changed = passes.drive_pool(Stage.PREFILL) or changed
            if pool_d.any_dirty():
                changed = passes.drive_pool(Stage.DECODE) or changed
            passes.started = True
            if (
                planner is not None
                and (planner.draining or (heap and top_time(heap) == now and top_kind(heap) == _TICK))
                and planner.after_sweep(now)
            ):
                # Drained workers removed, then ticks (last, as the reference): sweep again.
                continue
            if not changed:
                return
            # Skip the confirming sweep when it provably finds nothing to do: every phase
            # above is guarded by exactly one of these tests, so this is the same fixed point.
            if (
                not queue.items
                and not pool_p.any_dirty()
                and not pool_d.any_dirty()
                and not (heap and (top_time(heap) == now or top_kind(heap) == _TRANSFER
                                   or table.stale_transfers > _STALE_SWEEP))
                and not admission.has_ready(now)
            ):
                return
            sweeps += 1
            if sweeps > 1_000_000:
                raise ReplayInvariantError("drain did not reach a fixed point (a phase reports progress forever)")

    def _describe_stuck(self) -> list[str]:
        out: list[str] = []
        live = self.table.live
        for rid in sorted(live):
            r = live[rid]
            where = []
            if r.prefill_worker >= 0:
                where.append(f"prefill worker {r.prefill_worker}")
            if r.decode_worker >= 0:
                where.append(f"decode worker {r.decode_worker}")
            out.append(
                f"request {rid} (phase {r.phase.value}, handoff {r.coord.state_label()}"
                + (", " + ", ".join(where) if where else "")
                + f", input_length {r.turn.input_length})"
            )
        if not out and self.admission.has_pending_release():
            out.append("unreleased workload turns with no future arrival time")
        return out

    # ------------------------------------------------------------------ phases

    def _prune_stale_transfers(self) -> bool:
        """Drop transfer completions of requests that are gone: those at the top of the heap,
        and all of them once they make up half the heap."""
        removed = False
        events = self.events
        live = self.table.live
        table = self.table
        while True:
            if not events.top_is(EventKind.TRANSFER_COMPLETE):
                break
            payload = cast("tuple[int, int]", events.peek_payload())
            if payload[1] in live:
                break
            events.pop_top()
            table.stale_transfers = max(table.stale_transfers - 1, 0)
            self.stale_pruned += 1
            removed = True
        if table.stale_transfers > _STALE_SWEEP and table.stale_transfers * 2 > len(events):
            dropped = events.retain(
                lambda kind, p: not (kind is EventKind.TRANSFER_COMPLETE and cast("tuple[int, int]", p)[1] not in live)
            )
            self.stale_pruned += dropped
            table.stale_transfers = 0
            removed = removed or dropped > 0
        return removed

    def _apply_transfer_completions(self) -> bool:
        changed = False
        live = self.table.live
        table = self.table
        for payload in self.events.ready(self.clock.now_ms, EventKind.TRANSFER_COMPLETE):
            gen, rid = cast("tuple[int, int]", payload)
            req = live.get(rid)
            if req is None:
                table.stale_transfers = max(table.stale_transfers - 1, 0)
                self.stale_pruned += 1
                continue
            if gen != req.transfer_gen:  # superseded by a recomputation
                continue
            req.transfer_done_ms = self.clock.now_ms
            self.handoffs.fact(req, TransferCompleted(req.rid))
            changed = True
        return changed

    def _run_timers(self) -> bool:
        changed = False
        for callback in self.events.ready(self.clock.now_ms, EventKind.TIMER):
            cast("Callable[[], None]", callback)()
            changed = True
        return changed

    def _release_arrivals(self) -> bool:
        ready = self.admission.drain_ready(self.clock.now_ms)
        for item in ready:
            self.handoffs.arrive(item)
        return bool(ready)

    def _drive_actions(self) -> bool:
        changed = False
        queue = self.queue
        items = queue.items  # (never replaced: filtered in place by ActionQueue.drop)
        executor = self.executor
        while queue.head < len(items):
            req, issued = items[queue.head]
            queue.head += 1
            req.queued -= 1
            if req.phase is _DONE:  # pragma: no cover - removed on retirement
                continue
            if executor.execute(req, issued):  # False: parked, held or deferred
                changed = True
        items.clear()
        queue.head = 0
        return changed
