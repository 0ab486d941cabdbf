"""Execution of the handoff coordinator's actions against the engines (a layer of the runtime).

Why apart from the drain loop: what each action does to a worker (route and apply, defer while
the worker is mid-pass, park while its pool is empty, acknowledge with the spec's outcome) is
one concern; when the runtime does it (the per-timestamp phases) is another.
:class:`~dmocker.replay.runtime.DisaggRuntime` inherits these methods; the attributes and the
coordinator I/O they use are declared in :mod:`~dmocker.replay.runtime_base`.
"""

from __future__ import annotations

from collections import deque
from typing import Final

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
)
from dmocker.handoff import load_spec, success_outcomes
from dmocker.engines.interface import CommandResult, EngineCommandError

from .collector import TerminalStatus
from .events import EventKind, ReplayInvariantError
from .request_state import Phase, Queued, RequestState, Stage
from .routing import RouterError
from .runtime_base import RuntimeBase

__all__ = ["ActionExecution"]

_Req = RequestState
_Queued = Queued

_P: Final = 0  # index of the prefill pool in per-stage tuples
_D: Final = 1  # index of the decode pool
_STAGES: Final[tuple[Stage, ...]] = (Stage.PREFILL, Stage.DECODE)  # (``...``: see RuntimeBase)
_TRANSFER_PENDING: Final = Phase.TRANSFER_PENDING
_READY_DECODE: Final = Phase.READY_DECODE
_PREFILL: Final = Stage.PREFILL
_DECODE: Final = Stage.DECODE
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
# Per stage (_P, _D): what routing a SubmitPrefill / ReserveDestination sets and expects
# (phase while routed, the engine's success result, the outcome acknowledged, error wording).
_ACQUIRE: Final[tuple[tuple[Phase, CommandResult, OutcomeKind, str], ...]] = (
    (Phase.QUEUED_PREFILL, CommandResult.SUBMITTED, _OK[SubmitPrefill.__name__], "prefill submission"),
    (Phase.AWAITING_DESTINATION, CommandResult.ACCEPTED, _OK[ReserveDestination.__name__], "destination reservation"),
)


