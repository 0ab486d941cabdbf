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
  destination pins).  A cached block with no reference is *inactive*: it stays reusable by
  prefix hits until it is evicted, oldest first, when fresh capacity is needed.

Invariant (checked by the property tests): ``free + private + len(blocks) == total``, and the
inactive blocks are exactly the live entries of the LRU list.  ``private`` is tracked here as
``total - free - len(blocks)``, so owners must return exactly what they took.

Blocks of *generated* tokens enter the cache, when their owner frees them, under ids from
2**59 up (:func:`generated_block_ids`; prompt hashes are below, see
:data:`dmocker.engines.hashing.HASH_BITS`): the reference caches them under hashes of random output
tokens, which nobody can hit, but which take LRU slots and so shape later evictions.

Events: when ``record`` is on, cache insertions and evictions are appended, in order, to
``events`` (a stored hash ``h`` as ``h``, a removed one as ``~h``, which is negative); the owner
drains them with :func:`dmocker.engines.common.kv_events` at its visibility point.

Representation (why it is shaped like this)
-------------------------------------------
A request holds ~200 blocks on long-context traces, and every one of them is promoted, released,
evicted and sometimes re-referenced, so the pool's cost is per block, and on such traces it is
dominated by memory traffic (each touch of a big hash table is a likely cache miss), not by
bytecode.  So each block costs one entry in one dict:

* ``blocks`` maps a hash to its reference count when it is referenced (> 0), or to ``~stamp``
  (< 0) when it is inactive, where ``stamp`` is its position in the LRU list.  A release, a
  prefix hit or an eviction touches that one entry per block (no second table for the LRU, no
  node allocated per inactive block as an ``OrderedDict`` would).
* ``lru`` lists released hashes in release order (oldest first, from ``lru_head`` on); an entry
  is *live* while its hash's value names its position.  A re-referenced block is not removed
  from it, and a released block still referenced by others is appended all the same: those
  entries are stale, eviction skips them.  Release trims the list when evicted and stale
  entries outweigh live ones, so it stays under ``4 * total``.

The per-block steps are plain loops of dict operations that call nothing (no ``append`` or
``get`` per block).  Re-measured on CPython 3.11 over ~200-block lists, such loops are as fast
as or faster than the bulk idioms (``map`` over bound methods, ``dict.update(zip(...))``, which
allocates a tuple per item, ``dict.fromkeys``): the specialising interpreter makes the loop
itself cheap, and what costs is touching hash tables.

