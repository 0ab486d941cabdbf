""":class:`BaseRouter`, the base of the built-in routers and of users' own (compiled).

Why a module of its own: the built-in routers (round robin, KV) are compiled with mypyc for
speed (``setup.py``), and a compiled class can only derive from a compiled class; this base is
compiled with ``allow_interpreted_subclasses`` so a team's router, plain Python, still derives
from it.  The rest of the protocol (:mod:`.protocol`) stays interpreted.

``wants_kv_events`` is a read-only property here (False): a subclass overrides it with a class
attribute (``wants_kv_events = True``) or a property of its own, as the KV router does (True
on the prefill pool).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from mypy_extensions import mypyc_attr

from dmocker.engines.interface import EngineRequest, KvEvent

from .context import RouterContext

__all__ = ["Admission", "BaseRouter", "NO_ADMISSIONS"]

Admission = tuple[int, int]
"""A held request released to a worker: ``(request_id, worker)``."""

NO_ADMISSIONS: Final[tuple[Admission, ...]] = ()


@mypyc_attr(allow_interpreted_subclasses=True)
class BaseRouter:
    """Convenience base for user routers: tracks the pool's workers, ignores every signal.

    Subclass it and override :meth:`route` (and whichever notifications the policy needs);
    ``self.workers`` is the pool's current worker indices, ascending.
    """

    def __init__(self, context: RouterContext | None = None) -> None:
        self.context = context
        self.workers: list[int] = []

    @property
    def wants_kv_events(self) -> bool:
        """Whether :meth:`on_kv_events` is to be called (False: the runtime never calls it)."""
        return False

    def route(self, request: EngineRequest, now_ms: float) -> int | None:
        raise NotImplementedError

    def on_kv_events(self, worker: int, events: Sequence[KvEvent], now_ms: float) -> None:
        return None

    def on_prefill_complete(self, request_id: int, now_ms: float) -> Sequence[Admission]:
        return NO_ADMISSIONS

    def on_free(self, request_id: int, now_ms: float) -> Sequence[Admission]:
        return NO_ADMISSIONS

    def add_worker(self, worker: int, now_ms: float) -> Sequence[Admission]:
        if worker not in self.workers:
            self.workers.append(worker)
            self.workers.sort()
        return NO_ADMISSIONS

    def remove_worker(self, worker: int, now_ms: float) -> Sequence[Admission]:
        if worker in self.workers:
            self.workers.remove(worker)
        return NO_ADMISSIONS

    def overlap_tokens(self, request_id: int) -> int:
        return 0
