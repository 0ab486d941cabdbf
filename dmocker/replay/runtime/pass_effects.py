"""What a completed pass means for the requests in it: tokens, terminals, lifecycle facts.

Why apart from the pass scheduler: the scheduler decides when passes start and end; this object
turns an ended pass into the collector's tokens, the requests' terminal statuses, the router's
signals and the coordinators' facts, in the reference's order.
"""

from __future__ import annotations

from typing import Final

from dmocker.engines.interface import PassCompletion
from dmocker.handoff import Failed

from ..collector import Collector, TerminalStatus
from ..request_state import Stage
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


class PassEffects:
    """Applies completed passes (the pass scheduler's :class:`~.passes.PassListener`)."""

    __slots__ = ("clock", "collector", "handoffs", "routing", "lifecycle", "observer", "source_output_tokens")

    def __init__(self, clock: Clock, collector: Collector, handoffs: Handoffs, routing: Routing, lifecycle: Lifecycle,
                 *, observer: ClusterObserver | None) -> None:
        self.clock = clock
        self.collector = collector
        self.handoffs = handoffs
        self.routing = routing
        self.lifecycle = lifecycle
        self.observer = observer
        self.source_output_tokens = 0  # tokens the prefill pool emitted (its first tokens)

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
            return
        # Decode: tokens, then terminals, then lifecycle facts (the reference's order).
        self.collector.on_tokens(done.emitted, self.clock.now_ms, idx, done.run_times, done.delta)
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
