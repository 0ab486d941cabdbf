"""What the runtime tells the routers beyond "route this request" (a layer of the runtime).

Why apart: round robin needs none of it; the KV router (dmocker.replay.routing) and user
routers learn of prefill completions, KV events, frees and topology changes, and may hold
requests in a queue that these signals release.  The per-pool prefix-reuse summary and the
overlap each routed request saw are kept here too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from dmocker.engines.interface import PassCompletion

from .collector import TerminalStatus
from .request_state import RequestState, Stage
from .routing import RouterError
from .routing.protocol import Admission
from .coordinator_io import CoordinatorIO

__all__ = ["RoutingHooks"]

_P: Final = 0  # index of the prefill pool in per-stage tuples
_D: Final = 1  # index of the decode pool
_STAGES: Final[tuple[Stage, ...]] = (Stage.PREFILL, Stage.DECODE)  # (``...``: see RuntimeBase)
_Req = RequestState
_COMPLETED: Final = int(TerminalStatus.COMPLETED)


class RoutingHooks(CoordinatorIO):
    """Routing signals of :class:`~dmocker.replay.runtime.DisaggRuntime` (a layer)."""

    def _release_routes(self, req: _Req) -> None:
        routed, req.routed = req.routed, 0
        if routed & 1:
            self._free_route(_P, req.rid)
        if routed & 2:
            self._free_route(_D, req.rid)

    def _free_route(self, stage: int, rid: int) -> None:
        released = self._routers[stage].on_free(rid, self.now_ms)
        if released:
            self._admit(stage, released)

    def _unhold(self, stage: int, req: _Req) -> None:
        """A request still held by its router is canceled: drop it from the router's queue."""
        if self._held[stage].pop(req.rid, None) is not None:
            req.queued -= 1
            self._free_route(stage, req.rid)

    def _admit(self, stage: int, released: Sequence[Admission]) -> None:
        """Dispatch the requests a router released from its queue, in its order."""
        held = self._held[stage]
        for rid, idx in released:
            item = held.pop(rid, None)
            if item is None:
                raise RouterError(
                    f"router of the {_STAGES[stage].name.lower()} pool released request {rid}, "
                    "which it does not hold"
                )
            req, issued = item
            req.queued -= 1
            self._dispatch(req, issued, stage, idx)

    def route_topology_changed(self, stage: int, worker: int, *, added: bool) -> None:
        """Tell a pool's router that ``worker`` joined (``added``) or left it; dispatch what it releases.

        For scaling (a planner): call after updating the pool's active worker list.
        """
        router = self._routers[stage]
        if added:
            released = router.add_worker(worker, self.now_ms)
        else:
            released = router.remove_worker(worker, self.now_ms)
        if released:
            self._admit(stage, released)

    def _prefill_pass_routing(self, done: PassCompletion, idx: int) -> None:
        """Prefill pass end: KV events (SGLang's become visible here), then prefill completions."""
        router = self._routers[_P]
        now = self.now_ms
        if self._kv_feed and done.kv_events:
            router.on_kv_events(idx, done.kv_events, now)
        rejected = done.rejected
        for rid in done.emitted.tolist():
            if rid in rejected:
                continue
            released = router.on_prefill_complete(rid, now)
            if released:
                self._admit(_P, released)

    def _route_retired(self, req: _Req) -> None:
        if self.collector.status.item(req.rid) == _COMPLETED:
            reuse = self._pool_reuse
            reuse[0] += req.prefill_reused or 0
            reuse[1] += req.decode_reused or 0
            reuse[2] += req.turn.input_length

    def routing_summary(self) -> dict[str, float]:
        """Prefix reuse per pool over completed requests (routers other than round robin)."""
        p, d, total = self._pool_reuse
        return {
            "prefill_prefix_cache_reused_ratio": p / total if total else 0.0,
            "decode_prefix_cache_reused_ratio": d / total if total else 0.0,
        }
