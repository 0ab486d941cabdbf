"""Controls the planner and fault injection use on a running replay (a layer of the runtime).

Why apart from the drain loop: a planner (dmocker.replay.planner) adds, drains and removes
workers; fault injection (dmocker.replay.faults) crashes and restarts workers, delivers terminal
facts and fails acquires at chosen times.  Neither runs in a plain replay, and neither needs the
drain loop's internals beyond the state declared in :mod:`~dmocker.replay.runtime_base`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, cast

from dmocker.handoff import (
    FACT_CLASSES,
    Canceled,
    Failed,
    HandoffCoordinator,
    IssuedAction,
    Outcome,
    OutcomeKind,
    TimedOut,
    load_spec,
)
from dmocker.engines.interface import EngineWorker

from .actions import _ACQUIRE
from .collector import TerminalStatus
from .events import EventKind, ReplayInvariantError
from .request_state import RequestState, Stage
from .routing import Router
from .routing_hooks import RoutingHooks

__all__ = ["ClusterControl", "INJECT_KINDS"]

_P: Final = 0  # index of the prefill pool in per-stage tuples
_D: Final = 1  # index of the decode pool
_STAGES: Final[tuple[Stage, ...]] = (Stage.PREFILL, Stage.DECODE)  # (``...``: see RuntimeBase)
_K_FAILED: Final = OutcomeKind.FAILED
_Req = RequestState
#: The spec's terminal facts (the facts inject() may deliver), from the one class registry.
INJECT_KINDS: Final = cast(
    "tuple[type[Canceled] | type[Failed] | type[TimedOut], ...]",
    tuple(FACT_CLASSES[name] for name in load_spec().terminal_facts),
)
_INJECT_CODES: Final[dict[type, int]] = {cls: i for i, cls in enumerate(INJECT_KINDS)}
_TIMER_CODE: Final = 99  # an INJECTED_FACT payload (_TIMER_CODE, timer id): a callback of at()
_PASS: Final = int(EventKind.PASS_COMPLETION)


class ClusterControl(RoutingHooks):
    """Planner and fault controls of :class:`~dmocker.replay.runtime.DisaggRuntime` (a layer)."""

    # ------------------------------------------------------------------ injected facts and timers

    def inject(self, t_ms: float, request_id: int, kind: type[Canceled] | type[Failed] | type[TimedOut]) -> None:
        """Deliver a terminal fact to a request's coordinator at ``t_ms`` (if it is still live).

        The replay itself never produces these (neither does the reference offline); tests use
        this to exercise cancellation and timeouts mid-flight.
        """
        code = _INJECT_CODES[kind]
        self._events.push(t_ms, EventKind.INJECTED_FACT, (code, request_id), self.now_ms)

    def _apply_injected(self) -> bool:
        changed = False
        now = self.now_ms
        for code, rid in self._events.ready(now, EventKind.INJECTED_FACT):
            if code == _TIMER_CODE:
                self._timers.pop(rid)()
                changed = True
                continue
            req = self._live.get(rid)
            if req is None:
                continue
            cls = INJECT_KINDS[code]
            status = TerminalStatus.CANCELED if cls is Canceled else TerminalStatus.FAILED
            if self.collector.on_terminal(rid, status, now):
                req.terminal_ms = now
            self._fact(req, cls(rid))
            changed = True
        return changed


    # ------------------------------------------------------------------ planner hook points
    # Used by dmocker.replay.planner.loop (worker lifecycle) only; nothing here runs without one.

    def append_worker(self, stage: Stage, worker: EngineWorker) -> None:
        """Append a new worker at the next index (neither routable nor serving yet)."""
        if worker.worker_idx != len(self._workers[stage]):
            raise ReplayInvariantError(f"new worker index {worker.worker_idx} is not the next unused one")
        self._workers[stage].append(worker)
        self._dirty[stage].append(False)

    def set_routable(self, stage: Stage, idx: int, routable: bool) -> None:
        """Put a worker in (ready) or take it out of (draining) the pool routing picks from."""
        _toggle(self._active[stage], idx, routable)

    def set_serving(self, stage: Stage, idx: int, serving: bool) -> None:
        """Start (ready) or stop (removed) running passes on a worker."""
        _toggle(self._serving[stage], idx, serving)
        self._dirty[stage][idx] = serving

    def wake_parked(self, stage: Stage) -> bool:
        """Retry the actions parked while the pool had no routable worker."""
        waiting = self._waiting[stage]
        if not waiting:
            return False
        self._pending.extend(waiting)
        waiting.clear()
        return True

    def parked_count(self, stage: Stage) -> int:
        """Requests waiting to be routed to the pool: parked (no routable worker) or held in its router's queue."""
        return len(self._waiting[stage]) + len(self._held[stage])

    def worker(self, stage: Stage, idx: int) -> EngineWorker:
        return self._workers[stage][idx]

    def settle_worker(self, stage: Stage, idx: int) -> tuple[float, float] | None:
        """Before the planner reads a worker: cut its bulk run where the per-pass replay is now
        (``_settle``); returns the pass in flight as ``(start, end)`` (of a bulk run: its last
        pass, which the per-pass replay would have started by now), or None when idle.

        The start is the completion event's order key, which is the pass's start in both modes
        (see ``EventQueue.push``); a scan of the event heap, fine at the planner's tick rate.
        """
        self._settle(stage, idx)
        if not self._workers[stage][idx].busy:
            return None
        key = (int(stage), idx)
        for e in self._events.raw:
            if cast(int, e[1]) == _PASS and e[5] == key:
                return cast(float, e[2]), cast(float, e[0])
        return None

    def worker_removable(self, stage: Stage, idx: int) -> bool:
        """No pass in flight, nothing queued/running/held/reserved, no deferred command.

        No settle needed: a worker in a bulk run is busy and runs requests, so it is not
        removable pass by pass either (a run ends before any of its requests finishes)."""
        w = self._workers[stage][idx]
        return not w.busy and w.is_drained() and not self._deferred[stage].get(idx)

    def workload_done(self) -> bool:
        return self._is_done()

    def push_idle_event(self, t_ms: float, kind: EventKind, payload: tuple[int, int]) -> None:
        """Schedule a planner tick or a WorkerReady (events that keep no run alive)."""
        self._events.push(t_ms, kind, payload)
        self._idle_events += 1

    def pop_idle_event(self, now_ms: float, kind: EventKind) -> tuple[int, int] | None:
        popped, payload = self._events.pop_ready(now_ms, kind)
        if not popped:
            return None
        self._idle_events -= 1
        assert payload is not None
        return payload


    # ------------------------------------------------------------------ fault hooks
    # Used by dmocker.replay.faults (only when faults are injected): timed callbacks, terminal
    # facts delivered from outside, and a worker leaving and rejoining its pool.

    def at(self, t_ms: float, callback: Callable[[], None]) -> None:
        """Run ``callback()`` at ``t_ms``, in the injected-fact phase (in scheduling order)."""
        key = self._timer_seq
        self._timer_seq = key + 1
        self._timers[key] = callback
        self._events.push(t_ms, EventKind.INJECTED_FACT, (_TIMER_CODE, key), self.now_ms)

    def deliver(self, request_id: int, kind: type[Canceled] | type[Failed] | type[TimedOut]) -> tuple[bool, bool]:
        """Deliver a terminal fact now: (the request was live, its terminal status was recorded here)."""
        req = self._live.get(request_id)
        if req is None:
            return False, False
        status = TerminalStatus.CANCELED if kind is Canceled else TerminalStatus.FAILED
        recorded = self.collector.on_terminal(request_id, status, self.now_ms)
        if recorded:
            req.terminal_ms = self.now_ms
        self._fact(req, kind(request_id))
        return True, recorded

    def remove_worker(self, stage: int, idx: int, replacement: EngineWorker) -> list[int]:
        """Worker ``idx`` of ``stage`` leaves its pool at once (a crash): its running pass and KV
        are lost (``replacement``, an empty worker, takes its slot), routing skips it, actions
        deferred behind its pass run now against the empty worker.  Returns the live requests
        that still depend on it (sources not yet released; any destination), in id order."""
        self._deliver_ended_passes(stage, idx)
        active = self._active[stage]
        if idx in active:
            active.remove(idx)
        if self._serving is not self._active:  # a planner keeps the two apart
            _toggle(self._serving[stage], idx, False)
        self._events.remove(EventKind.PASS_COMPLETION, (stage, idx))
        self._workers[stage][idx] = replacement
        self._dirty[stage][idx] = False
        self._wake_deferred(stage, idx)
        self.route_topology_changed(stage, idx, added=False)
        out: list[int] = []
        for rid in sorted(self._live):
            r = self._live[rid]
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
        span = self.settle_worker(_STAGES[stage], idx)
        if span is None or stage != _D:  # bulk runs are decode runs
            return
        w = self._workers[stage][idx]
        cut = w.split_run(span[0], False)
        if cut is None:
            return
        self._events.remove(EventKind.PASS_COMPLETION, (stage, idx))
        done = w.finish_pass()
        self.collector.on_tokens(done.emitted, cut[0], idx, done.run_times, done.delta)

    def add_worker(self, stage: int, idx: int) -> None:
        """Worker ``idx`` of ``stage`` (re)joins its pool; actions parked on an empty pool resume."""
        active = self._active[stage]
        if idx not in active:
            active.append(idx)
            active.sort()
        if self._serving is not self._active:  # a planner keeps the two apart
            _toggle(self._serving[stage], idx, True)
        self._dirty[stage][idx] = True
        self.route_topology_changed(stage, idx, added=True)
        parked = self._waiting[stage]
        if parked:
            self._pending.extend(parked)
            parked.clear()

    def on_acquire(self, request_id: int, hook: Callable[[], bool]) -> None:
        """Ask ``hook()`` before each SubmitPrefill / ReserveDestination of the request; True:
        the command fails (acknowledged FAILED, not executed) and the hook is dropped."""
        self._acquire_hooks[request_id] = hook

    def _acquire_fails(self, req: _Req, issued: IssuedAction, stage: int) -> bool:
        hook = self._acquire_hooks.get(req.rid)
        if hook is None or not hook():
            return False
        del self._acquire_hooks[req.rid]
        self._ack(req, issued, Outcome(_K_FAILED, f"injected failure of the {_ACQUIRE[stage][3]}"))
        return True

    def set_pool_gone(self, stage: int) -> None:
        """The pool of ``stage`` is empty and stays so: parked and future acquires fail."""
        self._pool_gone[stage] = True
        parked = self._waiting[stage]
        if parked:
            self._pending.extend(parked)
            parked.clear()

    def workers(self, stage: int) -> tuple[EngineWorker, ...]:
        return tuple(self._workers[stage])

    def routers(self) -> tuple[Router, Router]:
        p, d = self._routers
        return p, d

    def live_requests(self) -> list[int]:
        return sorted(self._live)

    def coordinator_of(self, request_id: int) -> HandoffCoordinator | None:
        req = self._live.get(request_id)
        return None if req is None else req.coord

    @property
    def routed_unreleased(self) -> int:
        """Router holds not yet released (requests still live); 0 at the end of a complete run."""
        return sum(bin(r.routed).count("1") for r in self._live.values())


def _toggle(members: list[int], idx: int, present: bool) -> None:
    """Add (kept sorted) or remove ``idx`` in a worker-index list."""
    if present:
        if idx not in members:
            members.append(idx)
            members.sort()
    elif idx in members:
        members.remove(idx)
