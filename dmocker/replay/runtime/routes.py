"""What the runtime tells the routers beyond "route this request": frees, prefill completions,
KV events, topology changes; and the requests a router releases from its queue in return.

Why apart: round robin needs none of it; the KV router (dmocker.replay.routing) and user routers
learn of prefill completions, KV events, frees and topology changes, and may hold requests in a
queue that these signals release.  The per-pool prefix-reuse summary and the overlap each routed
request saw are kept here too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Protocol

from dmocker.engines.interface import PassCompletion
from dmocker.handoff import IssuedAction

from ..collector import Collector, TerminalStatus
from ..request_state import RequestState
from ..routing import RouterError
from ..routing.protocol import Admission
from .clock import Clock
from .pool import WorkerPool

__all__ = ["Routing", "Dispatcher"]

_P: Final = 0
_D: Final = 1
_COMPLETED: Final = TerminalStatus.COMPLETED


class Dispatcher(Protocol):
    def dispatch(self, req: RequestState, issued: IssuedAction, stage: int, idx: int) -> bool:
        """Apply a routed SubmitPrefill / ReserveDestination on worker ``idx`` of ``stage``."""


class Routing:
    """The routers' side channel (see the module docstring).

    ``signals``: some router needs more than ``route`` (anything but round robin);
    ``kv_feed``: the prefill router wants KV events; ``overlap``: per pool, the prefix overlap
    each routed request saw, kept for the per-request records (None with round robin).
    """

    __slots__ = ("clock", "pools", "collector", "dispatcher", "signals", "kv_feed", "overlap", "keep_overlap",
                 "reuse")

    def __init__(self, clock: Clock, pools: tuple[WorkerPool, ...], collector: Collector, dispatcher: Dispatcher,
                 *, signals: bool, keep_overlap: bool) -> None:
        self.clock = clock
        self.pools = pools
        self.collector = collector
        self.dispatcher = dispatcher
        self.signals = signals
        self.kv_feed = pools[_P].router.wants_kv_events
        self.overlap: tuple[dict[int, int], ...] | None = ({}, {}) if signals else None
        self.keep_overlap = keep_overlap  # the per-request records report it
        self.reuse = [0, 0, 0]  # completed requests: prefill reused, decode reused, input tokens

    def note_routed(self, stage: int, rid: int) -> None:
        """A request was routed: read the overlap its router saw (the router forgets it)."""
        overlap = self.overlap
        if overlap is not None:
            seen = self.pools[stage].router.overlap_tokens(rid)
            if self.keep_overlap:
                overlap[stage][rid] = seen

    def release_routes(self, req: RequestState) -> None:
        routed, req.routed = req.routed, 0
        if routed & 1:
            self.free_route(_P, req.rid)
        if routed & 2:
            self.free_route(_D, req.rid)

    def free_route(self, stage: int, rid: int) -> None:
        released = self.pools[stage].router.on_free(rid, self.clock.now_ms)
        if released:
            self._admit(stage, released)

    def unhold(self, stage: int, req: RequestState) -> None:
        """A request still held by its router is canceled: drop it from the router's queue."""
        if self.pools[stage].held.pop(req.rid, None) is not None:
            req.queued -= 1
            self.free_route(stage, req.rid)

    def release(self, stage: int, released: Sequence[Admission]) -> None:
        """Dispatch what a pool's router released on a signal from outside the cluster (a live
        edge pinning a request to the worker it came to); call inside a time step."""
        self._admit(stage, released)

    def _admit(self, stage: int, released: Sequence[Admission]) -> None:
        """Dispatch the requests a router released from its queue, in its order."""
        pool = self.pools[stage]
        held = pool.held
        for rid, idx in released:
            item = held.pop(rid, None)
            if item is None:
                raise RouterError(f"router of the {pool.name} pool released request {rid}, which it does not hold")
            req, issued = item
            req.queued -= 1
            self.dispatcher.dispatch(req, issued, stage, idx)

    def topology_changed(self, stage: int, worker: int, *, added: bool) -> None:
        """Tell a pool's router that ``worker`` joined (``added``) or left it; dispatch what it
        releases.  Call after updating the pool's active worker list."""
        router = self.pools[stage].router
        now = self.clock.now_ms
        released = router.add_worker(worker, now) if added else router.remove_worker(worker, now)
        if released:
            self._admit(stage, released)

    def prefill_pass_done(self, done: PassCompletion, idx: int) -> None:
        """Prefill pass end: KV events (SGLang's become visible here), then prefill completions."""
        router = self.pools[_P].router
        now = self.clock.now_ms
        if self.kv_feed and done.kv_events:
            router.on_kv_events(idx, done.kv_events, now)
        rejected = done.rejected
        for rid in done.emitted.tolist():
            if rid in rejected:
                continue
            released = router.on_prefill_complete(rid, now)
            if released:
                self._admit(_P, released)

    def retired(self, req: RequestState) -> None:
        """A request left: count its prefix reuse if it completed."""
        if self.collector.status_of(req.rid) is _COMPLETED:
            reuse = self.reuse
            reuse[0] += req.prefill_reused or 0
            reuse[1] += req.decode_reused or 0
            reuse[2] += req.turn.input_length

    def take_overlap(self, rid: int) -> tuple[int, int]:
        """The overlap a request's routers saw, prefill then decode (for its record)."""
        overlap = self.overlap
        assert overlap is not None
        return overlap[_P].pop(rid, 0), overlap[_D].pop(rid, 0)

    def summary(self) -> dict[str, float]:
        """Prefix reuse per pool over completed requests (routers other than round robin)."""
        p, d, total = self.reuse
        return {
            "prefill_prefix_cache_reused_ratio": p / total if total else 0.0,
            "decode_prefix_cache_reused_ratio": d / total if total else 0.0,
        }
