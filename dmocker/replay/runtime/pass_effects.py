"""What a completed pass means for the requests in it: tokens, terminals, lifecycle facts.

Why apart from the pass scheduler: the scheduler decides when passes start and end; this object
turns an ended pass into the collector's tokens, the requests' terminal statuses, the router's
signals and the coordinators' facts, in the reference's order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from dmocker.engines.interface import IdArray, LifecycleEvent, PassCompletion, PassPlan
from dmocker.handoff import Failed

from ..collector import Collector, TerminalStatus
from ..errors import ReplayInvariantError
from ..request_state import Phase, Stage
from .clock import Clock
from .handoffs import Handoffs
from .lifecycle import Lifecycle
from .observer import ClusterObserver
from .routes import Routing

__all__ = ["PassEffects"]

_D: Final = 1
_PREFILL: Final = Stage.PREFILL
_COMPLETED: Final = TerminalStatus.COMPLETED
_REJECTED: Final = TerminalStatus.REJECTED
_QUEUED_PREFILL: Final = Phase.QUEUED_PREFILL
_RUNNING_PREFILL: Final = Phase.RUNNING_PREFILL
_READY_DECODE: Final = Phase.READY_DECODE
_RUNNING_DECODE: Final = Phase.RUNNING_DECODE


class PassEffects:
    """Applies started and completed passes (the pass scheduler's :class:`~.passes.PassListener`)."""

    __slots__ = ("clock", "collector", "handoffs", "routing", "lifecycle", "observer", "source_output_tokens",
                 "token_sink", "held_sink")

    def __init__(self, clock: Clock, collector: Collector, handoffs: Handoffs, routing: Routing, lifecycle: Lifecycle,
                 *, observer: ClusterObserver | None) -> None:
        self.clock = clock
        self.collector = collector
        self.handoffs = handoffs
        self.routing = routing
        self.lifecycle = lifecycle
        self.observer = observer
        self.source_output_tokens = 0  # tokens the prefill pool emitted (its first tokens)
        # A live edge streams each decode pass's tokens as it ends (passes one by one: no bulk runs).
        self.token_sink: Callable[[IdArray, float], None] | None = None
        # ... and answers a prefill request once its source is held (vLLM's prefill response)
        self.held_sink: Callable[[tuple[LifecycleEvent, ...], float], None] | None = None

    def pass_started(self, stage: Stage, plan: PassPlan, idx: int) -> None:
        """Admissions of a starting pass (the requests' admission times and phases), then the
        blocks it stored, for the prefill router (vLLM's become visible at pass start)."""
        now = self.clock.now_ms
        live = self.lifecycle.table.live
        collector = self.collector
        for adm in plan.admissions:
            req = live.get(adm.request_id)
            if req is None:
                raise ReplayInvariantError(f"admission of unknown request {adm.request_id}")
            collector.on_admit(req.rid, adm.reused_input_tokens)
            if req.first_admit_ms is None:
                req.first_admit_ms = now
            if stage is _PREFILL:
                if req.prefill_admit_ms is None:
                    req.prefill_admit_ms = now
                    req.prefill_reused = adm.reused_input_tokens
                    if self.observer is not None:
                        self.observer.on_prefill_admit(req.rid, adm.reused_input_tokens, req.turn.input_length)
                if req.phase is _QUEUED_PREFILL:
                    req.phase = _RUNNING_PREFILL
            else:
                collector.on_decode_admit(req.rid, idx)
                if req.decode_admit_ms is None:
                    req.decode_admit_ms = now
                    req.decode_reused = adm.reused_input_tokens
                if req.phase is _READY_DECODE:
                    req.phase = _RUNNING_DECODE
                elif req.phase is not _RUNNING_DECODE:
                    raise ReplayInvariantError(
                        f"decode admission of request {req.rid} in phase {req.phase.value}"
                    )
        if plan.pass_start_kv_events and stage is _PREFILL and self.routing.kv_feed:
            self.routing.pools[0].router.on_kv_events(idx, plan.pass_start_kv_events, now)

    def pass_done(self, stage: Stage, done: PassCompletion, idx: int) -> None:
        lifecycle = self.lifecycle
        handoffs = self.handoffs
        if stage is _PREFILL:
            self.source_output_tokens += len(done.emitted)
            if self.routing.signals:
                self.routing.prefill_pass_done(done, idx)
            for rid in done.rejected:
                req = lifecycle.terminal(rid, _REJECTED)
                if req is not None:
                    handoffs.fact(req, Failed(rid))
            if done.lifecycle:
                handoffs.lifecycle(done.lifecycle)
                if self.held_sink is not None:
                    self.held_sink(done.lifecycle, self.clock.now_ms)
            return
        # Decode: tokens, then terminals, then lifecycle facts (the reference's order).
        self.collector.on_tokens(done.emitted, self.clock.now_ms, idx, done.run_times, done.delta)
        if self.token_sink is not None:
            self.token_sink(done.emitted, self.clock.now_ms)
        if not done.finished and not done.rejected:
            if done.lifecycle:
                handoffs.lifecycle(done.lifecycle)
            return
        routing = self.routing
        for rid in done.finished:
            req = lifecycle.terminal(rid, _COMPLETED)
            if req is None:
                continue
            if self.observer is not None:
                self.observer.on_completed(rid, req.arrival_ms, req.turn.input_length, req.turn.output_length)
            routing.free_route(_D, rid)
            req.routed &= 1
            lifecycle.finish_logical(req, remove_actions=False)
        for rid in done.rejected:
            req = lifecycle.terminal(rid, _REJECTED)
            if req is None:
                continue
            routing.free_route(_D, rid)
            lifecycle.finish_logical(req, remove_actions=False)
        if done.lifecycle:
            handoffs.lifecycle(done.lifecycle)
