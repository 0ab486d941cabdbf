"""The disaggregated replay runtime: one handoff coordinator per request, driven to the end.

The coordinator decides *what* happens to a request (dmocker.handoff, compiled-table path);
this module only *executes* its actions against the engines and feeds back the facts and
outcomes, in the reference's order (``ai-dynamo/dynamo``
``lib/mocker/src/replay/offline/disagg.rs``):

* SubmitPrefill / ReserveDestination are routed (round robin) and applied at once; a command
  error becomes ``Outcome(FAILED, message)``.  They park while their pool has no worker.
* ActivateDestination, ReleaseSource and both cancels are deferred while the target worker is
  mid-pass; that worker's pass completion wakes them (commands may only touch queued or
  post-pass state, because passes are computed eagerly at their start).
* StartTransfer is acknowledged Scheduled; a positive delay schedules a TransferComplete event,
  a zero delay completes the transfer in the same drain.  Completions for handoffs that were
  retired meanwhile are pruned.
* A request is *retired* once its decode terminal was seen and its coordinator completed, in
  either order (the decode terminal may precede ReleaseSource).

Per timestamp the phases run in a fixed order (pass completions, transfer completions, injected
facts, arrivals, handoff actions, prefill passes, decode passes), looped to a fixed point; with
work left and no future event the run stops with a :class:`DeadEndError` naming the requests.

This module holds the clock, the drain loop and its phases; the rest of
:class:`DisaggRuntime` comes from layers, one concern each, over the state declared in
``runtime_base``: ``actions`` (executing the coordinator's actions), ``coordinator_io``
(arrivals, facts and outcomes, retirement, event log and records), ``routing_hooks`` (signals
for routers other than round robin), ``cluster_control`` (planner and fault controls) and
``pass_driver`` (starting the workers' passes, bulk decode runs and their cuts, applying
completed passes).  The layers form one chain of single inheritance (``RuntimeBase`` <-
``ActionExecution`` <- ``CoordinatorIO`` <- ``RoutingHooks`` <- ``ClusterControl`` <-
``PassDriver`` <- ``DisaggRuntime``) because mypyc compiles only single inheritance into
native classes (``setup.py``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Final, cast

from dmocker.handoff import (
    HandoffCoordinator,
    HandoffOrder,
    TransferCompleted,
)
from dmocker.handoff import EventLogWriter, load_spec
from dmocker.engines.interface import (
    EngineArgs,
    EngineWorker,
)

from .collector import Collector
from .events import DeadEndError, EventKind, EventQueue, ReplayInvariantError, top_kind, top_time
from .pass_driver import _PASS, _PREFILL, PassDriver, _any
from .routing import RoundRobin, Router
from .request_state import Phase, Queued, RequestState, Stage
from .timeseries import TimeSeriesRecorder
from .workload import AdmissionQueue

if TYPE_CHECKING:
    from .planner.loop import PlannerLoop
_Req = RequestState
_Queued = Queued

__all__ = ["Phase", "Stage", "DisaggRuntime", "RuntimeResult", "CoordinatorFactory"]


#: Builds a request's coordinator: ``factory(request_id, order, fallback_transfer_delay_ms=...,
#: spec=...)``.  The default is HandoffCoordinator itself; faults and user coordinators plug in here.
CoordinatorFactory = Callable[..., HandoffCoordinator]

_TRANSFER: Final = int(EventKind.TRANSFER_COMPLETE)
_INJECTED: Final = int(EventKind.INJECTED_FACT)
_READY: Final = int(EventKind.WORKER_READY)
# Planner ticks in a row with work left, no arrival to come and no worker starting, after which
# the run is a dead end (a planner that has not scaled in this many ticks will not).
_IDLE_TICKS_LIMIT: Final = 1000
_TICK: Final = int(EventKind.PLANNER_TICK)
# Enum members used on the per-action path, bound once: in Python 3.11 reading a member off
# its class (``Phase.DONE``) costs ~5x a module global, and these run ~10 times per request.
_DONE: Final = Phase.DONE
_DECODE: Final = Stage.DECODE


@dataclass(frozen=True, slots=True)
class RuntimeResult:
    """What a finished run hands to the report builder."""

    now_ms: float
    capped: bool
    stale_transfers_pruned: int


class DisaggRuntime(PassDriver):
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
        planner: PlannerLoop | None = None,
        sampler: TimeSeriesRecorder | None = None,
        coordinator_factory: CoordinatorFactory | None = None,
        bulk: bool = True,
    ) -> None:
        self.now_ms = 0.0
        self._sampler = sampler  # time series for the HTML report; None unless asked
        self._make_coord = coordinator_factory or HandoffCoordinator
        self._timers = {}
        self._pool_gone = [False, False]  # per stage: empty for good (no restart): acquires fail
        self._acquire_hooks = {}  # request -> "fail this acquire?"
        self._timer_seq = 0
        # Bulk decode runs (workers compute the passes until their batch changes at once;
        # see _settle).  A planner settles the workers it reads first (settle_worker), so its
        # ticks see the per-pass state.  Off with a time cap: a run reports its passes' tokens
        # when it completes, so a run crossing the cap would leave out the passes it ended by
        # the cap, which the per-pass replay reports; splitting those off at the cap would have
        # to complete them at their own end times (possibly before the clock) and would wake
        # the worker's deferred commands early.
        self._bulk = bulk and max_sim_time_ms is None
        self._pools_started = False  # this time step is past its first pool phase
        # a bulk run's push: (time, rank of that push, rank of a first-round push of its pool)
        self._run_push = {}
        # bulk runs' pass times and the one-by-one stretches after early cuts (PassDriver)
        self._run_pass_ms = {}
        self._solo = {}
        self._solo_next = {}
        self._admission = admission
        self._workers = (prefill_workers, decode_workers)
        self._active = (
            list(range(len(prefill_workers))),
            list(range(len(decode_workers))),
        )
        # Workers that run passes: the routable ones (_active) plus, with a planner, draining ones.
        self._serving = self._active
        self._routers = (prefill_router or RoundRobin(), decode_router or RoundRobin())
        # ---- routing hook (dmocker.replay.routing): requests a router holds in its queue, the
        # overlap each routed request saw (records), and whether the routers need the signals
        # round robin ignores (prefill completion, KV events).
        self._held = ({}, {})
        self._route_signals = not all(type(r) is RoundRobin for r in self._routers)
        self._kv_feed = self._routers[0].wants_kv_events
        self._route_overlap = (
            ({}, {}) if self._route_signals else None
        )
        self._pool_reuse = [0, 0, 0]  # completed: prefill reused, decode reused, input tokens
        for stage, pool in enumerate(self._workers):
            for idx in range(len(pool)):
                self._routers[stage].add_worker(idx, 0.0)
        self._order = order
        self._block_size = prefill_args.page_tokens
        self._trace_block = admission_block_size(admission)
        self._engine_name = prefill_args.backend.value
        self.collector = collector
        self._cap = max_sim_time_ms
        self._records = records
        self._events_out = events
        self._on_retired = on_retired
        self._fallback = fallback_transfer_delay_ms

        self._events = EventQueue()
        self._live = {}
        self._in_flight = 0
        self._stale = 0
        self._stale_pruned = 0
        self._pending = []
        self._pending_head = 0
        self._waiting = (deque(), deque())
        self._deferred = ({}, {})
        self._source_output_tokens = 0
        # A worker is "dirty" when something happened to it since its last start_pass
        # returned None (a command, a pass completion): only dirty idle workers are asked to
        # start a pass, because start_pass is a pure function of the worker's state.
        self._dirty = (
            [True] * len(prefill_workers),
            [True] * len(decode_workers),
        )
        self._spec = load_spec()
        # The one event-log writer (shared with the conformance fixture), fed by the spec.
        self._event_log = EventLogWriter(events.write, self._engine_name, self._spec) if events is not None else None
        # Planner ticks and WorkerReady events are "idle" events: they keep no run alive.
        self._idle_events = 0
        self._planner = planner
        if planner is not None:
            self._serving = (list(self._active[0]), list(self._active[1]))
            planner.attach(self)
        self._hash_cache = {}
        admission.set_prefetch(self._prefetch_hashes)
        if events is not None:
            events.write('{"dmocker_event_log":"1.0"}\n')

    # ------------------------------------------------------------------ main loop

    def run(self) -> RuntimeResult:
        capped = False
        if self._planner is not None:
            self._planner.start()
        self._drain()
        heap = self._events.raw
        admission = self._admission  # (its method called as a method: a native call)
        cap = self._cap
        sampler = self._sampler
        idle_steps = 0  # consecutive steps at which only planner ticks could change anything
        while not self._is_done():
            t = admission.next_ready_time()
            if t is None and len(heap) == self._idle_events and heap:
                idle_steps = self._count_idle_step(idle_steps)
            else:
                idle_steps = 0
            if heap and (t is None or top_time(heap) < t):
                t = top_time(heap)
            if t is None:
                raise DeadEndError(self.now_ms, self._describe_stuck())
            if cap is not None and t > cap:
                capped = True
                break
            if t < self.now_ms:
                raise ReplayInvariantError(f"clock would move backwards: {t} < {self.now_ms}")
            if sampler is not None and t > sampler.next_ms:  # time series: once per bucket
                sampler.sample_until(t)
            self.now_ms = t
            self._drain()
        if self._planner is None:
            n_p, n_d = len(self._workers[0]), len(self._workers[1])
            self.collector.add_worker_seconds(n_p * self.now_ms / 1000.0, n_d * self.now_ms / 1000.0)
        else:
            self.collector.add_worker_seconds(*self._planner.worker_seconds(self.now_ms))
        return RuntimeResult(self.now_ms, capped, self._stale_pruned)

    def _count_idle_step(self, steps: int) -> int:
        """Work is left, no request can arrive and the heap holds only planner ticks and
        worker start-ups: the planner alone can unblock the run.  Count such steps (a pending
        start-up resets the count: a worker is coming); after ``_IDLE_TICKS_LIMIT`` of them the
        planner is not going to act, and the run is a dead end rather than an endless loop."""
        if any(cast(int, e[1]) == _READY for e in self._events.raw):
            return 0
        if steps >= _IDLE_TICKS_LIMIT:
            raise DeadEndError(self.now_ms, self._describe_stuck(),
                               f" (only planner ticks left, none of the last {_IDLE_TICKS_LIMIT} changed the cluster)")
        return steps + 1

    @property
    def in_flight(self) -> int:
        """Requests arrived and not yet terminal (time-series probe)."""
        return self._in_flight

    @property
    def source_output_tokens(self) -> int:
        return self._source_output_tokens

    def _drain(self) -> None:
        """The per-timestamp drain (phases in the fixed order above), looped to a fixed point.

        Each phase is guarded by a cheap "anything to do?" test so that an idle phase costs a
        comparison, not a call: the drain runs once per distinct timestamp.
        """
        heap = self._events.raw
        admission = self._admission
        dirty_p, dirty_d = self._dirty
        sweeps = 0
        self._pools_started = False
        while True:
            now = self.now_ms
            changed = False
            if heap:
                rank = top_kind(heap)
                if self._stale > 32 or rank == _TRANSFER:
                    changed = self._prune_stale_transfers()
                if heap and top_time(heap) == now:
                    if top_kind(heap) == _PASS:
                        changed = self._apply_pass_completions() or changed
                    if heap and top_time(heap) == now and top_kind(heap) == _READY and self._planner is not None:
                        changed = self._planner.apply_ready(now) or changed
                    if heap and top_time(heap) == now and top_kind(heap) == _TRANSFER:
                        changed = self._apply_transfer_completions() or changed
                    if heap and top_time(heap) == now and top_kind(heap) == _INJECTED:
                        changed = self._apply_injected() or changed
            if admission.has_ready(now):
                changed = self._release_arrivals() or changed
            if self._pending:
                changed = self._drive_actions() or changed
            if _any(dirty_p):
                changed = self._drive_pool(_PREFILL) or changed
            if _any(dirty_d):
                changed = self._drive_pool(_DECODE) or changed
            self._pools_started = True
            planner = self._planner
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
                not self._pending
                and not _any(dirty_p)
                and not _any(dirty_d)
                and not (heap and (top_time(heap) == now or top_kind(heap) == _TRANSFER or self._stale > 32))
                and not admission.has_ready(now)
            ):
                return
            sweeps += 1
            if sweeps > 1_000_000:
                raise ReplayInvariantError("drain did not reach a fixed point (a phase reports progress forever)")

    def _is_done(self) -> bool:
        return (
            self._in_flight == 0
            and not self._live
            and len(self._events) == self._idle_events
            and not self._pending
            and not self._waiting[0]
            and not self._waiting[1]
            and not self._held[0]
            and not self._held[1]
            and self._admission.is_drained()
        )

    def _describe_stuck(self) -> list[str]:
        out: list[str] = []
        for rid in sorted(self._live):
            r = self._live[rid]
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
        if not out and self._admission.has_pending_release():
            out.append("unreleased workload turns with no future arrival time")
        return out

    # ------------------------------------------------------------------ phases

    def _prune_stale_transfers(self) -> bool:
        removed = False
        events = self._events
        while True:
            top = events.peek()
            if top is None or top.kind is not EventKind.TRANSFER_COMPLETE:
                break
            payload = events.peek_payload()
            assert payload is not None
            if payload[1] in self._live:
                break
            events.pop_top()
            self._stale = max(self._stale - 1, 0)
            self._stale_pruned += 1
            removed = True
        if self._stale > 32 and self._stale * 2 > len(events):
            live = self._live
            dropped = events.retain(
                lambda kind, p: not (kind is EventKind.TRANSFER_COMPLETE and p[1] not in live)
            )
            self._stale_pruned += dropped
            self._stale = 0
            removed = removed or dropped > 0
        return removed

    def _apply_transfer_completions(self) -> bool:
        changed = False
        for payload in self._events.ready(self.now_ms, EventKind.TRANSFER_COMPLETE):
            req = self._live.get(payload[1])
            if req is None:
                self._stale = max(self._stale - 1, 0)
                self._stale_pruned += 1
                continue
            self._fact(req, TransferCompleted(req.rid))
            changed = True
        return changed

    def _release_arrivals(self) -> bool:
        ready = self._admission.drain_ready(self.now_ms)
        for item in ready:
            self._on_arrival(item)
        return bool(ready)

    def _drive_actions(self) -> bool:
        changed = False
        pending = self._pending  # (never replaced: filtered in place by _remove_actions)
        while self._pending_head < len(pending):
            req, issued = pending[self._pending_head]
            self._pending_head += 1
            req.queued -= 1
            if req.phase is _DONE:  # pragma: no cover - removed on retirement
                continue
            if self._execute(req, issued):  # False: parked or deferred
                changed = True
        pending.clear()
        self._pending_head = 0
        return changed


def admission_block_size(admission: AdmissionQueue) -> int:
    return admission.trace_block_size
