"""Which prefill worker holds which KV block: the router's prefix index.

Why per-worker sets and not a tree: the engines name blocks by *chained* hashes (a block's hash
covers its whole prefix, see ``dmocker.engines.hashing``), so one hash already identifies a
path from the root of the reference's radix tree (``ai-dynamo/dynamo``
``lib/kv-router/src/indexer``).  A set of the hashes each worker caches is that tree
flattened: a request's overlap on a worker is the number of its leading blocks the worker
holds.  Stored / Removed events are bulk set updates (done in C), and a query walks the
prompt's hashes once per worker until the first miss: O(prompt blocks x workers) per request,
never O(cached blocks).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from dmocker.engines.interface import KvEvent, KvStored

__all__ = ["KvIndex"]


class KvIndex:
    """Per worker: the set of chained block hashes its cache holds."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: dict[int, set[int]] = {}

    def __len__(self) -> int:
        """Cached (worker, block) pairs."""
        return sum(len(s) for s in self._held.values())

    def apply(self, worker: int, events: Sequence[KvEvent]) -> None:
        """Apply a worker's Stored / Removed events in order."""
        held = self._held.get(worker)
        if held is None:
            held = self._held[worker] = set()
        for ev in events:
            if isinstance(ev, KvStored):
                held.update(ev.block_hashes)
            else:
                held.difference_update(ev.block_hashes)

    def holdings(self) -> dict[int, set[int]]:
        """Live view, worker -> the hashes it holds, for a caller that walks a prompt itself
        (the router's fused fast path); read it, never change it."""
        return self._held

    def forget_worker(self, worker: int) -> None:
        """Drop every block of ``worker`` (a removed worker whose index may be reused)."""
        self._held.pop(worker, None)

    def overlaps(self, block_hashes: Sequence[int]) -> dict[int, int]:
        """Leading blocks of ``block_hashes`` each worker holds (workers with none are absent)."""
        out: dict[int, int] = {}
        if not block_hashes:
            return out
        # read as the objects the sequence holds (a cast), for the set lookups
        objs = cast("Sequence[object]", block_hashes)
        first = objs[0]
        for worker, held in self._held.items():
            if first not in held:
                continue
            n = 0
            for h in objs:
                if h not in held:
                    break
                n += 1
            out[worker] = n
        return out
