"""The reference's round robin: request i goes to worker i mod N of the pool's workers.

The default router of both pools; it keeps no per-request state, so every notification is a
no-op and the runtime may skip the ones it knows round robin ignores.
"""

from __future__ import annotations

from dmocker.engines.interface import EngineRequest

from .base import BaseRouter
from .context import RouterContext

__all__ = ["RoundRobin"]


class RoundRobin(BaseRouter):
    """Cycles through the pool's workers in ascending index order."""

    def __init__(self, context: RouterContext | None = None) -> None:
        super().__init__(context)
        self._next = 0

    def route(self, request: EngineRequest, now_ms: float) -> int:
        workers = self.workers
        if not workers:
            raise ValueError("round robin over an empty pool")
        idx = self._next % len(workers)
        self._next = idx + 1
        return workers[idx]
