"""The coordinator boundary: each request's handoff coordinator is started at arrival, fed facts
(engine lifecycle events, transfers, terminals) and action outcomes, and what it issues is
queued; every step may be written to the native event log.

Why apart: deciding *what* happens to a request is the coordinator's job (dmocker.handoff);
this object only carries inputs to it and its actions out, and knows nothing of engines,
routing or time beyond reading the clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, cast

from dmocker.engines.hashing import block_hashes_from_trace, block_hashes_from_trace_batch
from dmocker.engines.interface import EngineRequest, LifecycleEvent
from dmocker.handoff import (
    DestinationReserved,
    EventLogWriter,
    Fact,
    HandoffCoordinator,
    HandoffError,
    HandoffOrder,
    IssuedAction,
    Outcome,
    OutcomeKind,
    ProtocolSpec,
    SourceHeld,
)

from ..collector import Collector, TerminalStatus
from ..errors import ReplayInvariantError
from ..request_state import Phase, RequestState
from ..workload import ReadyTurn, Turn
from .clock import Clock
from .observer import ClusterObserver
from .requests import ActionQueue, RequestTable

__all__ = ["Handoffs", "CoordinatorFactory"]

#: Builds a request's coordinator: ``factory(request_id, order, fallback_transfer_delay_ms=...,
#: spec=...)``.  The default is HandoffCoordinator itself; faults and user coordinators plug in here.
CoordinatorFactory = Callable[..., HandoffCoordinator]

_AWAITING_DESTINATION: Final = Phase.AWAITING_DESTINATION
_DEST_FIRST: Final = HandoffOrder.DESTINATION_FIRST
_FAILED: Final = OutcomeKind.FAILED


class Handoffs:
    """Starts, feeds and logs the coordinators of the requests in ``table``."""

    __slots__ = ("clock", "table", "queue", "collector", "order", "spec", "make_coord", "fallback_ms",
                 "event_log", "observer", "acquire_hooks", "trace_block", "block_size", "hash_cache",
                 "reserved_sink")

    def __init__(
        self,
        clock: Clock,
        table: RequestTable,
        queue: ActionQueue,
        collector: Collector,
        *,
        order: HandoffOrder,
        spec: ProtocolSpec,
        make_coord: CoordinatorFactory,
        fallback_ms: float,
        event_log: EventLogWriter | None,
        observer: ClusterObserver | None,
        trace_block: int,
        block_size: int,
    ) -> None:
        self.clock = clock
        self.table = table
        self.queue = queue
        self.collector = collector
        self.order = order
        self.spec = spec
        self.make_coord = make_coord
        self.fallback_ms = fallback_ms
        self.event_log = event_log
        self.observer = observer
        #: told (request id, time) when a request's destination is first reserved (a worker's
        #: own clock arms its wait timeout there; None in a plain run)
        self.reserved_sink: Callable[[int, float], None] | None = None
        # request -> "fail this acquire?" (fault injection), moved onto the request at arrival
        self.acquire_hooks: dict[int, Callable[[], bool]] = {}
        self.trace_block = trace_block
        self.block_size = block_size
        # block hashes of upcoming first turns, computed in batches ahead of their arrival
        self.hash_cache: dict[int, tuple[int, ...]] = {}

    def prefetch_hashes(self, turns: list[Turn]) -> None:
        """Hash upcoming first turns in one vectorised batch (same values as one by one)."""
        hashes = block_hashes_from_trace_batch(
            [t.hash_ids for t in turns], [t.input_length for t in turns], self.trace_block, self.block_size
        )
        cache = self.hash_cache
        for t, h in zip(turns, hashes):
            cache[t.request_id] = h

    def arrive(self, item: ReadyTurn) -> None:
        """A turn arrives: its request state, its coordinator, and what the coordinator starts with."""
        turn = item.turn
        rid = turn.request_id
        live = self.table.live
        if rid in live:
            raise ReplayInvariantError(f"request {rid} is already active")
        hashes = self.hash_cache.pop(rid, None)
        if hashes is None:
            hashes = block_hashes_from_trace(turn.hash_ids, turn.input_length, self.trace_block, self.block_size)
        request = EngineRequest(rid, turn.input_length, turn.output_length, hashes)
        make = self.make_coord
        if make is HandoffCoordinator:  # the default, constructed directly
            coord = HandoffCoordinator(rid, self.order, fallback_transfer_delay_ms=self.fallback_ms, spec=self.spec)
        else:
            coord = make(rid, self.order, fallback_transfer_delay_ms=self.fallback_ms, spec=self.spec)
        req = RequestState(turn, item.arrival_ms, coord, request)
        if self.order is _DEST_FIRST:
            req.phase = _AWAITING_DESTINATION
        if self.acquire_hooks:
            req.acquire_hook = self.acquire_hooks.pop(rid, None)
        self.collector.on_arrival(rid, item.arrival_ms, turn.input_length)
        live[rid] = req
        self.table.in_flight += 1
        logging = self.event_log is not None
        prev = coord.state if logging else -1
        try:
            actions = coord.start()
        except HandoffError as exc:  # pragma: no cover - start never rejects
            raise ReplayInvariantError(f"request {rid}: coordinator start failed: {exc}") from exc
        if logging:
            self._log(req, prev, "start", None)
        if actions:
            self.queue.add(req, actions)

    def lifecycle(self, events: tuple[LifecycleEvent, ...]) -> None:
        """Engine lifecycle events (SourceHeld, DestinationReserved): timestamps, then the fact."""
        live = self.table.live
        now = self.clock.now_ms
        for ev in events:
            # the replay's handoff ids are its request ids
            req = live.get(cast(int, ev.handoff_id))
            if req is None:
                raise ReplayInvariantError(f"lifecycle event for unknown handoff {ev.handoff_id!r}")
            if isinstance(ev, SourceHeld):
                if req.source_held_ms is None:
                    req.source_held_ms = now
                req.held_tokens = ev.transfer_timing.full_prompt_tokens
            elif isinstance(ev, DestinationReserved):
                if req.destination_reserved_ms is None:
                    req.destination_reserved_ms = now
                    if self.observer is not None:
                        self.observer.on_decode_reserved(req.rid)
                    if self.reserved_sink is not None:
                        self.reserved_sink(req.rid, now)
            self.fact(req, ev)

    def fact(self, req: RequestState, fact: Fact) -> None:
        coord = req.coord
        logging = self.event_log is not None
        prev = coord.state if logging else -1  # the log needs the state the fact arrived in
        try:
            actions = coord.on_fact(fact)
        except HandoffError as exc:
            raise ReplayInvariantError(f"request {req.rid}: coordinator rejected {type(fact).__name__}: {exc}") from exc
        if logging:
            self._log(req, prev, type(fact).__name__, fact)
        if actions:
            self.queue.add(req, actions)

    def ack(self, req: RequestState, issued: IssuedAction, outcome: Outcome) -> None:
        """Report any outcome (a FAILED one also records the request's terminal status)."""
        if outcome.kind is _FAILED:
            if self.collector.on_terminal(req.rid, TerminalStatus.FAILED, self.clock.now_ms):
                req.terminal_ms = self.clock.now_ms
        self.ack_ok(req, issued, outcome.kind, outcome)

    def ack_ok(self, req: RequestState, issued: IssuedAction, kind: OutcomeKind, outcome: Outcome | None = None) -> None:
        """Hand an action's outcome to the coordinator and queue what it issues.

        Without ``outcome`` (a message-less kind other than FAILED, most acknowledgements) the
        coordinator's ``on_outcome_kind`` answers exactly as ``on_action_outcome`` would,
        without building an Outcome.
        """
        coord = req.coord
        logging = self.event_log is not None
        prev = coord.state if logging else -1
        try:
            if outcome is None:
                actions = coord.on_outcome_kind(issued.id, kind)
            else:
                actions = coord.on_action_outcome(issued.id, outcome)
        except HandoffError as exc:
            raise ReplayInvariantError(
                f"request {req.rid}: coordinator rejected outcome {kind.value} for "
                f"{type(issued.action).__name__}: {exc}"
            ) from exc
        if logging:
            self._log(req, prev, f"{type(issued.action).__name__}.{kind.value}", None)
        if actions:
            self.queue.add(req, actions)

    def _log(self, req: RequestState, prev: int, event: str, fact: Fact | None) -> None:
        writer = self.event_log
        if writer is not None:
            writer.log(self.clock.now_ms, req.coord, prev, event, fact, req.prefill_worker, req.decode_worker)
