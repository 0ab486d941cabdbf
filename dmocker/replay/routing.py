"""Worker selection for each pool.

Why a seam: the reference's round-robin and KV-aware routers are interchangeable per stage;
the KV router lands in a later issue, so the runtime only ever calls :class:`Router`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = ["Router", "RoundRobin"]


class Router(Protocol):
    """Picks a worker for a request among the pool's active workers."""

    def pick(self, request_id: int, active: Sequence[int]) -> int: ...

    def on_request_done(self, request_id: int) -> None:
        """The request no longer loads the worker it was routed to."""
        ...


class RoundRobin:
    """The reference's round robin: request i goes to active worker i mod N (no scaling)."""

    __slots__ = ("_next",)

    def __init__(self) -> None:
        self._next = 0

    def pick(self, request_id: int, active: Sequence[int]) -> int:
        if not active:
            raise ValueError("round robin over an empty pool")
        idx = self._next % len(active)
        self._next = idx + 1
        return active[idx]

    def on_request_done(self, request_id: int) -> None:
        return None