class ActionExecution(RuntimeBase):
    """The action executors of :class:`~dmocker.replay.runtime.DisaggRuntime` (a layer)."""

    def _wake_deferred(self, stage: int, idx: int) -> None:
        queued = self._deferred[stage].pop(idx, None)
        if queued:
            self._pending.extend(queued)

    def _defer(self, req: _Req, issued: IssuedAction, stage: Stage, idx: int) -> bool:
        by_worker = self._deferred[stage]
        queue = by_worker.get(idx)
        if queue is None:  # (not setdefault: that builds a list on every call)
            queue = by_worker[idx] = []
        queue.append((req, issued))
        req.queued += 1
        return False

    def _park(self, req: _Req, issued: IssuedAction, stage: Stage) -> bool:
        self._waiting[stage].append((req, issued))
        req.queued += 1
        return False

    def _remove_actions(self, req: _Req) -> None:
        """Drop every queued, parked or deferred action of a request that is being torn down."""
        if not req.queued:
            return

        def keep(q: deque[_Queued] | list[_Queued]) -> None:
            kept = [item for item in q if item[0] is not req]
            q.clear()
            q.extend(kept)

        pending = self._pending
        if self._pending_head:  # inside _drive_actions: drop what it has taken already
            del pending[:self._pending_head]
            self._pending_head = 0
        keep(pending)
        for stage in (0, 1):
            self._held[stage].pop(req.rid, None)
            keep(self._waiting[stage])
            d = self._deferred[stage]
            for key in sorted(d):
                keep(d[key])
                if not d[key]:
                    del d[key]
        req.queued = 0

    def _execute(self, req: _Req, issued: IssuedAction) -> bool:
        """Execute ``issued`` (False: parked or deferred).  A chain of type checks over the
        closed set of action classes: they are final compiled classes, so each check is one
        pointer comparison and each branch a native call (a table of unbound methods costs
        a Python-level call per action)."""
        a = issued.action
        if isinstance(a, SubmitPrefill):
            return self._submit_prefill(req, issued)
        if isinstance(a, ReserveDestination):
            return self._reserve_destination(req, issued)
        if isinstance(a, StartTransfer):
            return self._start_transfer(req, issued)
        if isinstance(a, ActivateDestination):
            return self._activate_destination(req, issued)
        if isinstance(a, ReleaseSource):
            return self._release_source(req, issued)
        if isinstance(a, Complete):
            return self._complete_action(req, issued)
        if isinstance(a, CancelSource):
            return self._cancel_source(req, issued)
        if isinstance(a, CancelDestination):
            return self._cancel_destination(req, issued)
        raise ReplayInvariantError(f"unknown action {a!r}")  # pragma: no cover - closed set

    def _submit_prefill(self, req: _Req, issued: IssuedAction) -> bool:
        return self._acquire(req, issued, _P)

    def _reserve_destination(self, req: _Req, issued: IssuedAction) -> bool:
        return self._acquire(req, issued, _D)

    def _acquire(self, req: _Req, issued: IssuedAction, stage: int) -> bool:
        """Route SubmitPrefill (prefill pool) or ReserveDestination (decode pool) and apply it.

        The two commands differ only in the engine call, the phase, the expected result and the
        worker field they set; everything else (park while the pool is empty, round robin, mark
        the worker dirty, FAILED on a command error, acknowledge, forward lifecycle) is shared.
        """
        if self._acquire_hooks and self._acquire_fails(req, issued, stage):
            return True
        active = self._active[stage]
        if not active:
            if self._pool_gone[stage]:  # crashed for good: the request cannot be served
                self._ack(req, issued, Outcome(_K_FAILED, f"no {_STAGES[stage].name.lower()} worker left"))
                return True
            return self._park(req, issued, _STAGES[stage])
        req.phase = _ACQUIRE[stage][0]
        idx = self._routers[stage].route(req.engine_request, self.now_ms)
        req.routed |= stage + 1
        if idx is None:  # held in the router's queue until a notification releases it
            self._held[stage][req.rid] = (req, issued)
            req.queued += 1
            return False
        return self._dispatch(req, issued, stage, idx)

    def _dispatch(self, req: _Req, issued: IssuedAction, stage: int, idx: int) -> bool:
        """Apply a routed SubmitPrefill / ReserveDestination on worker ``idx`` and acknowledge it."""
        if type(idx) is not int or idx not in self._active[stage]:
            raise RouterError(
                f"router of the {_STAGES[stage].name.lower()} pool returned worker {idx!r} for request "
                f"{req.rid}, not one of the pool's workers {self._active[stage]}"
            )
        _, expected, ok, what = _ACQUIRE[stage]
        self._settle(stage, idx)
        worker = self._workers[stage][idx]
        if not worker.busy:  # a busy worker is asked to start a pass when this one completes
            self._dirty[stage][idx] = True
        try:
            if stage == _P:
                effects = worker.submit_handoff_prefill(req.rid, req.engine_request)
            else:
                effects = worker.reserve_destination(req.rid, req.engine_request)
        except EngineCommandError as exc:
            self._ack(req, issued, Outcome(_K_FAILED, str(exc)))
            return True
        if effects.result is not expected:
            raise ReplayInvariantError(f"{what} of request {req.rid} returned {effects.result.value}")
        if stage == _P:
            req.prefill_worker = idx
            if self._kv_feed and effects.kv_events:
                self._routers[_P].on_kv_events(idx, effects.kv_events, self.now_ms)
        else:
            req.decode_worker = idx
        if self._route_overlap is not None:
            seen = self._routers[stage].overlap_tokens(req.rid)  # read once: the router forgets it
            if self._records is not None:  # only the per-request records report it
                self._route_overlap[stage][req.rid] = seen
        if self._planner is not None:
            self._planner.on_routed(stage, req.rid, idx, req.turn.input_length)
        self._ack_ok(req, issued, ok)
        if effects.lifecycle:
            self._lifecycle(effects.lifecycle)
        return True

    def _start_transfer(self, req: _Req, issued: IssuedAction) -> bool:
        action = issued.action
        assert isinstance(action, StartTransfer)
        self._ack_ok(req, issued, _K_SCHEDULED)
        req.phase = _TRANSFER_PENDING
        if action.delay_ms > 0.0:
            self._events.push(self.now_ms + action.delay_ms, _EV_TRANSFER, (0, req.rid), self.now_ms)
        else:
            self._fact(req, TransferCompleted(req.rid))
        return True

    def _activate_destination(self, req: _Req, issued: IssuedAction) -> bool:
        idx = req.decode_worker
        if idx < 0:
            raise ReplayInvariantError(f"activation of request {req.rid} with no decode worker")
        self._settle(_D, idx)
        w = self._workers[_D][idx]
        if w.busy:
            return self._defer(req, issued, _DECODE, idx)
        try:
            self._dirty[_D][idx] = True
            effects = w.activate_destination(req.rid)
        except EngineCommandError as exc:
            self._ack(req, issued, Outcome(_K_FAILED, str(exc)))
            return True
        if effects.result is not _R_APPLIED:
            self._ack(req, issued, Outcome(_K_FAILED, "destination activation was not applied"))
            return True
        req.phase = _READY_DECODE
        req.destination_activated_ms = self.now_ms
        self._ack_ok(req, issued, _K_ACTIVATED)
        if effects.lifecycle:
            self._lifecycle(effects.lifecycle)
        return True

    def _release_source(self, req: _Req, issued: IssuedAction) -> bool:
        if req.prefill_worker < 0:
            raise ReplayInvariantError(f"release of request {req.rid} with no prefill worker")
        return self._cleanup(req, issued, _PREFILL, req.prefill_worker, ReleaseSource)

    def _cancel_source(self, req: _Req, issued: IssuedAction) -> bool:
        if req.prefill_worker < 0:
            self._unhold(_P, req)
            self._ack_ok(req, issued, _K_NOOP)
            return True
        return self._cleanup(req, issued, _PREFILL, req.prefill_worker, CancelSource)

    def _cancel_destination(self, req: _Req, issued: IssuedAction) -> bool:
        if req.decode_worker < 0:
            self._unhold(_D, req)
            self._ack_ok(req, issued, _K_NOOP)
            return True
        return self._cleanup(req, issued, _DECODE, req.decode_worker, CancelDestination)

    def _complete_action(self, req: _Req, issued: IssuedAction) -> bool:
        self._complete(req)
        return True

    def _cleanup(
        self,
        req: _Req,
        issued: IssuedAction,
        stage: Stage,
        idx: int,
        cls: type[ReleaseSource] | type[CancelSource] | type[CancelDestination],
    ) -> bool:
        """Run one source/destination cleanup command on worker ``idx`` of ``stage``.

        ReleaseSource, CancelSource and CancelDestination share the same shape (defer while the
        worker is mid-pass, mark it dirty, run the command, acknowledge with the cleanup outcome,
        forward lifecycle effects); only the engine command differs, so it is chosen here.
        False when the action was deferred behind a busy worker.
        """
        self._settle(stage, idx)
        w = self._workers[stage][idx]
        if w.busy:
            return self._defer(req, issued, stage, idx)
        self._dirty[stage][idx] = True
        if cls is ReleaseSource:
            effects = w.release_source(req.rid)
            req.source_released_ms = self.now_ms
        elif cls is CancelSource:
            effects = w.cancel_source(req.rid)
        else:
            effects = w.cancel_destination(req.rid)
        # APPLIED or NOOP acknowledge as such; anything else is an engine bug.  Compared by
        # identity, not looked up in a dict: hashing an enum member is a Python-level call.
        result = effects.result
        if result is _R_APPLIED:
            self._ack_ok(req, issued, _K_APPLIED)
        elif result is _R_NOOP:
            self._ack_ok(req, issued, _K_NOOP)
        else:
            raise ReplayInvariantError(f"{cls.__name__} for request {req.rid} returned {result.value}")
        if self._kv_feed and stage == _P and effects.kv_events:
            self._routers[_P].on_kv_events(idx, effects.kv_events, self.now_ms)
        if effects.lifecycle:
            self._lifecycle(effects.lifecycle)
        return True

    def _complete(self, req: _Req) -> None:
        completion = req.coord.completion
        if completion is _SUCCESS:
            self._free_route(_P, req.rid)
            req.routed &= 2
            self._retire(req)
        elif completion is _CANCELED:
            if self._route_signals:  # cancellation frees (or unqueues) both routes
                self._free_route(_P, req.rid)
                self._free_route(_D, req.rid)
            if self.collector.on_terminal(req.rid, TerminalStatus.CANCELED, self.now_ms):
                req.terminal_ms = self.now_ms
            if req.counted:
                self._finish_logical(req, remove_actions=True)
            else:
                self._remove_actions(req)
                self._retire(req)
        else:
            raise ReplayInvariantError(f"request {req.rid}: Complete without a completion")


