"""What a router is told and what it answers: the seam between the replay and routing policy.

Why this shape: the reference routes each pool with a synchronous, in-process router that sees
arrivals, the prefill workers' KV cache events, prefill completions, request frees and
topology changes, and may hold arrivals in a queue that later events release
(``ai-dynamo/dynamo`` ``lib/mocker/src/replay/offline/components/router.rs``).  One protocol
carries exactly those signals, so the built-in round robin, the KV-aware router and a team's
own policy (``dmocker replay --router mypkg.routing:MyRouter``) are interchangeable.

The contract, per pool (one router instance per pool):

* ``route(request, now_ms)`` is called when the coordinator asks for a worker (SubmitPrefill
  on the prefill pool, ReserveDestination on the decode pool).  Return a worker index from the
  pool's current workers, or ``None`` to hold the request in the router's own queue.
* Notifications return the held requests they release, as ``(request_id, worker)`` pairs, in
  the order to dispatch them (an empty tuple when nothing is released):
  ``on_prefill_complete`` (prefill pool: the request's prompt is computed),
  ``on_free`` (the request stops loading its worker: prefill pool at handoff completion,
  decode pool at the decode terminal, both on cancellation; a still-held request is dropped),
  ``add_worker`` / ``remove_worker`` (topology changes, e.g. from a planner).
* ``on_kv_events(worker, events, now_ms)``: blocks a prefill worker stored or evicted
  (:class:`~dmocker.engines.interface.KvStored` / ``KvRemoved``, chained block hashes as in
  ``EngineRequest.block_hashes``), delivered only when ``wants_kv_events`` is true, at the
  moment the engine makes them visible (vLLM at pass start, SGLang at pass end).
* ``overlap_tokens(request_id)``: the prefix overlap, in tokens, the router saw on the worker
  it chose (reported per request as ``prefill_route_overlap_tokens`` /
  ``decode_route_overlap_tokens``).

Routers are deterministic: no clock, no I/O; randomness only from a generator seeded with
``RouterContext.seed``.  A returned worker outside the pool is a :class:`RouterError` naming
the request.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from dmocker.engines.interface import EngineRequest, KvEvent

from .base import NO_ADMISSIONS, Admission, BaseRouter
from .context import Pool, RouterContext

__all__ = ["Admission", "BaseRouter", "Pool", "Router", "RouterContext", "RouterError", "NO_ADMISSIONS"]


class RouterError(ValueError):
    """A router broke its contract (e.g. returned a worker that is not in its pool)."""


@runtime_checkable
class Router(Protocol):
    """A pool's router (see the module docstring for when each method is called)."""

    @property
    def wants_kv_events(self) -> bool:
        """Whether the runtime delivers the prefill engines' KV events (read once, at start)."""
        ...

    def route(self, request: EngineRequest, now_ms: float) -> int | None: ...

    def on_kv_events(self, worker: int, events: Sequence[KvEvent], now_ms: float) -> None: ...

    def on_prefill_complete(self, request_id: int, now_ms: float) -> Sequence[Admission]: ...

    def on_free(self, request_id: int, now_ms: float) -> Sequence[Admission]: ...

    def add_worker(self, worker: int, now_ms: float) -> Sequence[Admission]: ...

    def remove_worker(self, worker: int, now_ms: float) -> Sequence[Admission]: ...

    def overlap_tokens(self, request_id: int) -> int: ...
