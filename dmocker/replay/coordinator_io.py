"""A request at the coordinator boundary, and the outputs that follow (a layer of the runtime).

Why apart from the drain loop: each request's handoff coordinator is started at arrival, fed
facts (engine lifecycle events, transfers, terminals) and action outcomes, and queues what it
issues; every such step may be logged to the native event log, and a retired request writes
its per-request record.  That boundary is one concern; when the runtime reaches it is another.
"""

from __future__ import annotations

from typing import Final, cast

from dmocker.handoff import (
    DestinationReserved,
    Fact,
    HandoffCoordinator,
    HandoffError,
    HandoffOrder,
    IssuedAction,
    Outcome,
    OutcomeKind,
    SourceHeld,
)
from dmocker.engines.hashing import block_hashes_from_trace, block_hashes_from_trace_batch
from dmocker.engines.interface import EngineRequest, LifecycleEvent

from .collector import TerminalStatus
from .events import ReplayInvariantError
from .records import request_record
from .report import stable_json_line
from .request_state import Phase, RequestState
from .actions import ActionExecution
from .workload import ReadyTurn, Turn

__all__ = ["CoordinatorIO"]

_P: Final = 0  # index of the prefill pool in per-stage tuples
_D: Final = 1  # index of the decode pool
_Req = RequestState
# Enum members used on the per-action path, bound once: in Python 3.11 reading a member off
# its class (``Phase.DONE``) costs ~5x a module global, and these run ~10 times per request.
_AWAITING_DESTINATION: Final = Phase.AWAITING_DESTINATION
_DEST_FIRST: Final = HandoffOrder.DESTINATION_FIRST
_K_FAILED: Final = OutcomeKind.FAILED


