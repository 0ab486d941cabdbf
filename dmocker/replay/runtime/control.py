"""The controls a planner and fault injection use on a running cluster, and what end-of-run
checks read from it.

Why one facade: a planner (dmocker.replay.planner) adds, drains and removes workers; fault
injection (dmocker.replay.faults) schedules callbacks, delivers terminal facts, fails acquires,
crashes and restarts workers; the invariants read the final state.  None of them needs the
runtime's parts one by one, and a plain run uses none of this.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, cast

from dmocker.engines.interface import EngineWorker
from dmocker.handoff import FACT_CLASSES, HandoffCoordinator, TerminalFact

from ..collector import Collector, TerminalStatus
from ..errors import ReplayInvariantError
from ..events import EventKind, EventQueue
from ..routing import Router
from ..workload import AdmissionQueue
from .clock import Clock
from .handoffs import Handoffs
from .passes import PassScheduler
from .pool import WorkerPool
from .requests import ActionQueue, RequestTable
from .routes import Routing

__all__ = ["ClusterControl"]

_P: Final = 0
_D: Final = 1
_TIMER: Final = int(EventKind.TIMER)


class ClusterControl:
    """Hook points for planners and faults, and read access for end-of-run checks."""

    __slots__ = ("clock", "events", "pools", "table", "queue", "passes", "handoffs", "routing", "collector",
                 "admission", "idle_events", "ends")

    def __init__(
        self,
        clock: Clock,
        events: EventQueue[object],
        pools: tuple[WorkerPool, ...],
        table: RequestTable,
        queue: ActionQueue,
        passes: PassScheduler,
        handoffs: Handoffs,
        routing: Routing,
        collector: Collector,
        admission: AdmissionQueue,
    ) -> None:
        self.clock = clock
        self.events = events
        self.pools = pools
        self.table = table
        self.queue = queue
        self.passes = passes
        self.handoffs = handoffs
        self.routing = routing
        self.collector = collector
        self.admission = admission
        # Planner ticks and WorkerReady events are "idle" events: they keep no run alive.
        self.idle_events = 0
        # terminal fact -> the status a request it ends gets (the spec's request_ends)
        self.ends: dict[type, TerminalStatus] = {
            FACT_CLASSES[f.name]: TerminalStatus[f.request_ends.upper()]
            for f in handoffs.spec.facts if f.request_ends is not None
        }

    @property
    def now_ms(self) -> float:
        return self.clock.now_ms

    # ------------------------------------------------------------------ time

    def at(self, t_ms: float, callback: Callable[[], None]) -> None:
        """Run ``callback()`` at ``t_ms``, in the timer phase, in scheduling order."""
        self.events.push(t_ms, _TIMER, callback, self.clock.now_ms)

    def at_idle(self, t_ms: float, callback: Callable[[], None]) -> None:
        """:meth:`at`, for a timer that keeps no run alive (a worker's own clock: a run whose
        requests all ended does not wait for it, so arming one changes nothing until it fires)."""
        def fire() -> None:
            self.idle_events -= 1
            callback()

        self.events.push(t_ms, _TIMER, fire, self.clock.now_ms)
        self.idle_events += 1

    def inject(self, t_ms: float, request_id: int, kind: type[TerminalFact]) -> None:
        """Deliver a terminal fact to a request's coordinator at ``t_ms`` (if it is still live)."""
        def land() -> None:
            self.deliver(request_id, kind)

        self.at(t_ms, land)

    def push_idle_event(self, t_ms: float, kind: EventKind, payload: tuple[int, int]) -> None:
        """Schedule a planner tick or a WorkerReady (events that keep no run alive)."""
        self.events.push(t_ms, kind, payload)
        self.idle_events += 1

    def pop_idle_event(self, now_ms: float, kind: EventKind) -> tuple[int, int] | None:
        popped, payload = self.events.pop_ready(now_ms, kind)
        if not popped:
            return None
        self.idle_events -= 1
        return cast("tuple[int, int]", payload)

    # ------------------------------------------------------------------ requests

    def deliver(self, request_id: int, kind: type[TerminalFact]) -> tuple[bool, bool]:
        """Deliver a terminal fact now: (the request was live, its terminal status was recorded here)."""
        req = self.table.live.get(request_id)
        if req is None:
            return False, False
        now = self.clock.now_ms
        status = self.ends[kind]
        recorded = self.collector.on_terminal(request_id, status, now)
        if recorded:
            req.terminal_ms = now
        self.handoffs.fact(req, kind(request_id))
        return True, recorded

    def on_acquire(self, request_id: int, hook: Callable[[], bool]) -> None:
        """Ask ``hook()`` before each SubmitPrefill / ReserveDestination of the request; True:
        the command fails (acknowledged FAILED, not executed) and the hook is dropped.  Call
        before the request arrives (from its coordinator factory)."""
        self.handoffs.acquire_hooks[request_id] = hook

    def live_requests(self) -> list[int]:
        return self.table.ids()

    def coordinator_of(self, request_id: int) -> HandoffCoordinator | None:
        req = self.table.live.get(request_id)
        return None if req is None else req.coord

    @property
    def routed_unreleased(self) -> int:
        """Router holds not yet released (requests still live); 0 at the end of a complete run."""
        return sum(bin(r.routed).count("1") for r in self.table.live.values())

    def is_done(self) -> bool:
        """Nothing left to do: no request in flight or live, no event but idle ones, no action
        queued, parked or held, and the workload released everything."""
        pools = self.pools
        return (
            self.table.in_flight == 0
            and not self.table.live
            and len(self.events) == self.idle_events
            and not self.queue.items
            and not pools[_P].waiting
            and not pools[_D].waiting
            and not pools[_P].held
            and not pools[_D].held
            and self.admission.is_drained()
        )

    # ------------------------------------------------------------------ workers

    def workers(self, stage: int) -> tuple[EngineWorker, ...]:
        return tuple(self.pools[stage].workers)

    def worker(self, stage: int, idx: int) -> EngineWorker:
        return self.pools[stage].workers[idx]

    def routers(self) -> tuple[Router, Router]:
        return self.pools[_P].router, self.pools[_D].router

    def append_worker(self, stage: int, worker: EngineWorker) -> None:
        """Append a new worker at the next index (neither routable nor serving yet)."""
        pool = self.pools[stage]
        if worker.worker_idx != len(pool.workers):
            raise ReplayInvariantError(f"new worker index {worker.worker_idx} is not the next unused one")
        pool.append_worker(worker)

    def set_routable(self, stage: int, idx: int, routable: bool) -> None:
        """Put a worker in (ready) or take it out of (draining) the pool routing picks from."""
        self.pools[stage].set_routable(idx, routable)

    def set_serving(self, stage: int, idx: int, serving: bool) -> None:
        """Start (ready) or stop (removed) running passes on a worker."""
        self.pools[stage].set_serving(idx, serving)

    def plan_pools(self) -> None:
        """A planner drains workers: keep each pool's serving workers apart from its routable ones."""
        for pool in self.pools:
            pool.serving = list(pool.active)

    def wake_parked(self, stage: int) -> bool:
        """Retry the actions parked while the pool had no routable worker."""
        pool = self.pools[stage]
        if not pool.waiting:
            return False
        self.queue.extend(pool.take_parked())
        return True

    def parked_count(self, stage: int) -> int:
        """Requests waiting to be routed to the pool: parked (no routable worker) or held in its router's queue."""
        return self.pools[stage].parked_count()

    def settle_worker(self, stage: int, idx: int) -> tuple[float, float] | None:
        """Before reading a worker: cut its bulk run where the per-pass replay is now; returns
        the pass in flight as ``(start, end)``, or None when idle."""
        return self.passes.in_flight(stage, idx)

    def worker_removable(self, stage: int, idx: int) -> bool:
        """No pass in flight, nothing queued/running/held/reserved, no deferred command.

        No settle needed: a worker in a bulk run is busy and runs requests, so it is not
        removable pass by pass either (a run ends before any of its requests finishes)."""
        pool = self.pools[stage]
        w = pool.workers[idx]
        return not w.busy and w.is_drained() and not pool.deferred.get(idx)

    def route_topology_changed(self, stage: int, worker: int, *, added: bool) -> None:
        """Tell a pool's router that ``worker`` joined or left it (after updating the routable list)."""
        self.routing.topology_changed(stage, worker, added=added)

    def remove_worker(self, stage: int, idx: int, replacement: EngineWorker) -> list[int]:
        """Worker ``idx`` of ``stage`` leaves its pool at once (a crash): its running pass and KV
        are lost (``replacement``, an empty worker, takes its slot), routing skips it, actions
        deferred behind its pass run now against the empty worker.  Returns the live requests
        that still depend on it (sources not yet released; any destination), in id order."""
        self._deliver_ended_passes(stage, idx)
        pool = self.pools[stage]
        if idx in pool.active:
            pool.active.remove(idx)
        if pool.planned:
            pool.set_serving(idx, False)
        self.events.remove(EventKind.PASS_COMPLETION, (stage, idx))
        pool.workers[idx] = replacement
        pool.dirty[idx] = False
        self.passes.wake_deferred(pool, idx)
        self.routing.topology_changed(stage, idx, added=False)
        out: list[int] = []
        live = self.table.live
        for rid in sorted(live):
            r = live[rid]
            if stage == _P and r.prefill_worker == idx and r.source_released_ms is None:
                out.append(rid)
            elif stage == _D and r.decode_worker == idx:
                out.append(rid)
        return out

    def _deliver_ended_passes(self, stage: int, idx: int) -> None:
        """Before a crash: the passes of a bulk run that ended by now did happen (their tokens
        count), the one in flight is lost.  Cut the run at now, then once more at the start of
        the pass in flight, and hand the collector the tokens of what is left, at their pass
        end times.  Tokens only: the passes before the one in flight finish nobody (a run's
        last pass is the first that may), and what the engine does when a pass ends (retrying
        destinations queued behind the pass in flight) never happened pass by pass: the
        crash came first, and the worker's state is discarded with it."""
        span = self.passes.in_flight(stage, idx)
        if span is None or stage != _D:  # bulk runs are decode runs
            return
        w = self.pools[stage].workers[idx]
        cut = w.split_run(span[0], False)
        if cut is None:
            return
        self.events.remove(EventKind.PASS_COMPLETION, (stage, idx))
        done = w.finish_pass()
        self.collector.on_tokens(done.emitted, cut[0], idx, done.run_times, done.delta)

    def add_worker(self, stage: int, idx: int) -> None:
        """Worker ``idx`` of ``stage`` (re)joins its pool; actions parked on an empty pool resume."""
        pool = self.pools[stage]
        if idx not in pool.active:
            pool.active.append(idx)
            pool.active.sort()
        if pool.planned:
            pool.set_serving(idx, True)
        pool.dirty[idx] = True
        self.routing.topology_changed(stage, idx, added=True)
        if pool.waiting:
            self.queue.extend(pool.take_parked())

    def set_pool_gone(self, stage: int) -> None:
        """The pool of ``stage`` is empty and stays so: parked and future acquires fail."""
        pool = self.pools[stage]
        pool.gone = True
        if pool.waiting:
            self.queue.extend(pool.take_parked())
