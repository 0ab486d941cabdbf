"""The router queue: arrivals held while every worker is busy, released by policy.

Why: the reference's router parks a request when queueing is on and either a backlog exists or
every worker has more prefill tokens in flight than ``threshold x max_num_batched_tokens``
(``ai-dynamo/dynamo`` ``lib/kv-router/src/scheduling/queue.rs``, ``policy_queue.rs``).  It
drains on prefill completion, request free and topology change.  Policies: ``fcfs`` (oldest
first), ``lcfs`` (newest first), ``wspt`` (Smith's rule with unit weights: fewest uncached
prompt tokens first, oldest first among equals).  Ties are broken by the enqueue sequence
number, never by object identity, so the order is reproducible.
"""

from __future__ import annotations

import heapq
from typing import Generic, TypeVar

from .config import QueuePolicy

__all__ = ["RouterQueue"]

T = TypeVar("T")


class RouterQueue(Generic[T]):
    """Held requests keyed by request id; ``pop`` returns the next by policy."""

    __slots__ = ("_policy", "_heap", "_items", "_seq")

    def __init__(self, policy: QueuePolicy) -> None:
        self._policy = policy
        self._heap: list[tuple[float, int, int]] = []  # (policy key, seq, request id)
        self._items: dict[int, T] = {}
        self._seq = 0

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, request_id: int) -> bool:
        return request_id in self._items

    def push(self, request_id: int, item: T, uncached_tokens: int) -> None:
        self._seq += 1
        seq = self._seq
        policy = self._policy
        if policy is QueuePolicy.FCFS:
            key = (0.0, seq)
        elif policy is QueuePolicy.LCFS:
            key = (0.0, -seq)
        else:
            key = (float(uncached_tokens), seq)
        self._items[request_id] = item
        heapq.heappush(self._heap, (key[0], key[1], request_id))

    def remove(self, request_id: int) -> bool:
        """Drop a held request (lazily: its heap entry is skipped when reached)."""
        return self._items.pop(request_id, None) is not None

    def peek(self) -> int | None:
        heap = self._heap
        items = self._items
        while heap and heap[0][2] not in items:
            heapq.heappop(heap)
        return heap[0][2] if heap else None

    def pop(self) -> tuple[int, T]:
        rid = self.peek()
        if rid is None:
            raise IndexError("pop from an empty router queue")
        heapq.heappop(self._heap)
        return rid, self._items.pop(rid)
