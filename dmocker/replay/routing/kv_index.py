"""Which prefill worker holds which KV block: the router's prefix index.

Why a flat map and not a tree: the engines name blocks by *chained* hashes (a block's hash
covers its whole prefix, see ``dmocker.engines.hashing``), so one hash already identifies a
path from the root of the reference's radix tree (``ai-dynamo/dynamo``
``lib/kv-router/src/indexer``).  A map from hash to the set of workers holding it (an int
bitmask) is that tree flattened: a request's overlap on a worker is the number of its leading
blocks the worker holds, found by walking the prompt's hashes until no worker is left.  The
work per query is O(prompt blocks + workers), never O(cached blocks).
"""

from __future__ import annotations

from collections.abc import Sequence

from dmocker.engines.interface import KvEvent, KvStored

__all__ = ["KvIndex"]


class KvIndex:
    """Chained block hash -> bitmask of the workers whose cache holds that block."""

    __slots__ = ("_holders",)

    def __init__(self) -> None:
        self._holders: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._holders)

    def apply(self, worker: int, events: Sequence[KvEvent]) -> None:
        """Apply a worker's Stored / Removed events in order."""
        holders = self._holders
        bit = 1 << worker
        for ev in events:
            if isinstance(ev, KvStored):
                for h in ev.block_hashes:
                    holders[h] = holders.get(h, 0) | bit
            else:
                for h in ev.block_hashes:
                    mask = holders.get(h, 0) & ~bit
                    if mask:
                        holders[h] = mask
                    else:
                        holders.pop(h, None)

    def forget_worker(self, worker: int) -> None:
        """Drop every block of ``worker`` (a removed worker whose index may be reused)."""
        bit = 1 << worker
        holders = self._holders
        for h in [h for h, m in holders.items() if m & bit]:
            mask = holders[h] & ~bit
            if mask:
                holders[h] = mask
            else:
                del holders[h]

    def overlaps(self, block_hashes: Sequence[int]) -> dict[int, int]:
        """Leading blocks of ``block_hashes`` each worker holds (workers with none are absent)."""
        holders = self._holders
        out: dict[int, int] = {}
        alive = -1  # every worker still matching the prefix so far
        depth = 0
        for h in block_hashes:
            mask = holders.get(h, 0) & alive
            if mask != alive and depth:
                _credit(out, alive & ~mask, depth)
            if not mask:
                return out
            alive = mask
            depth += 1
        if depth:
            _credit(out, alive, depth)
        return out


def _credit(out: dict[int, int], mask: int, depth: int) -> None:
    while mask:
        low = mask & -mask
        out[low.bit_length() - 1] = depth
        mask ^= low