class CoordinatorIO(ActionExecution):
    """The coordinator boundary of :class:`~dmocker.replay.runtime.DisaggRuntime` (a layer)."""

    # ------------------------------------------------------------------ arrivals & retirement

    def _prefetch_hashes(self, turns: list[Turn]) -> None:
        """Hash upcoming first turns in one vectorised batch (same values as one by one)."""
        hashes = block_hashes_from_trace_batch(
            [t.hash_ids for t in turns], [t.input_length for t in turns], self._trace_block, self._block_size
        )
        cache = self._hash_cache
        for t, h in zip(turns, hashes):
            cache[t.request_id] = h

    def _on_arrival(self, item: ReadyTurn) -> None:
        turn = item.turn
        rid = turn.request_id
        if rid in self._live:
            raise ReplayInvariantError(f"request {rid} is already active")
        hashes = self._hash_cache.pop(rid, None)
        if hashes is None:
            hashes = block_hashes_from_trace(turn.hash_ids, turn.input_length, self._trace_block, self._block_size)
        request = EngineRequest(rid, turn.input_length, turn.output_length, hashes)
        make = self._make_coord
        if make is HandoffCoordinator:  # the default: a native constructor call, not a generic call with keywords
            coord = HandoffCoordinator(rid, self._order, fallback_transfer_delay_ms=self._fallback, spec=self._spec)
        else:
            coord = make(rid, self._order, fallback_transfer_delay_ms=self._fallback, spec=self._spec)
        # (the class by its name: a native constructor call; through the ``_Req`` alias, a
        # module global, it is a generic call)
        req = RequestState(turn, item.arrival_ms, coord, request)
        if self._order is _DEST_FIRST:
            req.phase = _AWAITING_DESTINATION
        self.collector.on_arrival(rid, item.arrival_ms, turn.input_length)
        self._live[rid] = req
        self._in_flight += 1
        logging = self._events_out is not None
        prev = coord.state if logging else -1
        try:
            actions = coord.start()
        except HandoffError as exc:  # pragma: no cover - start never rejects
            raise ReplayInvariantError(f"request {rid}: coordinator start failed: {exc}") from exc
        if logging:
            self._log(req, prev, "start", None)
        if actions:  # queue what was issued (inlined: ~6 calls a request issue an action)
            req.queued += len(actions)
            for a in actions:
                self._pending.append((req, a))

    def _finish_logical(self, req: _Req, *, remove_actions: bool) -> None:
        """The request's decode ended (or its handoff was canceled): free its logical slot."""
        if not req.counted or req.phase is Phase.DONE:
            raise ReplayInvariantError(f"request {req.rid} finalized more than once")
        if req.phase is Phase.TRANSFER_PENDING:
            self._stale += 1
        req.counted = False
        req.phase = Phase.CLEANUP_PENDING
        self._in_flight -= 1
        if self._planner is not None:
            self._planner.on_request_gone(req.rid)
        if remove_actions:
            self._remove_actions(req)
        self._admission.on_request_terminal(req.rid, self.now_ms)
        self._retire(req)

    def _retire(self, req: _Req) -> None:
        if req.counted or not req.coord.is_complete:
            return
        if req.queued:
            raise ReplayInvariantError(f"completed handoff {req.rid} still has {req.queued} queued action(s)")
        req.phase = Phase.DONE
        if req.routed:  # a failed, rejected or canceled request frees its router state too
            self._release_routes(req)
        if self._acquire_hooks:
            self._acquire_hooks.pop(req.rid, None)
        del self._live[req.rid]
        if self._route_overlap is not None:
            self._route_retired(req)
        if self._records is not None:
            self._write_record(req)
        if self._on_retired is not None:
            self._on_retired(req.rid)

    # ------------------------------------------------------------------ facts and outcomes

    def _lifecycle(self, events: tuple[LifecycleEvent, ...]) -> None:
        for ev in events:
            # (the replay's handoff ids are its request ids; typed, ``req`` is a RequestState:
            # the uncast lookup's Any made every attribute access below a generic one)
            req = self._live.get(cast(int, ev.handoff_id))
            if req is None:
                raise ReplayInvariantError(f"lifecycle event for unknown handoff {ev.handoff_id!r}")
            if isinstance(ev, SourceHeld):
                if req.source_held_ms is None:
                    req.source_held_ms = self.now_ms
                req.held_tokens = ev.transfer_timing.full_prompt_tokens
            elif isinstance(ev, DestinationReserved):
                if req.destination_reserved_ms is None:
                    req.destination_reserved_ms = self.now_ms
                    if self._planner is not None:
                        self._planner.on_decode_reserved(req.rid)
            self._fact(req, ev)

    def _fact(self, req: _Req, fact: Fact) -> None:
        coord = req.coord
        logging = self._events_out is not None
        prev = coord.state if logging else -1  # the log needs the state the fact arrived in
        try:
            actions = coord.on_fact(fact)
        except HandoffError as exc:
            raise ReplayInvariantError(f"request {req.rid}: coordinator rejected {type(fact).__name__}: {exc}") from exc
        if logging:
            self._log(req, prev, type(fact).__name__, fact)
        if actions:  # queue what was issued (inlined: ~6 calls a request issue an action)
            req.queued += len(actions)
            for a in actions:
                self._pending.append((req, a))

    def _ack(self, req: _Req, issued: IssuedAction, outcome: Outcome) -> None:
        """Report any outcome (a FAILED one also records the request's terminal status)."""
        if outcome.kind is _K_FAILED:
            if self.collector.on_terminal(req.rid, TerminalStatus.FAILED, self.now_ms):
                req.terminal_ms = self.now_ms
        self._ack_ok(req, issued, outcome.kind, outcome)

    def _ack_ok(self, req: _Req, issued: IssuedAction, kind: OutcomeKind, outcome: Outcome | None = None) -> None:
        """Hand an action's outcome to the coordinator and queue what it issues.

        Without ``outcome`` (a message-less kind other than FAILED; the replay's ~5
        acknowledgements per request) the coordinator's lean ``on_outcome_kind`` answers
        exactly as ``on_action_outcome`` would, without building an Outcome.
        """
        coord = req.coord
        logging = self._events_out is not None
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
        if actions:  # queue what was issued (inlined: ~6 calls a request issue an action)
            req.queued += len(actions)
            for a in actions:
                self._pending.append((req, a))

    def _log(self, req: _Req, prev: int, event: str, fact: Fact | None) -> None:
        writer = self._event_log
        if writer is not None:
            writer.log(self.now_ms, req.coord, prev, event, fact, req.prefill_worker, req.decode_worker)

    def write_incomplete_records(self) -> None:
        """Records of requests still in flight at the end (time cap), in request-id order."""
        if self._records is None:
            return
        for rid in sorted(self._live):
            self._write_record(self._live[rid])

    def _write_record(self, req: _Req) -> None:
        out = self._records
        assert out is not None
        rec = request_record(req, self.collector)
        if self._route_overlap is not None:  # routed by something other than round robin
            rec["prefill_route_overlap_tokens"] = self._route_overlap[_P].pop(req.rid, 0)
            rec["decode_route_overlap_tokens"] = self._route_overlap[_D].pop(req.rid, 0)
        out.write(stable_json_line(rec))
