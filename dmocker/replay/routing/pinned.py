"""A pool whose worker is chosen outside the cluster: by the proxy in front of a live server.

A real disaggregated proxy (vLLM's, ``sglang-router``) picks the prefill worker and the decode
worker and sends each its request.  The cluster's coordinator still orders the handoff, so
when it asks this pool's router for a worker, the answer is the worker the request came to
(:meth:`PinnedRouter.pin`); a request that has not come yet is held until it does.
"""

from __future__ import annotations

from collections.abc import Sequence

from dmocker.engines.interface import EngineRequest

from .base import NO_ADMISSIONS, Admission, BaseRouter

__all__ = ["PinnedRouter"]


class PinnedRouter(BaseRouter):
    """Routes each request to the worker it was pinned to, holding it until it is pinned."""

    def __init__(self) -> None:
        super().__init__(None)
        self._pins: dict[int, int] = {}  # request -> worker, pinned before the coordinator asked
        self._held: set[int] = set()  # requests the coordinator asked for, not pinned yet

    def pin(self, request_id: int, worker: int) -> Sequence[Admission]:
        """The request came to ``worker``: a held request is released to it (one admission)."""
        if request_id in self._held:
            self._held.discard(request_id)
            return ((request_id, worker),)
        self._pins[request_id] = worker
        return NO_ADMISSIONS

    def is_held(self, request_id: int) -> bool:
        return request_id in self._held

    def route(self, request: EngineRequest, now_ms: float) -> int | None:
        worker = self._pins.pop(request.request_id, None)
        if worker is None:
            self._held.add(request.request_id)
        return worker

    def on_free(self, request_id: int, now_ms: float) -> Sequence[Admission]:
        self._held.discard(request_id)
        self._pins.pop(request_id, None)
        return NO_ADMISSIONS

    def is_empty(self) -> bool:
        """Nothing held or pinned (the end-of-run check of router state)."""
        return not self._held and not self._pins