Every call takes the hashes of one request (or one pin), which are distinct: chained hashes
include the block position and generated ids are a range.
"""

from __future__ import annotations

from itertools import compress
from operator import eq
from typing import Sequence

from dmocker.engines.hashing import HASH_BITS

__all__ = ["BlockPool", "PRIVATE_HASH_BASE", "generated_block_ids"]

# Ids of blocks holding generated tokens live above every (59-bit) content hash, so they can
# never collide with (or be matched as) a prompt block; they produce no KV events.  Request
# ids below 2**35 keep them under 2**60: two-digit ints, as cheap to hash as prompt hashes.
PRIVATE_HASH_BASE = 1 << HASH_BITS


def generated_block_ids(request_id: int, first: int, stop: int) -> list[int]:
    """Cache ids of a request's generated-token blocks ``first..stop-1`` (block indices).

    The reference caches these under hashes of random output tokens: reachable by nobody, but
    they occupy LRU slots once released, which shapes what is evicted later.
    """
    base = PRIVATE_HASH_BASE + (request_id << 24)
    return list(range(base + first, base + stop))


class BlockPool:
    __slots__ = ("total", "free", "blocks", "lru", "lru_head", "lru_base", "num_inactive",
                 "record", "events")

    def __init__(self, total: int, *, record: bool = False) -> None:
        self.total = total
        self.free = total
        # hash -> reference count (> 0), or ~stamp (< 0) of an inactive block, whose entry is
        # lru[stamp - lru_base]
        self.blocks: dict[int, int] = {}
        self.lru: list[int] = []
        self.lru_head = 0  # entries before it are evicted or stale
        self.lru_base = 0  # stamp of lru[0]
        self.num_inactive = 0
        self.record = record
        self.events: list[int] = []

    # --- queries -------------------------------------------------------------------------------

    @property
    def num_active_blocks(self) -> int:
        """Blocks in use by someone (private, or cached and referenced)."""
        return self.total - self.free - self.num_inactive

    @property
    def available(self) -> int:
        """Blocks obtainable right now: free plus evictable inactive cached blocks."""
        return self.free + self.num_inactive

    @property
    def private_blocks(self) -> int:
        return self.total - self.free - len(self.blocks)

    def ref_count(self, h: int) -> int:
        """References on cached hash ``h`` (0: inactive or not cached)."""
        v = self.blocks.get(h, 0)
        return v if v > 0 else 0

    def ref_counts(self) -> dict[int, int]:
        """Every cached hash with its reference count (0: inactive)."""
        return {h: (v if v > 0 else 0) for h, v in self.blocks.items()}

    def inactive_order(self) -> list[int]:
        """The inactive cached hashes, oldest (next evicted) first."""
        head = self.lru_head
        seg = self.lru[head:]
        s = self.lru_base + head
        return list(compress(seg, map(eq, map(self.blocks.get, seg), range(~s, ~(s + len(seg)), -1))))

    def match_prefix(self, hashes: Sequence[int], limit: int) -> tuple[int, int, int]:
        """(cached, active_cached, inactive_cached) for ``hashes[:limit]``: how many leading
        blocks are resident, how many leading of those are referenced (free to share), and how
        many of the resident prefix are inactive (acquiring them removes them from the LRU)."""
        blocks = self.blocks
        n = 0
        active = -1
        zeros = 0
        for i in range(min(limit, len(hashes))):
            h = hashes[i]
            if h not in blocks:
                break
            n += 1
            if blocks[h] < 0:
                zeros += 1
                if active < 0:
                    active = i
        if active < 0:
            return n, n, 0
        return n, active, zeros

    # --- mutations -----------------------------------------------------------------------------

    def acquire(self, hashes: Sequence[int]) -> None:
        """Take one reference on each resident hash (prefix hit or pin)."""
        blocks = self.blocks
        reactivated = 0
        for h in hashes:
            v = blocks[h]
            if v < 0:
                blocks[h] = 1  # its LRU entry goes stale
                reactivated += 1
            else:
                blocks[h] = v + 1
        self.num_inactive -= reactivated

    def claim(self, hashes: Sequence[int], fresh: int) -> bool:
        """Reference the resident ``hashes`` and take ``fresh`` new blocks, if both fit: the
        fresh blocks may not come from the inactive blocks being re-referenced.  All or
        nothing (False: nothing changed): the fit test runs before anything is touched."""
        if fresh > self.free:  # (free blocks cover it whatever is re-referenced)
            blocks = self.blocks
            reactivated = 0
            for h in hashes:
                if blocks[h] < 0:
                    reactivated += 1
            if fresh > self.free + self.num_inactive - reactivated:
                return False
        if hashes:
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
        if free + self.num_inactive < n:
            return False
        evicted = self._evict(n - free)
        if self.record:
            self.events.extend([~h for h in evicted if h < PRIVATE_HASH_BASE])
        self.free = 0
        return True

    def _evict(self, k: int) -> list[int]:
        """Remove the ``k <= num_inactive`` oldest inactive blocks; their hashes, oldest first.
        The LRU head ends right after the last one evicted."""
        blocks = self.blocks
        lru = self.lru
        i = self.lru_head
        mark = ~(self.lru_base + i)  # the value of lru[i]'s hash while that entry is live
        evicted = [0] * k
        j = 0
        while j < k:
            h = lru[i]
            if h in blocks and blocks[h] == mark:
                del blocks[h]
                evicted[j] = h
                j += 1
            i += 1
            mark -= 1
        self.lru_head = i
        self.num_inactive -= k
        return evicted

    def take_undoable(self, n: int) -> tuple[int, list[int]]:
        """:meth:`take` of ``n <= available`` blocks (no events recorded), returning what
        :meth:`untake` needs: the free count before and the evicted hashes, oldest first."""
        free = self.free
        if free >= n:
            self.free = free - n
            return free, []
        evicted = self._evict(n - free)
        self.free = 0
        return free, evicted

    def untake(self, free_before: int, evicted: list[int], taken: int, keep: int) -> list[int]:
        """Turn ``take_undoable(taken)`` into ``take(keep)`` (``keep <= taken``, nothing else
        changed the pool since): blocks evicted beyond what ``keep`` needs become the oldest
        inactive cached blocks again, in their order.  Returns the hashes still evicted."""
        still = max(keep - free_before, 0)
        restore = evicted[still:]
        self.free += taken - keep - len(restore)
        if restore:
            # Their LRU entries are still in place, before the head: walking back from it, a
            # hash's first entry is its newest, the one it was evicted from.
            blocks = self.blocks
            lru = self.lru
            pos = self.lru_head - 1
            base = self.lru_base
            for h in reversed(restore):
                while lru[pos] != h:
                    pos -= 1
                blocks[h] = ~(base + pos)
                pos -= 1
            self.lru_head = pos + 1
            self.num_inactive += len(restore)
        return evicted[:still]

    def give_back(self, n: int) -> None:
        """Return ``n`` private blocks to the free count."""
        self.free += n

    def promote(self, hashes: Sequence[int]) -> list[int]:
        """Private full blocks with these hashes enter the cache, each referenced by its owner.

        Returns the hashes actually inserted, in order; a hash already cached is left out (that
        block stays a private duplicate).
        """
        blocks = self.blocks
        new = [h for h in hashes if h not in blocks]
        for h in new:
            blocks[h] = 1
        if new and self.record and new[0] < PRIVATE_HASH_BASE:
            self.events.extend(new)
        return new

    def release(self, hashes: Sequence[int]) -> None:
        """Drop one reference on each hash, leaves first, so that children become older LRU
        entries than their parents and are evicted before them."""
        if not hashes:
            return
        # Every hash gets the next LRU position (so the loop makes no calls); those still
        # referenced keep their count, which makes their new entry stale at once.
        blocks = self.blocks
        lru = self.lru
        rev = hashes[::-1]
        mark = ~(self.lru_base + len(lru))
        freed = 0
        for h in rev:
            v = blocks[h]
            if v == 1:
                blocks[h] = mark
                freed += 1
            else:
                blocks[h] = v - 1
            mark -= 1
        lru += rev
        self.num_inactive += freed
        if len(lru) > 2 * self.num_inactive + self.total:
            self._trim()

    def _trim(self) -> None:
        """Drop evicted and stale LRU entries: the evicted prefix by moving the base, the stale
        ones (if they still dominate) by rebuilding the list and re-stamping its live entries."""
        lru = self.lru
        head = self.lru_head
        if head:
            del lru[:head]
            self.lru_base += head
            self.lru_head = 0
        if len(lru) > 2 * self.num_inactive + self.total // 2:
            live = self.inactive_order()
            lru[:] = live
            self.lru_base = 0
            blocks = self.blocks
            mark = -1
            for h in live:
                blocks[h] = mark
                mark -= 1

    def drain_events(self) -> list[int]:
        events = self.events
        if events:
            self.events = []
        return events

    def check(self) -> None:
        """Assert the pool invariants (tests and debugging)."""
        assert 0 <= self.free <= self.total, self.free
        assert self.private_blocks >= 0, self.private_blocks
        lru, head, base = self.lru, self.lru_head, self.lru_base
        inactive = 0
        for h, v in self.blocks.items():
            assert v != 0, h
            if v < 0:
                inactive += 1
                i = ~v - base
                assert head <= i < len(lru) and lru[i] == h, (h, v, head, base)
        assert inactive == self.num_inactive, (inactive, self.num_inactive)
        assert len(lru) <= 4 * self.total, (len(lru), self.total)
