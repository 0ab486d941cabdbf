"""Paged KV block pool with chained-hash prefix caching and LRU eviction (vLLM mock).

Model
-----
``total`` blocks are split into:

* **free** blocks (a bare count: they hold nothing);
* **private** blocks owned by one request (counted by their owner only — the pool sees them as
  "not free"): partial tail blocks, blocks of generated tokens, and duplicate copies of a full
  block whose hash was already cached when it was computed ("duplicate copies each consume
  capacity", as in the reference's ``lib/mocker/src/cache/vllm_block_pool.rs``);
* **cached** blocks, one copy per chained hash, with a reference count (requests holding it plus
  destination pins).  A cached block with ``refs == 0`` is *inactive*: it stays reusable by prefix
  hits until it is evicted, oldest first, when fresh capacity is needed.

Invariant (checked by the property tests): ``free + private + len(refs) == total``, every
``refs[h] >= 0``, and ``h`` is inactive iff ``refs[h] == 0``.  ``private`` is tracked here as
``total - free - len(refs)``, so owners must return exactly what they took.

Blocks of *generated* tokens enter the cache, when their owner frees them, under ids from
2**59 up (:func:`generated_block_ids`; prompt hashes are below, see
:data:`dmocker.engines.hashing.HASH_BITS`): the reference caches them under hashes of random output
tokens, which nobody can hit, but which take LRU slots and so shape later evictions.

Events: when ``record`` is on, cache insertions and evictions are appended, in order, to
``events`` (a stored hash ``h`` as ``h``, a removed one as ``~h``, which is negative); the owner
drains them with :func:`dmocker.engines.common.kv_events` at its visibility point.
"""

from __future__ import annotations

from collections import OrderedDict
from itertools import islice
from typing import Sequence

from dmocker.engines.hashing import HASH_BITS

__all__ = ["BlockPool", "PRIVATE_HASH_BASE", "generated_block_ids"]

# Ids of blocks holding generated tokens live above every (59-bit) content hash, so they can
# never collide with (or be matched as) a prompt block; they produce no KV events.  Request
# ids below 2**35 keep them under 2**60: two-digit ints, as cheap to hash as prompt hashes.
PRIVATE_HASH_BASE = 1 << HASH_BITS

# Per-block work below is written as plain loops with one dict operation per block and step.
# Measured on a recorded call trace (bench: every pool call of a 10k-request replay), that is
# ~25 % cheaper than building intermediate lists with map/zip/compress over bound methods, both
# interpreted and mypyc-compiled (where the loops become direct dict calls).


def generated_block_ids(request_id: int, first: int, stop: int) -> list[int]:
    """Cache ids of a request's generated-token blocks ``first..stop-1`` (block indices).

    The reference caches these under hashes of random output tokens: reachable by nobody, but
    they occupy LRU slots once released, which shapes what is evicted later.
    """
    base = PRIVATE_HASH_BASE + (request_id << 24)
    return list(range(base + first, base + stop))


