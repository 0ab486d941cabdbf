"""User routers for the protocol tests (importable as ``tests.replay.user_routers:CLASS``)."""

from __future__ import annotations

from dmocker.engines.interface import EngineRequest
from dmocker.replay.routing import BaseRouter


class LastWorker(BaseRouter):
    """Sends everything to the pool's highest-index worker and records what it was told."""

    wants_kv_events = True  # a class attribute overriding the base's property
    made: list[LastWorker] = []  # every instance, for the test to inspect

    def __init__(self, context: object) -> None:
        super().__init__(context)  # type: ignore[arg-type]
        LastWorker.made.append(self)
        self.kv_batches = 0
        self.prefill_done: list[int] = []
        self.freed: list[int] = []

    def route(self, request: EngineRequest, now_ms: float) -> int:
        return self.workers[-1]

    def on_kv_events(self, worker: int, events: object, now_ms: float) -> None:
        self.kv_batches += 1

    def on_prefill_complete(self, request_id: int, now_ms: float) -> tuple[tuple[int, int], ...]:
        self.prefill_done.append(request_id)
        return ()

    def on_free(self, request_id: int, now_ms: float) -> tuple[tuple[int, int], ...]:
        self.freed.append(request_id)
        return ()


class OutOfPool(BaseRouter):
    """Broken: answers a worker that does not exist."""

    def route(self, request: EngineRequest, now_ms: float) -> int:
        return 99


class NotARouter:
    """Broken: no protocol methods at all."""

    def __init__(self, context: object) -> None:
        self.context = context
