"""The end of a request: its terminal status, the end of its decode (its logical slot), and its
retirement once its coordinator completed too, with its per-request record.

Why apart: a request ends from several places (its decode finishing or being rejected, a
Complete action, a fault), and in either order (the decode may end before ReleaseSource); what
ending frees -- queued actions, router holds, the admission slot, the record -- is one concern.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO

from ..collector import Collector, TerminalStatus
from ..errors import ReplayInvariantError
from ..records import request_record
from ..report import stable_json_line
from ..request_state import Phase, RequestState
from ..workload import AdmissionQueue
from .clock import Clock
from .observer import ClusterObserver
from .pool import WorkerPool
from .requests import ActionQueue, RequestTable
from .routes import Routing

__all__ = ["Lifecycle"]


class Lifecycle:
    """Ends and retires requests (see the module docstring)."""

    __slots__ = ("clock", "table", "queue", "pools", "routing", "admission", "collector", "observer",
                 "records", "on_retired")

    def __init__(
        self,
        clock: Clock,
        table: RequestTable,
        queue: ActionQueue,
        pools: tuple[WorkerPool, ...],
        routing: Routing,
        admission: AdmissionQueue,
        collector: Collector,
        *,
        observer: ClusterObserver | None,
        records: IO[str] | None,
        on_retired: Callable[[int], None] | None,
    ) -> None:
        self.clock = clock
        self.table = table
        self.queue = queue
        self.pools = pools
        self.routing = routing
        self.admission = admission
        self.collector = collector
        self.observer = observer
        self.records = records
        self.on_retired = on_retired

    def terminal(self, rid: int, status: TerminalStatus) -> RequestState | None:
        """The live request ``rid`` (None: retired already), its terminal status recorded if it
        is the first."""
        req = self.table.live.get(rid)
        now = self.clock.now_ms
        if req is not None and self.collector.on_terminal(rid, status, now):
            req.terminal_ms = now
        return req

    def remove_actions(self, req: RequestState) -> None:
        """Drop every queued, parked or deferred action of a request that is being torn down."""
        if not req.queued:
            return
        self.queue.drop(req)
        for pool in self.pools:
            pool.drop_actions_of(req)
        req.queued = 0

    def finish_logical(self, req: RequestState, *, remove_actions: bool) -> None:
        """The request's decode ended (or its handoff was canceled): free its logical slot."""
        if not req.counted or req.phase is Phase.DONE:
            raise ReplayInvariantError(f"request {req.rid} finalized more than once")
        table = self.table
        if req.phase is Phase.TRANSFER_PENDING:
            table.stale_transfers += 1
        req.counted = False
        req.phase = Phase.CLEANUP_PENDING
        table.in_flight -= 1
        if self.observer is not None:
            self.observer.on_request_gone(req.rid)
        if remove_actions:
            self.remove_actions(req)
        self.admission.on_request_terminal(req.rid, self.clock.now_ms)
        self.retire(req)

    def retire(self, req: RequestState) -> None:
        """Retire the request once its decode ended and its coordinator completed."""
        if req.counted or not req.coord.is_complete:
            return
        if req.queued:
            raise ReplayInvariantError(f"completed handoff {req.rid} still has {req.queued} queued action(s)")
        req.phase = Phase.DONE
        routing = self.routing
        if req.routed:  # a failed, rejected or canceled request frees its router state too
            routing.release_routes(req)
        del self.table.live[req.rid]
        if routing.overlap is not None:
            routing.retired(req)
        if self.records is not None:
            self._write_record(req)
        if self.on_retired is not None:
            self.on_retired(req.rid)

    def write_incomplete_records(self) -> None:
        """Records of requests still in flight at the end (time cap), in request-id order."""
        if self.records is None:
            return
        live = self.table.live
        for rid in sorted(live):
            self._write_record(live[rid])

    def _write_record(self, req: RequestState) -> None:
        out = self.records
        assert out is not None
        rec = request_record(req, self.collector)
        if self.routing.overlap is not None:  # routed by something other than round robin
            rec["prefill_route_overlap_tokens"], rec["decode_route_overlap_tokens"] = self.routing.take_overlap(req.rid)
        out.write(stable_json_line(rec))
