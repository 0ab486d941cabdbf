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
inactive blocks are exactly the blocks of the runs listed in the LRU list.  ``private`` is
tracked here as ``total - free - len(blocks)``, so owners must return exactly what they took
(and release only references they hold).

Blocks of *generated* tokens enter the cache, when their owner frees them, under ids from
2**59 up (:func:`generated_block_ids`; prompt hashes are below, see
:data:`dmocker.engines.hashing.HASH_BITS`): the reference caches them under hashes of random output
tokens, which nobody can hit, but which take LRU slots and so shape later evictions.

Events: when ``record`` is on, cache insertions and evictions are appended, in order, to
``events`` as chunks, one per call that changed the cache: ``(True, hashes)`` stored by a
promote, ``(False, hashes)`` evicted by a take (prompt hashes only, never empty).  The owner
drains them and :func:`dmocker.engines.common.kv_events` merges neighbouring chunks of one kind
into KV events at its visibility point: a chunk is the tuple the event carries, so no hash is
touched one by one on the way (a Mooncake replay records millions of changes).

Representation (why it is shaped like this)
-------------------------------------------
A Mooncake prompt is hundreds of blocks, and the pool used to keep one dict entry per block whose
value was rewritten on every release and re-reference (a reference count, or an LRU stamp: a
fresh int per block), with an eviction walk that looked every block up three times.  On such
traces those per-block hash-table writes (each a likely cache miss) made the pool close to half
of a vLLM replay.  But blocks move in runs: a request promotes its new blocks together, releases
all it holds together, and is hit on a prefix.  So the pool keeps per-block state only where a
hash must be found, and everything else per **run**:

* A :class:`_Run` is a list of cached hashes that share their holders (so one reference count)
  and, while inactive, one LRU entry; its hashes are ordered so that the last ones are evicted
  first (a request's blocks in chain order, leaves last).
* ``blocks`` maps each cached hash to its run.  It is written when a block enters the cache
  (``promote``: ``setdefault`` tells a duplicate and inserts in one dict operation), when it
  is evicted (one delete) and when a run is split (below); never by a release or a prefix hit
  that takes whole runs.
* ``lru`` lists inactive runs, oldest first, from ``lru_head``; a run's position is its
  ``stamp``, an entry leaving (re-referenced, evicted to nothing) becomes ``None``.  Eviction
  takes whole runs from the head and cuts the tail off the last one; releasing appends the runs
  that reach zero references, last-held first, so a request's leaves still go before its roots.

Operations that take a list of hashes (``release``, ``acquire``, ``claim``, ``match_prefix``)
walk it run by run: the run of the next hash is looked up once and the stretch of the list that
continues it is found by comparing list slices (C-level, no dict).  A run only partly covered by
the stretch (someone shares a prefix of it, or the list interleaves it with another run) is
first split (:meth:`BlockPool._carve`, rewriting the dict entries of the smaller part), just
before its piece is re-referenced or released; splitting changes the grouping, not what is
cached, so results, LRU order and events are those of the plain per-block model (the stateful
test runs both side by side).  On the Mooncake trace (vLLM 4P+4D) a released or re-referenced
list spans ~2 runs of ~50 blocks, and splits are rare (~130 per pool over the whole trace).

Measured on a recorded call sequence of two of that replay's pools (every call, replayed alone):
0.53 s against 1.19 s for the per-block dict, and 0.64 s against 0.88 s on the four pools of
the 10k synthetic workload (shorter prompts, more sharing).  What remains is one dict insert
per promoted block and one delete per evicted block.  A numpy variant (per-slot reference
counts and stamps, a hash -> slot dict, vectorised release and eviction) was slower than the
per-block dict: every call still converts its hashes object by object, and each numpy
operation costs about a microsecond, a dozen of them per call.

Every call takes the hashes of one request (or one pin), which are distinct: chained hashes
include the block position and generated ids are a range.
"""

from __future__ import annotations

from itertools import repeat
from typing import Sequence, TypeAlias

from dmocker.engines.hashing import HASH_BITS

__all__ = ["BlockPool", "KvChunk", "PRIVATE_HASH_BASE", "generated_block_ids"]

# Ids of blocks holding generated tokens live above every (59-bit) content hash, so they can
# never collide with (or be matched as) a prompt block; they produce no KV events.  Request
# ids below 2**35 keep them under 2**60: two-digit ints, as cheap to hash as prompt hashes.
PRIVATE_HASH_BASE = 1 << HASH_BITS
_IS_PROMPT = PRIVATE_HASH_BASE.__gt__  # h < PRIVATE_HASH_BASE: a prompt block's hash

#: One recorded cache change: (True, hashes stored) or (False, hashes evicted), in order.
KvChunk: TypeAlias = tuple[bool, tuple[int, ...]]


def generated_block_ids(request_id: int, first: int, stop: int) -> list[int]:
    """Cache ids of a request's generated-token blocks ``first..stop-1`` (block indices).

    The reference caches these under hashes of random output tokens: reachable by nobody, but
    they occupy LRU slots once released, which shapes what is evicted later.
    """
    base = PRIVATE_HASH_BASE + (request_id << 24)
    return list(range(base + first, base + stop))


class _Run:
    """Cached blocks that share their reference count and LRU fate (see the module docstring)."""

    __slots__ = ("keys", "refs", "stamp")

    def __init__(self, keys: list[int], refs: int, stamp: int = -1) -> None:
        self.keys = keys  # evicted from the end
        self.refs = refs
        self.stamp = stamp  # absolute LRU position while inactive and listed, else -1


def _common(a: list[int], i: int, b: list[int], p: int, n: int) -> int:
    """Length of the common prefix of ``a[i:i+n]`` and ``b[p:p+n]``, given ``a[i] == b[p]``
    (slice comparisons: a binary search over the part not yet known equal)."""
    if a[i:i + n] == b[p:p + n]:
        return n
    lo, hi = 1, n - 1  # a[i:i+lo] == b[p:p+lo]; the common prefix is at most hi
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if a[i + lo:i + mid] == b[p + lo:p + mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


class BlockPool:
    __slots__ = ("total", "free", "blocks", "lru", "lru_head", "lru_base", "listed",
                 "num_inactive", "record", "events")

    def __init__(self, total: int, *, record: bool = False) -> None:
        self.total = total
        self.free = total
        self.blocks: dict[int, _Run] = {}  # cached hash -> its run
        self.lru: list[_Run | None] = []  # inactive runs, oldest first; None: left
        self.lru_head = 0  # entries before it are None
        self.lru_base = 0  # stamp of lru[0]
        self.listed = 0  # runs in the LRU list (its entries that are not None)
        self.num_inactive = 0  # blocks in inactive runs
        self.record = record
        self.events: list[KvChunk] = []  # (stored?, hashes) per change, in order

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
        run = self.blocks.get(h)
        return 0 if run is None else run.refs

    def ref_counts(self) -> dict[int, int]:
        """Every cached hash with its reference count (0: inactive)."""
        return {h: run.refs for h, run in self.blocks.items()}

    def inactive_order(self) -> list[int]:
        """The inactive cached hashes, oldest (next evicted) first."""
        out: list[int] = []
        for run in self.lru[self.lru_head:]:
            if run is not None:
                out += reversed(run.keys)
        return out

    def match_prefix(self, hashes: Sequence[int], limit: int) -> tuple[int, int, int]:
        """(cached, active_cached, inactive_cached) for ``hashes[:limit]``: how many leading
        blocks are resident, how many leading of those are referenced (free to share), and how
        many of the resident prefix are inactive (acquiring them removes them from the LRU)."""
        blocks = self.blocks
        n = min(limit, len(hashes))
        hs = hashes if isinstance(hashes, list) else list(hashes[:n])
        i = 0
        active = -1
        zeros = 0
        while i < n:
            h = hs[i]
            run = blocks.get(h)
            if run is None:
                break
            keys = run.keys
            m = len(keys)
            if keys[0] != h or i + m > n or hs[i:i + m] != keys:  # (else all of the run matches)
                p = 0 if keys[0] == h else keys.index(h)
                m = _common(hs, i, keys, p, min(m - p, n - i))
            if not run.refs:
                zeros += m
                if active < 0:
                    active = i
            i += m
        if active < 0:
            return i, i, 0
        return i, active, zeros

    # --- runs ----------------------------------------------------------------------------------

    def _pieces(self, hashes: Sequence[int]) -> list[_Run]:
        """The runs covering ``hashes`` (all cached), split so that each is a stretch of the
        list in its own order: the list is their concatenation."""
        blocks = self.blocks
        hs = hashes if isinstance(hashes, list) else list(hashes)
        n = len(hs)
        out: list[_Run] = []
        i = 0
        while i < n:
            h = hs[i]
            run = blocks[h]
            keys = run.keys
            if keys[0] == h:
                L = len(keys)
                if hs[i:i + L] == keys:
                    out.append(run)
                    i += L
                    continue
                p = 0
            else:
                p = keys.index(h)
            m = _common(hs, i, keys, p, min(len(keys) - p, n - i))
            out.append(self._carve(run, p, m))
            i += m
        return out

    def _carve(self, run: _Run, p: int, m: int) -> _Run:
        """Split ``run.keys[p:p+m]`` off as a run of its own (same references), returned; the
        rest stays one run and keeps the LRU entry if it has one (so an inactive piece is
        unlisted: the caller re-references it).  The dict entries of the smaller part are
        rewritten."""
        keys = run.keys
        if p == 0 and m == len(keys):
            return run
        piece = keys[p:p + m]
        rest = keys[:p] + keys[p + m:]
        if m <= len(rest):
            run.keys = rest
            new = _Run(piece, run.refs)
            self.blocks.update(zip(piece, repeat(new)))
            return new
        run.keys = piece
        new = _Run(rest, run.refs, run.stamp)
        if run.stamp >= 0:
            self.lru[run.stamp - self.lru_base] = new
            run.stamp = -1
        self.blocks.update(zip(rest, repeat(new)))
        return run

    # --- mutations -----------------------------------------------------------------------------

    def acquire(self, hashes: Sequence[int]) -> None:
        """Take one reference on each resident hash (prefix hit or pin)."""
        if hashes:
            self._acquire(self._pieces(hashes))

    def _acquire(self, pieces: list[_Run]) -> None:
        lru, base = self.lru, self.lru_base
        for run in pieces:
            if not run.refs:
                self.num_inactive -= len(run.keys)
                if run.stamp >= 0:
                    lru[run.stamp - base] = None
                    run.stamp = -1
                    self.listed -= 1
            run.refs += 1

    def claim(self, hashes: Sequence[int], fresh: int) -> bool:
        """Reference the resident ``hashes`` and take ``fresh`` new blocks, if both fit: the
        fresh blocks may not come from the inactive blocks being re-referenced.  All or
        nothing (False: nothing changed): the fit test runs before anything is touched
        (before runs are split too: an inactive run split off is no longer listed)."""
        if hashes:
            # (free blocks cover it whatever is re-referenced; the hashes are all resident, so
            # match_prefix counts the inactive ones)
            if fresh > self.free:
                reactivated = self.match_prefix(hashes, len(hashes))[2]
                if fresh > self.free + self.num_inactive - reactivated:
                    return False
            self._acquire(self._pieces(hashes))
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
            gone = tuple(filter(_IS_PROMPT, evicted))  # generated blocks produce no events
            if gone:
                self.events.append((False, gone))
        self.free = 0
        return True

    def _evict(self, k: int) -> list[int]:
        """Remove the ``k <= num_inactive`` oldest inactive blocks; their hashes, oldest first:
        whole runs from the LRU head, then the tail of the next one."""
        lru = self.lru
        blocks = self.blocks
        head = self.lru_head
        evicted: list[int] = []
        left = k
        while left:
            run = lru[head]
            if run is None:
                head += 1
                continue
            keys = run.keys
            L = len(keys)
            if L <= left:
                gone = keys
                run.keys = []
                run.stamp = -1
                lru[head] = None
                head += 1
                self.listed -= 1
            else:
                gone = keys[L - left:]
                del keys[L - left:]
            left -= len(gone)
            gone.reverse()
            evicted += gone
            for h in gone:
                del blocks[h]
        self.lru_head = head
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
        inactive cached blocks again, in their order (one run at the LRU head).  Returns the
        hashes still evicted."""
        still = max(keep - free_before, 0)
        restore = evicted[still:]
        self.free += taken - keep - len(restore)
        if restore:
            keys = list(reversed(restore))  # evicted from the end: oldest first
            head = self.lru_head
            if head:
                head -= 1
            else:
                self.lru.insert(0, None)
                self.lru_base -= 1
            run = _Run(keys, 0, self.lru_base + head)
            self.lru[head] = run
            self.lru_head = head
            self.listed += 1
            self.blocks.update(zip(keys, repeat(run)))
            self.num_inactive += len(keys)
        return evicted[:still]

    def give_back(self, n: int) -> None:
        """Return ``n`` private blocks to the free count."""
        self.free += n

    def promote(self, hashes: Sequence[int]) -> list[int]:
        """Private full blocks with these hashes enter the cache, each referenced by its owner.

        Returns the hashes actually inserted, in order; a hash already cached is left out (that
        block stays a private duplicate).  They form one new run.
        """
        run = _Run([], 1)
        blocks = self.blocks
        if blocks.keys().isdisjoint(hashes):
            # The usual case (callers pass what lies past their cached prefix): two C-level
            # loops, no call per block; the same entries in the same order as below.
            blocks.update(zip(hashes, repeat(run)))
            new = list(hashes)
        else:
            insert = blocks.setdefault  # one dict operation per block: present, or inserted
            new = [h for h in hashes if insert(h, run) is run]
        if new:
            run.keys = new[:]
            if self.record and new[0] < PRIVATE_HASH_BASE:
                self.events.append((True, tuple(new)))
        return new

    def release(self, hashes: Sequence[int]) -> None:
        """Drop one reference on each hash, leaves first, so that children become older LRU
        entries than their parents and are evicted before them: the runs of ``hashes`` that
        reach zero are appended to the LRU last first."""
        if not hashes:
            return
        pieces = self._pieces(hashes)
        lru = self.lru
        stamp0 = stamp = self.lru_base + len(lru)
        freed = 0
        for run in reversed(pieces):
            refs = run.refs - 1
            run.refs = refs
            if not refs:
                run.stamp = stamp
                stamp += 1
                lru.append(run)
                freed += len(run.keys)
        self.num_inactive += freed
        self.listed += stamp - stamp0
        if len(lru) > 2 * self.listed + 64:
            self._trim()

    def _trim(self) -> None:
        """Rebuild the LRU list from its runs (dropping the entries that left) and re-stamp
        them; called when those entries outnumber the runs, so it stays under ``2 * listed +
        64`` entries at amortised constant cost."""
        live: list[_Run | None] = [run for run in self.lru if run is not None]
        self.lru = live
        self.lru_head = 0
        self.lru_base = 0
        for i, run in enumerate(live):
            assert run is not None
            run.stamp = i

    def drain_events(self) -> list[KvChunk]:
        events = self.events
        if events:
            self.events = []
        return events

    def check(self) -> None:
        """Assert the pool invariants (tests and debugging)."""
        assert 0 <= self.free <= self.total, self.free
        assert self.private_blocks >= 0, self.private_blocks
        lru, head, base = self.lru, self.lru_head, self.lru_base
        assert all(run is None for run in lru[:head])
        inactive = 0
        runs: dict[int, _Run] = {}
        for h, run in self.blocks.items():
            runs[id(run)] = run
        for run in runs.values():
            assert run.keys and run.refs >= 0, (run.keys, run.refs)
            assert all(self.blocks[h] is run for h in run.keys), run.keys
            if run.refs:
                assert run.stamp == -1, run.stamp
            else:
                inactive += len(run.keys)
                assert head <= run.stamp - base < len(lru) and lru[run.stamp - base] is run
        listed = [run for run in lru[head:] if run is not None]
        assert len(listed) == len({id(run) for run in listed})
        assert all(runs.get(id(run)) is run and not run.refs for run in listed)
        assert inactive == self.num_inactive == sum(len(run.keys) for run in listed)
        assert len(listed) == self.listed, (len(listed), self.listed)