class BlockPool:
    __slots__ = ("total", "free", "refs", "inactive", "record", "events")

    def __init__(self, total: int, *, record: bool = False) -> None:
        self.total = total
        self.free = total
        self.refs: dict[int, int] = {}
        # LRU of inactive cached hashes, oldest first.  (Measured on CPython 3.11: an
        # OrderedDict driven by per-item C-level setitem/delitem/popitem beats a dict plus a
        # lazily-cleaned deque once prefix hits re-activate many inactive blocks.)
        self.inactive: OrderedDict[int, None] = OrderedDict()
        self.record = record
        self.events: list[int] = []

    # --- queries -------------------------------------------------------------------------------

    @property
    def num_active_blocks(self) -> int:
        """Blocks in use by someone (private, or cached with refs > 0)."""
        return self.total - self.free - len(self.inactive)

    @property
    def available(self) -> int:
        """Blocks obtainable right now: free plus evictable inactive cached blocks."""
        return self.free + len(self.inactive)

    @property
    def private_blocks(self) -> int:
        return self.total - self.free - len(self.refs)

    def match_prefix(self, hashes: Sequence[int], limit: int) -> tuple[int, int, int]:
        """(cached, active_cached, inactive_cached) for ``hashes[:limit]``: how many leading
        blocks are resident, how many leading of those are referenced (free to share), and how
        many of the resident prefix are inactive (acquiring them removes them from the LRU)."""
        refs = self.refs
        n = 0
        active = -1
        zeros = 0
        for i in range(min(limit, len(hashes))):
            v = refs.get(hashes[i], -1)
            if v < 0:
                break
            n += 1
            if v == 0:
                zeros += 1
                if active < 0:
                    active = i
        if active < 0:
            return n, n, 0
        return n, active, zeros

    # --- mutations -----------------------------------------------------------------------------

    def acquire(self, hashes: Sequence[int]) -> None:
        """Take one reference on each resident hash (prefix hit or pin)."""
        if not hashes:
            return
        refs = self.refs
        inactive = self.inactive
        for h in hashes:
            v = refs[h]
            if v == 0:
                del inactive[h]
            refs[h] = v + 1

    def claim(self, hashes: Sequence[int], fresh: int) -> bool:
        """Reference the resident ``hashes`` and take ``fresh`` new blocks, if both fit: the
        fresh blocks may not come from the inactive blocks being re-referenced.  All or
        nothing (False: nothing changed): the fit test runs before anything is touched."""
        refs = self.refs
        reactivated = 0
        for h in hashes:
            if refs[h] == 0:
                reactivated += 1
        if fresh > self.free + len(self.inactive) - reactivated:
            return False
        self.acquire(hashes)
        return self.take(fresh)

    def take(self, n: int) -> bool:
        """Turn ``n`` blocks into private blocks of the caller: free ones first, then evict the
        oldest inactive cached blocks.  All or nothing: False (nothing changed) if impossible."""
        if n <= 0:
            return True
        free = self.free
        if free >= n:
            self.free = free - n
            return True
        inactive = self.inactive
        if free + len(inactive) < n:
            return False
        evicted = list(islice(inactive, n - free))
        refs = self.refs
        for h in evicted:
            del refs[h]
            del inactive[h]
        if self.record:
            self.events.extend([~h for h in evicted if h < PRIVATE_HASH_BASE])
        self.free = 0
        return True

    def give_back(self, n: int) -> None:
        """Return ``n`` private blocks to the free count."""
        self.free += n

    def promote(self, hashes: Sequence[int]) -> list[int]:
        """Private full blocks with these hashes enter the cache, each referenced by its owner.

        Returns the hashes actually inserted, in order; a hash already cached is left out (that
        block stays a private duplicate).
        """
        refs = self.refs
        new: list[int] = []
        for h in hashes:
            if h not in refs:
                new.append(h)
                refs[h] = 1
        if new:
            if self.record and new[0] < PRIVATE_HASH_BASE:
                self.events.extend(new)
        return new

    def release(self, hashes: Sequence[int]) -> None:
        """Drop one reference on each hash, leaves first, so that children become older LRU
        entries than their parents and are evicted before them."""
        if not hashes:
            return
        refs = self.refs
        inactive = self.inactive
        for i in range(len(hashes) - 1, -1, -1):
            h = hashes[i]
            v = refs[h] - 1
            refs[h] = v
            if v == 0:
                inactive[h] = None

    def drain_events(self) -> list[int]:
        events = self.events
        if events:
            self.events = []
        return events

    def check(self) -> None:
        """Assert the pool invariants (tests and debugging)."""
        assert 0 <= self.free <= self.total, self.free
        assert self.private_blocks >= 0, self.private_blocks
        for h, r in self.refs.items():
            assert r >= 0, (h, r)
            assert (r == 0) == (h in self.inactive), (h, r)
        assert len(self.inactive) <= len(self.refs)
