"""Execution of the handoff coordinator's actions against the engines.

What each action does to a worker, in the reference's terms (``ai-dynamo/dynamo``
``lib/mocker/src/replay/offline/disagg.rs``):

* SubmitPrefill / ReserveDestination are routed and applied at once; a command error becomes
  ``Outcome(FAILED, message)``.  They park while their pool has no routable worker, and fail
  once the pool is gone for good.
* ActivateDestination, ReleaseSource and both cancels are deferred while the target worker is
  mid-pass; that worker's pass completion wakes them (commands may only touch queued or
  post-pass state, because passes are computed eagerly at their start).
* StartTransfer is acknowledged Scheduled; a positive delay schedules a transfer completion, a
  zero delay completes the transfer at once.
* Complete retires the request (or, canceled, ends it).

Why apart: what an action does is one concern; when the runtime runs it is the loop's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from dmocker.engines.interface import CommandEffects, CommandResult, EngineCommandError, EngineWorker
from dmocker.handoff import (
    ActivateDestination,
    CancelDestination,
    CancelSource,
    Complete,
    Completion,
    IssuedAction,
    Outcome,
    OutcomeKind,
    ReleaseSource,
    ReserveDestination,
    StartTransfer,
    SubmitPrefill,
    TransferCompleted,
    load_spec,
    success_outcomes,
)

from ..collector import Collector, TerminalStatus
from ..errors import ReplayInvariantError
from ..events import EventKind, EventQueue
from ..request_state import Phase, RequestState
from ..routing import RouterError
from .clock import Clock
from .handoffs import Handoffs
from .lifecycle import Lifecycle
from .observer import ClusterObserver
from .passes import PassScheduler
from .pool import WorkerPool
from .routes import Routing

__all__ = ["ActionExecutor"]

_P: Final = 0
_D: Final = 1
# The success acknowledgement of each action, read from the spec (its first allowed outcome).
_OK: Final = success_outcomes(load_spec())
_K_SCHEDULED: Final = _OK[StartTransfer.__name__]
_K_ACTIVATED: Final = _OK[ActivateDestination.__name__]
_K_APPLIED: Final = OutcomeKind.APPLIED
_K_NOOP: Final = OutcomeKind.NOOP
_K_FAILED: Final = OutcomeKind.FAILED
_R_APPLIED: Final = CommandResult.APPLIED
_R_NOOP: Final = CommandResult.NOOP
_SUCCESS: Final = Completion.SUCCESS
_CANCELED: Final = Completion.CANCELED
_EV_TRANSFER: Final = EventKind.TRANSFER_COMPLETE
_TRANSFER_PENDING: Final = Phase.TRANSFER_PENDING
_READY_DECODE: Final = Phase.READY_DECODE
# Per stage: what routing a SubmitPrefill / ReserveDestination sets and expects (phase while
# routed, the engine's success result, the outcome acknowledged, what the command is called).
_ACQUIRE: Final[tuple[tuple[Phase, CommandResult, OutcomeKind, str], ...]] = (
    (Phase.QUEUED_PREFILL, CommandResult.SUBMITTED, _OK[SubmitPrefill.__name__], "prefill submission"),
    (Phase.AWAITING_DESTINATION, CommandResult.ACCEPTED, _OK[ReserveDestination.__name__], "destination reservation"),
)


class ActionExecutor:
    """Runs one issued action at a time (``execute``); routed requests are applied by ``dispatch``."""

    __slots__ = ("clock", "events", "pools", "passes", "handoffs", "routing", "lifecycle", "collector",
                 "observer", "transfer_delay", "accepted_sink")

    def __init__(
        self,
        clock: Clock,
        events: EventQueue[object],
        pools: tuple[WorkerPool, ...],
        passes: PassScheduler,
        handoffs: Handoffs,
        routing: Routing,
        lifecycle: Lifecycle,
        collector: Collector,
        *,
        observer: ClusterObserver | None,
    ) -> None:
        self.clock = clock
        self.events = events
        self.pools = pools
        self.passes = passes
        self.handoffs = handoffs
        self.routing = routing
        self.lifecycle = lifecycle
        self.collector = collector
        self.observer = observer
        #: (request id, the transfer's own delay) -> the delay it takes: a fault that stalls
        #: transfers, or a destination that recomputes instead of loading (None in a plain run)
        self.transfer_delay: Callable[[int, float], float] | None = None
        #: told (request id, time) when a destination-first destination is accepted and waits for
        #: room (the source's bootstrap timeout starts there; None in a plain run)
        self.accepted_sink: Callable[[int, float], None] | None = None

    def execute(self, req: RequestState, issued: IssuedAction) -> bool:
        """Execute ``issued`` (False: parked, held or deferred, to run later)."""
        a = issued.action
        if isinstance(a, SubmitPrefill):
            return self._acquire(req, issued, _P)
        if isinstance(a, ReserveDestination):
            return self._acquire(req, issued, _D)
        if isinstance(a, StartTransfer):
            return self._start_transfer(req, issued, a)
        if isinstance(a, ActivateDestination):
            return self._activate_destination(req, issued)
        if isinstance(a, ReleaseSource):
            if req.prefill_worker < 0:
                raise ReplayInvariantError(f"release of request {req.rid} with no prefill worker")
            return self._cleanup(req, issued, _P, req.prefill_worker, ReleaseSource)
        if isinstance(a, Complete):
            self._complete(req)
            return True
        if isinstance(a, CancelSource):
            if req.prefill_worker < 0:
                return self._cancel_unrouted(req, issued, _P)
            return self._cleanup(req, issued, _P, req.prefill_worker, CancelSource)
        if isinstance(a, CancelDestination):
            if req.decode_worker < 0:
                return self._cancel_unrouted(req, issued, _D)
            return self._cleanup(req, issued, _D, req.decode_worker, CancelDestination)
        raise ReplayInvariantError(f"unknown action {a!r}")  # pragma: no cover - closed set

    def _acquire(self, req: RequestState, issued: IssuedAction, stage: int) -> bool:
        """Route SubmitPrefill (prefill pool) or ReserveDestination (decode pool) and apply it."""
        if req.acquire_hook is not None and self._acquire_fails(req, issued, stage):
            return True
        pool = self.pools[stage]
        if not pool.active:
            if pool.gone:  # crashed for good: the request cannot be served
                self.handoffs.ack(req, issued, Outcome(_K_FAILED, f"no {pool.name} worker left"))
                return True
            pool.park((req, issued))
            return False
        req.phase = _ACQUIRE[stage][0]
        idx = pool.router.route(req.engine_request, self.clock.now_ms)
        req.routed |= stage + 1
        if idx is None:  # held in the router's queue until a notification releases it
            pool.hold((req, issued))
            return False
        return self.dispatch(req, issued, stage, idx)

    def _acquire_fails(self, req: RequestState, issued: IssuedAction, stage: int) -> bool:
        """An injected failure of this acquiring command (the hook says so): acknowledge FAILED."""
        hook = req.acquire_hook
        if hook is None or not hook():
            return False
        req.acquire_hook = None
        self.handoffs.ack(req, issued, Outcome(_K_FAILED, f"injected failure of the {_ACQUIRE[stage][3]}"))
        return True

    def dispatch(self, req: RequestState, issued: IssuedAction, stage: int, idx: int) -> bool:
        """Apply a routed SubmitPrefill / ReserveDestination on worker ``idx`` and acknowledge it."""
        pool = self.pools[stage]
        if type(idx) is not int or idx not in pool.active:
            raise RouterError(
                f"router of the {pool.name} pool returned worker {idx!r} for request "
                f"{req.rid}, not one of the pool's workers {pool.active}"
            )
        _, expected, ok, what = _ACQUIRE[stage]
        self.passes.settle(stage, idx)
        worker = pool.workers[idx]
        if not worker.busy:  # a busy worker is asked to start a pass when this one completes
            pool.dirty[idx] = True
        try:
            if stage == _P:
                effects = worker.submit_handoff_prefill(req.rid, req.engine_request)
            else:
                effects = worker.reserve_destination(req.rid, req.engine_request)
        except EngineCommandError as exc:
            self.handoffs.ack(req, issued, Outcome(_K_FAILED, str(exc)))
            return True
        if effects.result is not expected:
            raise ReplayInvariantError(f"{what} of request {req.rid} returned {effects.result.value}")
        routing = self.routing
        if stage == _P:
            req.prefill_worker = idx
            if routing.kv_feed and effects.kv_events:
                pool.router.on_kv_events(idx, effects.kv_events, self.clock.now_ms)
        else:
            req.decode_worker = idx
            if self.accepted_sink is not None:
                self.accepted_sink(req.rid, self.clock.now_ms)
        routing.note_routed(stage, req.rid)
        if self.observer is not None:
            self.observer.on_routed(stage, req.rid, idx, req.turn.input_length)
        self.handoffs.ack_ok(req, issued, ok)
        if effects.lifecycle:
            self.handoffs.lifecycle(effects.lifecycle)
        return True

    def _start_transfer(self, req: RequestState, issued: IssuedAction, action: StartTransfer) -> bool:
        self.handoffs.ack_ok(req, issued, _K_SCHEDULED)
        req.phase = _TRANSFER_PENDING
        now = self.clock.now_ms
        delay = action.delay_ms
        if self.transfer_delay is not None:
            delay = self.transfer_delay(req.rid, delay)
        if delay > 0.0:
            self.events.push(now + delay, _EV_TRANSFER, (req.transfer_gen, req.rid), now)
        else:
            req.transfer_done_ms = now
            self.handoffs.fact(req, TransferCompleted(req.rid))
        return True

    def restart_transfer(self, req: RequestState, delay_ms: float) -> None:
        """The transfer in flight is superseded: its completion now comes ``delay_ms`` from now
        (a destination that recomputes the prompt instead of reading a freed source)."""
        req.transfer_gen += 1
        now = self.clock.now_ms
        self.events.push(now + delay_ms, _EV_TRANSFER, (req.transfer_gen, req.rid), now)

    def free_source(self, req: RequestState) -> bool:
        """The source worker frees a held source by itself (its own clock, no command): False
        while the worker is mid-pass (try again when the pass ends).  The coordinator's
        ReleaseSource later finds nothing to free (Noop)."""
        idx = req.prefill_worker
        w = self._settled_worker(_P, idx)
        if w is None:
            return False
        self._effects_of(_P, idx, w.release_source(req.rid))
        return True

    def _settled_worker(self, stage: int, idx: int) -> EngineWorker | None:
        """Worker ``idx`` of ``stage``, settled and marked dirty; None while it is mid-pass."""
        self.passes.settle(stage, idx)
        pool = self.pools[stage]
        w = pool.workers[idx]
        if w.busy:
            return None
        pool.dirty[idx] = True
        return w

    def _ready_worker(self, req: RequestState, issued: IssuedAction, stage: int, idx: int) -> EngineWorker | None:
        """:meth:`_settled_worker`, the action deferred behind the pass when it is mid-pass."""
        w = self._settled_worker(stage, idx)
        if w is None:
            self.pools[stage].defer((req, issued), idx)
        return w

    def _effects_of(self, stage: int, idx: int, effects: CommandEffects) -> None:
        """What a freeing command on worker ``idx`` of ``stage`` changed: the prefill router's
        KV events, the lifecycle facts."""
        if self.routing.kv_feed and stage == _P and effects.kv_events:
            self.pools[_P].router.on_kv_events(idx, effects.kv_events, self.clock.now_ms)
        if effects.lifecycle:
            self.handoffs.lifecycle(effects.lifecycle)

    def _activate_destination(self, req: RequestState, issued: IssuedAction) -> bool:
        idx = req.decode_worker
        if idx < 0:
            raise ReplayInvariantError(f"activation of request {req.rid} with no decode worker")
        w = self._ready_worker(req, issued, _D, idx)
        if w is None:
            return False
        handoffs = self.handoffs
        try:
            effects = w.activate_destination(req.rid)
        except EngineCommandError as exc:
            handoffs.ack(req, issued, Outcome(_K_FAILED, str(exc)))
            return True
        if effects.result is not _R_APPLIED:
            handoffs.ack(req, issued, Outcome(_K_FAILED, "destination activation was not applied"))
            return True
        req.phase = _READY_DECODE
        req.destination_activated_ms = self.clock.now_ms
        handoffs.ack_ok(req, issued, _K_ACTIVATED)
        if effects.lifecycle:
            handoffs.lifecycle(effects.lifecycle)
        return True

    def _cancel_unrouted(self, req: RequestState, issued: IssuedAction, stage: int) -> bool:
        """A cancel for a side that never reached a worker: drop any router hold, Noop."""
        self.routing.unhold(stage, req)
        self.handoffs.ack_ok(req, issued, _K_NOOP)
        return True

    def _cleanup(
        self,
        req: RequestState,
        issued: IssuedAction,
        stage: int,
        idx: int,
        cls: type[ReleaseSource] | type[CancelSource] | type[CancelDestination],
    ) -> bool:
        """ReleaseSource, CancelSource or CancelDestination on worker ``idx`` of ``stage``:
        acknowledged with the engine's Applied / Noop; False when deferred behind a pass."""
        w = self._ready_worker(req, issued, stage, idx)
        if w is None:
            return False
        if cls is ReleaseSource:
            effects = w.release_source(req.rid)
            req.source_released_ms = self.clock.now_ms
        elif cls is CancelSource:
            effects = w.cancel_source(req.rid)
        else:
            effects = w.cancel_destination(req.rid)
        result = effects.result
        handoffs = self.handoffs
        if result is _R_APPLIED:
            handoffs.ack_ok(req, issued, _K_APPLIED)
        elif result is _R_NOOP:
            handoffs.ack_ok(req, issued, _K_NOOP)
        else:
            raise ReplayInvariantError(f"{cls.__name__} for request {req.rid} returned {result.value}")
        self._effects_of(stage, idx, effects)
        return True

    def _complete(self, req: RequestState) -> None:
        completion = req.coord.completion
        routing = self.routing
        lifecycle = self.lifecycle
        if completion is _SUCCESS:
            routing.free_route(_P, req.rid)
            req.routed &= 2
            lifecycle.retire(req)
        elif completion is _CANCELED:
            if routing.signals:  # cancellation frees (or unqueues) both routes
                routing.free_route(_P, req.rid)
                routing.free_route(_D, req.rid)
            if self.collector.on_terminal(req.rid, TerminalStatus.CANCELED, self.clock.now_ms):
                req.terminal_ms = self.clock.now_ms
            if req.counted:
                lifecycle.finish_logical(req, remove_actions=True)
            else:
                lifecycle.remove_actions(req)
                lifecycle.retire(req)
        else:
            raise ReplayInvariantError(f"request {req.rid}: Complete without a completion")
