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

Runs (:mod:`dmocker.engines.block_runs` says why): cached blocks are kept in runs that share a
reference count and an LRU entry, indexed by their first hash (``starts``).  ``lru`` lists the
inactive runs, oldest first, from ``lru_head``; a run's position is its ``stamp``, an entry
leaving (re-referenced, evicted to nothing) becomes ``None``.  Eviction takes whole runs from the
head and cuts the tail off the last one; releasing appends the runs that reach zero references,
last-held first, so a request's leaves still go before its roots.  ``untake`` puts evicted
blocks back in front, one run per run they came from.

What callers pass (the runs' contract: a hash names its whole prefix, and every list is a
stretch of its chain, in chain order, walked from a known point): ``match_prefix``, ``claim``
and ``acquire`` take a chain prefix (from the chain's first block); ``release`` takes what the
caller holds, in chain order: its hit prefix, the blocks its promotes inserted (gaps where it
had duplicates: the block after a gap started a run when it was promoted) and its generated
ids; ``promote`` takes the chain and the range ``[lo, hi)``.  Duplicate detection is the subtle
case: a cached block in the range continues the run of the block before it or starts a run, and
the block before the range ends its run when the caller holds it (it hit or promoted it, and
runs never grow) -- then a lookup of each promoted hash in ``starts`` finds every duplicate; if
the caller's block before the range was a duplicate (``held=False``), its cached copy may sit
inside another request's run that goes on into the range, so the pool first walks the chain up
to ``lo``.  A stretch of a released or re-referenced list only partly covering a run (someone
shares a prefix of it) first splits it (:meth:`BlockPool._carve`, one new start for the rest),
just before its piece is re-referenced or released; splitting changes the grouping, not what is
cached, so results, LRU order and events are those of the plain per-block model (the stateful
test runs both side by side, on a tree of chains, and checks that every run is a chain stretch).

Every call takes the hashes of one request (or one pin), which are distinct: chained hashes
include the block position and generated ids are a range.
"""

from __future__ import annotations

from itertools import repeat
from typing import Final, Sequence, TypeAlias, cast

from dmocker.engines.block_runs import ObjList, Run, common_prefix, locate, none_started, step, stretches
from dmocker.engines.hashing import HASH_BITS

__all__ = ["BlockPool", "KvChunk", "PRIVATE_HASH_BASE", "generated_block_ids", "holds_before"]

# Ids of blocks holding generated tokens live above every (59-bit) content hash, so they can
# never collide with (or be matched as) a prompt block; they produce no KV events.  Request
# ids below 2**35 keep them under 2**60, ints of the same size as prompt hashes.
PRIVATE_HASH_BASE: Final = 1 << HASH_BITS

#: One recorded cache change: (True, hashes stored) or (False, hashes evicted), in order.
KvChunk: TypeAlias = tuple[bool, tuple[int, ...]]


def generated_block_ids(request_id: int, first: int, stop: int) -> list[int]:
    """Cache ids of a request's generated-token blocks ``first..stop-1`` (block indices).

    The reference caches these under hashes of random output tokens: reachable by nobody, but
    they occupy LRU slots once released, which shapes what is evicted later.
    """
    base = PRIVATE_HASH_BASE + (request_id << 24)
    return [base + b for b in range(first, stop)]


_STAMP0 = 1 << 32  # LRU stamps start here, so the entries untake prepends keep stamps >= 0


def holds_before(held: list[int], chain: list[int], lo: int) -> bool:
    """Whether a caller holding the cached blocks ``held`` (in chain order) holds the block just
    before ``chain[lo:]`` (or ``lo`` is 0): :meth:`BlockPool.promote`'s ``held``."""
    return not lo or (bool(held) and held[-1] == chain[lo - 1])


class BlockPool:
    __slots__ = ("total", "free", "starts", "num_cached", "lru", "lru_head", "lru_base", "listed",
                 "num_inactive", "record", "events", "_undo")

    def __init__(self, total: int, *, record: bool = False) -> None:
        self.total = total
        self.free = total
        self.starts: dict[object, Run] = {}  # first hash of each run -> the run (int keys)
        self.num_cached = 0  # cached blocks (in all runs)
        self.lru: list[Run | None] = []  # inactive runs, oldest first; None: left
        self.lru_head = 0  # entries before it are None
        self.lru_base = _STAMP0  # stamp of lru[0] (lowered when untake prepends)
        self.listed = 0  # runs in the LRU list (its entries that are not None)
        self.num_inactive = 0  # blocks in inactive runs
        self.record = record
        self.events: list[KvChunk] = []  # (stored?, hashes) per change, in order
        self._undo: list[int] = []  # run lengths of the last take_undoable's evicted list

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
        return self.total - self.free - self.num_cached

    def ref_counts(self) -> dict[int, int]:
        """Every cached hash with its reference count (0: inactive)."""
        return {h: run.refs for run in self.starts.values() for h in run.keys}

    def refs_of(self, hashes: list[int]) -> list[int]:
        """The reference count of each hash of a list the caller holds (all cached, a list it
        could :meth:`release`), in order."""
        out: list[int] = []
        runs, lengths = stretches(self.starts, hashes)
        for run, m in zip(runs, lengths):
            out += repeat(run.refs, m)
        return out

    def inactive_order(self) -> list[int]:
        """The inactive cached hashes, oldest (next evicted) first."""
        out: list[int] = []
        for run in self.lru[self.lru_head:]:
            if run is not None:
                out += reversed(run.keys)
        return out

    def match_prefix(self, hashes: list[int], limit: int) -> tuple[int, int, int]:
        """(cached, active_cached, inactive_cached) for ``hashes[:limit]`` (a chain from its
        first block): how many leading blocks are resident, how many leading of those are
        referenced (free to share), and how many of the resident prefix are inactive (acquiring
        them removes them from the LRU)."""
        starts = self.starts
        objs = cast(ObjList, hashes)
        n = min(limit, len(hashes))
        i = 0
        active = -1
        zeros = 0
        while i < n:
            # a stretch of the chain starts a run (the module docstring says why)
            run = starts.get(objs[i])
            if run is None:
                break
            keys = run.keys
            m = len(keys)
            if i + m > n or hashes[i + m - 1] != keys[m - 1]:  # (else all of the run matches)
                m = common_prefix(hashes, i, keys, 0, min(m, n - i))
            if not run.refs:
                zeros += m
                if active < 0:
                    active = i
            i += m
        if active < 0:
            return i, i, 0
        return i, active, zeros

    # --- runs ----------------------------------------------------------------------------------

    def _pieces(self, hashes: list[int]) -> list[Run]:
        """The runs covering ``hashes`` (all cached; a list the caller holds or a cached chain
        prefix), split so that each is a stretch of the list: the list is their concatenation.
        Each stretch starts a run (the module docstring says why; a KeyError otherwise)."""
        runs, lengths = stretches(self.starts, hashes)
        return self._carved(runs, lengths)

    def _carved(self, runs: list[Run], lengths: list[int]) -> list[Run]:
        """``runs`` with each run the list leaves early split there (so each run is its
        stretch), in place.  Carving a run adds the start of its rest, which the list diverges
        from (or has ended at), so the list's other stretches are unaffected."""
        for k, run in enumerate(runs):
            if lengths[k] != len(run.keys):
                runs[k] = self._carve(run, lengths[k])
        return runs

    def _carve(self, run: Run, m: int) -> Run:
        """Split ``run`` after its first ``m`` blocks: ``run`` keeps them (and its start, so no
        dict entry changes) and is returned, unlisted (the caller re-references or releases
        it); the rest becomes a run of its own (same references, one new start) that takes
        over the LRU entry if there is one."""
        keys = run.keys
        rest = Run(keys[m:], run.refs, run.stamp)
        del keys[m:]
        if run.stamp >= 0:
            self.lru[run.stamp - self.lru_base] = rest
            run.stamp = -1
        self.starts[cast(ObjList, rest.keys)[0]] = rest
        return run

    # --- mutations -----------------------------------------------------------------------------

    def acquire(self, hashes: list[int]) -> None:
        """Take one reference on each resident hash of a chain prefix (prefix hit or pin)."""
        if hashes:
            self._acquire(self._pieces(hashes))

    def _acquire(self, pieces: list[Run]) -> None:
        lru, base = self.lru, self.lru_base
        for run in pieces:
            if not run.refs:
                self.num_inactive -= len(run.keys)
                if run.stamp >= 0:
                    lru[run.stamp - base] = None
                    run.stamp = -1
                    self.listed -= 1
            run.refs += 1

    def claim(self, hashes: list[int], fresh: int) -> bool:
        """Reference the resident chain prefix ``hashes`` and take ``fresh`` new blocks, if both
        fit: the fresh blocks may not come from the inactive blocks being re-referenced.  All or
        nothing (False: nothing changed): the fit test runs before anything is touched
        (before runs are split too: an inactive run split off is no longer listed)."""
        if hashes:
            runs, lengths = stretches(self.starts, hashes)
            if fresh > self.free:  # (free blocks cover it whatever is re-referenced)
                reactivated = 0
                for run, m in zip(runs, lengths):
                    if not run.refs:
                        reactivated += m
                if fresh > self.free + self.num_inactive - reactivated:
                    return False
            self._acquire(self._carved(runs, lengths))
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
        if self.record:
            evicted: list[int] = []
            self._evict(n - free, evicted, None, True)  # generated blocks produce no events
            if evicted:
                self.events.append((False, tuple(evicted)))
        else:
            self._evict(n - free, None, None)
        self.free = 0
        return True

    def _evict(self, k: int, evicted: list[int] | None, lengths: list[int] | None,
               prompt_only: bool = False) -> None:
        """Remove the ``k <= num_inactive`` oldest inactive blocks: whole runs from the LRU head,
        then the tail of the next one.  Their hashes, oldest first, are appended to ``evicted``
        (with ``prompt_only``, those of prompt blocks only) and the length of each run's part of
        them to ``lengths`` (if given).  A run is a stretch of one chain, and a chain is either
        a prompt's hashes or a request's generated ids (``promote``'s callers), so its first
        key tells which all of its keys are."""
        lru = self.lru
        starts = self.starts
        head = self.lru_head
        left = k
        while left:
            run = lru[head]
            if run is None:
                head += 1
                continue
            keys = run.keys
            L = len(keys)
            if L <= left:
                del starts[cast(ObjList, keys)[0]]
                run.keys = []
                run.stamp = -1
                lru[head] = None
                head += 1
                self.listed -= 1
                if evicted is not None and not (prompt_only and keys[0] >= PRIVATE_HASH_BASE):
                    evicted.extend(keys[::-1])  # (a reversed copy: one C loop, no iterator)
                if lengths is not None:
                    lengths.append(L)
                left -= L
            else:
                if evicted is not None and not (prompt_only and keys[0] >= PRIVATE_HASH_BASE):
                    evicted.extend(keys[:L - left - 1:-1])
                if lengths is not None:
                    lengths.append(left)
                del keys[L - left:]
                left = 0
        self.lru_head = head
        self.num_inactive -= k
        self.num_cached -= k

    def take_undoable(self, n: int) -> tuple[int, list[int]]:
        """:meth:`take` of ``n <= available`` blocks (no events recorded), returning what
        :meth:`untake` needs: the free count before and the evicted hashes, oldest first."""
        free = self.free
        self._undo = []
        if free >= n:
            self.free = free - n
            return free, []
        evicted: list[int] = []
        self._evict(n - free, evicted, self._undo)
        self.free = 0
        return free, evicted

    def untake(self, free_before: int, evicted: Sequence[int], taken: int, keep: int) -> list[int]:
        """Turn ``take_undoable(taken)`` into ``take(keep)`` (``keep <= taken``, nothing else
        changed the pool since): blocks evicted beyond what ``keep`` needs become the oldest
        inactive cached blocks again, in their order (each run's part as a run of its own, at
        the LRU head).  Returns the hashes still evicted; with them, ``untake`` may be called
        again (a bulk run cut twice)."""
        still = max(keep - free_before, 0)
        n = len(evicted)
        self.free += taken - keep - (n - still if n > still else 0)
        if n > still:
            lengths = self._undo
            assert sum(lengths) == n, "untake after another change"
            runs: list[Run] = []
            end = n
            for L in reversed(lengths):  # newest evicted first
                a = max(end - L, still)
                keys = list(evicted[a:end])
                keys.reverse()  # evicted from the end: oldest first
                runs.append(Run(keys, 0))
                end = a
                if end == still:
                    break
            runs.reverse()  # oldest (next evicted) first
            k = len(runs)
            head = self.lru_head
            if head < k:
                if self.lru_base < k:  # (stamps stay >= 0: -1 means unlisted)
                    self._trim(k)
                pad = k - self.lru_head
                self.lru[0:0] = [None] * pad
                self.lru_base -= pad
                head = k
            head -= k
            stamp = self.lru_base + head
            starts = self.starts
            for j, run in enumerate(runs):
                run.stamp = stamp + j
                self.lru[head + j] = run
                starts[cast(ObjList, run.keys)[0]] = run
            self.lru_head = head
            self.listed += k
            self.num_inactive += n - still
            self.num_cached += n - still
        rest: list[int] = []  # the run lengths of what stays evicted, for a further untake
        left = still
        for L in self._undo:
            if left <= 0:
                break
            rest.append(min(L, left))
            left -= L
        self._undo = rest
        return list(evicted[:still])

    def give_back(self, n: int) -> None:
        """Return ``n`` private blocks to the free count."""
        self.free += n

    def promote(self, chain: list[int], lo: int = 0, hi: int | None = None,
                held: bool = True) -> list[int]:
        """Private full blocks with hashes ``chain[lo:hi]`` enter the cache, each referenced by
        its owner.  ``chain`` is the caller's hash chain from its first block (or a request's
        generated ids, a chain of their own); ``held`` says that ``chain[lo - 1]`` (if
        ``lo``) is one the caller holds cached, so that no run continues past it: if not (it
        was a duplicate), the pool walks ``chain[:lo]`` to find where it is cached.

        Returns the hashes actually inserted, in order; a hash already cached is left out (that
        block stays a private duplicate).  They form new runs, split where duplicates were.
        """
        # a new list (runs keep it); two branches so that each slice has int bounds, which
        # the compiled build slices directly
        hs = chain[lo:] if hi is None else chain[lo:hi]
        if not hs:
            return hs
        starts = self.starts
        objs = cast(ObjList, hs)
        if (held or not lo) and none_started(objs, starts):
            # The usual case: nothing in range starts a run and the block before ends one (or
            # is not cached), so nothing in range is cached (module docstring).
            starts[objs[0]] = Run(hs, 1)
            self.num_cached += len(hs)
            if self.record and hs[0] < PRIVATE_HASH_BASE:
                self.events.append((True, tuple(hs)))
            return hs[:]
        # Walk the range, knowing where the block before it is cached (if so): a cached block
        # continues the run of the one before it, or starts a run.
        run: Run | None = None
        p = 0  # run.keys[p] is the block before position i
        if lo and not held:
            run, p = locate(starts, chain, lo)
        n = len(hs)
        new: list[int] = []
        i = 0
        while i < n:
            run, p, m = step(starts, hs, i, n, run, p)
            if m:  # cached: a duplicate stretch
                i += m
                continue
            j = i + 1
            while j < n and objs[j] not in starts:
                j += 1
            keys = hs[i:j]
            new += keys
            starts[objs[i]] = Run(keys, 1)  # (it was no run's start: it was not cached)
            i = j
        self.num_cached += len(new)
        if new and self.record and new[0] < PRIVATE_HASH_BASE:
            self.events.append((True, tuple(new)))
        return new

    def release(self, hashes: list[int]) -> None:
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

    def _trim(self, low: int = 0) -> None:
        """Rebuild the LRU list from its runs (dropping the entries that left) and re-stamp
        them; called when those entries outnumber the runs, so it stays under ``2 * listed +
        64`` entries at amortised constant cost.  Stamps restart at ``_STAMP0`` (at least
        ``low``)."""
        live: list[Run | None] = [run for run in self.lru if run is not None]
        self.lru = live
        self.lru_head = 0
        self.lru_base = base = max(_STAMP0, low)
        for i, run in enumerate(live, base):
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
        cached: set[int] = set()
        for h, run in self.starts.items():
            assert run.keys and run.keys[0] == h and run.refs >= 0, (h, run.keys, run.refs)
            assert cached.isdisjoint(run.keys), run.keys
            cached.update(run.keys)
            if run.refs:
                assert run.stamp == -1, run.stamp
            else:
                inactive += len(run.keys)
                assert head <= run.stamp - base < len(lru) and lru[run.stamp - base] is run
        assert len(cached) == self.num_cached, (len(cached), self.num_cached)
        listed = [run for run in lru[head:] if run is not None]
        assert len(listed) == len({id(run) for run in listed})
        assert all(self.starts.get(run.keys[0]) is run and not run.refs for run in listed)
        assert inactive == self.num_inactive == sum(len(run.keys) for run in listed)
        assert len(listed) == self.listed, (len(listed), self.listed)
