"""One stage's workers (the prefill pool or the decode pool), their router, and the actions
waiting on them.

Why its own object: everything the runtime keeps per stage -- which workers exist, which are
routable or serving, which must be asked to start a pass, which actions wait for a worker --
belongs together, and nothing here knows about time, requests' handoffs or the other stage.
"""

from __future__ import annotations

from collections import deque
from dmocker.engines.interface import EngineWorker

from ..request_state import Queued, RequestState, Stage
from ..routing import Router

__all__ = ["WorkerPool"]


class WorkerPool:
    """The workers of one stage and the actions queued on them.

    ``active`` are the workers the router may pick; ``serving`` those that run passes (the same
    list unless a planner drains workers, which stay serving until empty).  A worker is
    ``dirty`` when something happened to it since it last declined to start a pass: only dirty
    idle workers are asked again, because starting a pass is a pure function of its state.
    Actions wait three ways: ``held`` by the router's queue (keyed by request), ``waiting``
    while the pool has no routable worker, ``deferred`` behind a worker's pass in flight.
    """

    __slots__ = ("stage", "name", "workers", "active", "serving", "dirty", "router", "held", "waiting",
                 "deferred", "gone")

    def __init__(self, stage: Stage, workers: list[EngineWorker], router: Router) -> None:
        self.stage = int(stage)
        self.name = stage.name.lower()
        self.workers = workers
        self.active = list(range(len(workers)))
        self.serving = self.active
        self.dirty = [True] * len(workers)
        self.router = router
        self.held: dict[int, Queued] = {}
        self.waiting: deque[Queued] = deque()
        self.deferred: dict[int, list[Queued]] = {}
        # Empty for good (crashed, no restart): acquires fail instead of waiting.
        self.gone = False

    def any_dirty(self) -> bool:
        for flag in self.dirty:
            if flag:
                return True
        return False

    def defer(self, item: Queued, idx: int) -> None:
        """Queue ``item`` behind worker ``idx``'s pass in flight."""
        queue = self.deferred.get(idx)
        if queue is None:
            queue = self.deferred[idx] = []
        queue.append(item)
        item[0].queued += 1

    def park(self, item: Queued) -> None:
        """Queue ``item`` until the pool has a routable worker again."""
        self.waiting.append(item)
        item[0].queued += 1

    def hold(self, item: Queued) -> None:
        """The router keeps ``item`` in its queue until a notification releases it."""
        self.held[item[0].rid] = item
        item[0].queued += 1

    def take_deferred(self, idx: int) -> list[Queued] | None:
        return self.deferred.pop(idx, None)

    def take_parked(self) -> list[Queued]:
        parked = list(self.waiting)
        self.waiting.clear()
        return parked

    def drop_actions_of(self, req: RequestState) -> None:
        """Forget every action of ``req`` queued on this pool (the request is torn down)."""
        self.held.pop(req.rid, None)
        if self.waiting:
            kept = [item for item in self.waiting if item[0] is not req]
            self.waiting.clear()
            self.waiting.extend(kept)
        d = self.deferred
        for key in sorted(d):
            left = [item for item in d[key] if item[0] is not req]
            if left:
                d[key] = left
            else:
                del d[key]

    def parked_count(self) -> int:
        """Requests waiting to be routed: parked, or held in the router's queue."""
        return len(self.waiting) + len(self.held)

    def append_worker(self, worker: EngineWorker) -> None:
        """A new worker at the next index (neither routable nor serving yet)."""
        self.workers.append(worker)
        self.dirty.append(False)

    def set_routable(self, idx: int, routable: bool) -> None:
        _toggle(self.active, idx, routable)

    def set_serving(self, idx: int, serving: bool) -> None:
        _toggle(self.serving, idx, serving)
        self.dirty[idx] = serving

    @property
    def planned(self) -> bool:
        """A planner keeps ``serving`` apart from ``active`` (draining workers)."""
        return self.serving is not self.active


def _toggle(members: list[int], idx: int, present: bool) -> None:
    """Add (kept sorted) or remove ``idx`` in a worker-index list."""
    if present:
        if idx not in members:
            members.append(idx)
            members.sort()
    elif idx in members:
        members.remove(idx)
