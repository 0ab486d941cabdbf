"""Block pool: conservation, no negative refs, prefix matching, LRU eviction order."""

from __future__ import annotations

from collections import OrderedDict

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from dmocker.engines import block_pool
from dmocker.engines.block_pool import PRIVATE_HASH_BASE, BlockPool, generated_block_ids
from dmocker.engines.common import blocks_freed


def _drained(p: BlockPool) -> list[int]:
    """The pool's drained change chunks as one list: a stored hash ``h`` as ``h``, an evicted
    one as ``~h`` (negative); a chunk is never empty."""
    chunks = p.drain_events()
    assert all(hashes for _stored, hashes in chunks)
    return [h if stored else ~h for stored, hashes in chunks for h in hashes]


def test_lru_evicts_oldest_and_leaves_first() -> None:
    p = BlockPool(4, record=True)
    assert p.take(4)
    assert p.promote([1, 2, 3, 4]) == [1, 2, 3, 4]
    p.release([1, 2])  # leaf 2 becomes older than its parent 1
    p.release([3, 4])
    assert p.inactive_order() == [2, 1, 4, 3]
    assert p.take(1)
    assert 2 not in p.ref_counts() and p.match_prefix([1, 2], 2) == (1, 0, 1)
    p.acquire([1])  # re-activated: no longer evictable
    assert p.take(2)
    assert sorted(p.ref_counts()) == [1]
    assert _drained(p) == [1, 2, 3, 4, ~2, ~4, ~3]
    p.check()


def test_claim_cannot_use_the_blocks_it_reactivates() -> None:
    p = BlockPool(3)
    assert p.take(2)
    p.promote([1, 2])
    p.release([1, 2])  # both inactive: available == 3
    assert not p.claim([1, 2], 2)  # re-referencing 1 and 2 leaves only the free block
    assert p.available == 3 and p.inactive_order() == [2, 1]
    assert p.claim([1, 2], 1)
    assert p.ref_counts() == {1: 1, 2: 1} and p.free == 0 and not p.inactive_order()
    p.check()


def test_lru_stays_bounded_and_ordered_under_reuse() -> None:
    """Re-referenced blocks leave stale LRU entries; trimming drops them (and the evicted
    prefix) without changing the order or what gets evicted."""
    p = BlockPool(3, record=True)
    assert p.take(3)
    assert p.promote([1, 2, 3]) == [1, 2, 3]
    for i in range(50):
        p.release([1, 2, 3])
        if i % 7 == 3:
            assert p.take(1) and _drained(p)[-1] == ~3  # the leaf goes first
            assert p.promote([3]) == [3]  # the taken block caches 3 again
            p.acquire([1, 2])
            p.release([1, 2])
            p.acquire([1, 2])
        else:
            p.acquire([1, 2, 3])
        p.check()
        assert len(p.lru) <= 2 * p.total + 65  # re-built when left entries dominate
    p.release([1, 2, 3])
    assert p.inactive_order() == [3, 2, 1]
    p.check()
    assert p.take(3) and _drained(p)[-3:] == [~3, ~2, ~1]
    assert not p.ref_counts() and not p.inactive_order()


def test_take_is_all_or_nothing() -> None:
    p = BlockPool(3)
    assert p.take(2)
    assert not p.take(2)
    assert p.free == 1
    p.give_back(2)
    assert p.free == 3


def test_duplicate_promotion_stays_private() -> None:
    p = BlockPool(4)
    assert p.take(2)
    assert p.promote([7]) == [7]
    assert p.promote([7]) == []
    assert p.private_blocks == 1


def test_match_prefix_counts_leading_resident_and_active() -> None:
    p = BlockPool(8)
    p.take(3)
    p.promote([10, 11, 12])
    p.acquire([10, 11])  # a pin on the prefix
    p.release([10, 11, 12])  # 12 inactive
    assert p.match_prefix([10, 11, 12, 13], 4) == (3, 2, 1)
    assert p.match_prefix([10, 11, 12], 2) == (2, 2, 0)
    assert p.match_prefix([9, 10], 2) == (0, 0, 0)


def test_a_chain_leaving_a_run_midway_is_split_there() -> None:
    """Where a chain leaves a cached run is found block by block (the last blocks compared
    first, then a binary search): at every split point, for match, claim and release."""
    n = 9
    for split in range(1, n + 1):
        p = BlockPool(3 * n)
        assert p.take(n)
        run = list(range(100, 100 + n))
        assert p.promote(run) == run
        other = run[:split] + [1000 + split * 10 + k for k in range(n - split)]
        assert p.match_prefix(other, n) == (split, split, 0)
        assert p.match_prefix(other, split - 1 or 1) == (split - 1 or 1, split - 1 or 1, 0)
        assert p.claim(other[:split], n - split)
        assert p.refs_of(run) == [2] * split + [1] * (n - split)
        p.release(other[:split])
        p.release(run)
        assert p.inactive_order() == run[::-1]
        p.check()


def test_a_run_restored_at_the_lru_head_is_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    """untake puts the evicted tail back in front of the LRU list: it must be unlisted when
    re-referenced (its stamp is a real position), also when the stamps have to be rebuilt."""
    for stamp0 in (block_pool._STAMP0, 0):
        monkeypatch.setattr(block_pool, "_STAMP0", stamp0)
        p = BlockPool(4)
        assert p.take(2) and p.promote([1, 2]) == [1, 2]
        p.release([1, 2])
        assert p.take(2)
        free, evicted = p.take_undoable(1)  # the leaf 2; the head entry stays
        assert evicted == [2] and p.untake(free, evicted, 1, 0) == []
        assert p.inactive_order() == [2, 1]
        p.acquire([1, 2])
        assert p.inactive_order() == [] and p.num_inactive == 0
        p.check()


def test_promote_after_a_duplicate_finds_the_run_it_continues() -> None:
    """A caller whose block before the range was a duplicate (cached by someone else, in the
    middle of that one's run) is told nothing by the run starts: the pool walks its chain."""
    p = BlockPool(12)
    assert p.take(8)
    chain = [1, 2, 3, 4]
    assert p.promote(chain) == [1, 2, 3, 4]  # A computes the chain
    assert p.promote(chain, 0, 2) == []  # B computed its first half meanwhile: duplicates
    assert p.promote(chain, 2, 4, False) == []  # and the rest: still duplicates
    assert p.private_blocks == 4
    p.check()


class ModelPool:
    """The pool's behaviour stated plainly, one block at a time: reference counts in a dict,
    inactive blocks in an ordered LRU (oldest first).  The stateful test runs it side by side
    with :class:`BlockPool` (whose LRU is a lazily cleaned list with stamps in one dict)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.free = total
        self.refs: dict[int, int] = {}
        self.lru: OrderedDict[int, None] = OrderedDict()
        self.events: list[int] = []

    def match_prefix(self, hashes: list[int], limit: int) -> tuple[int, int, int]:
        n = 0
        while n < min(limit, len(hashes)) and hashes[n] in self.refs:
            n += 1
        zero = [self.refs[h] == 0 for h in hashes[:n]]
        return n, zero.index(True) if True in zero else n, sum(zero)

    def acquire(self, hashes: list[int]) -> None:
        for h in hashes:
            if self.refs[h] == 0:
                del self.lru[h]
            self.refs[h] += 1

    def take(self, n: int) -> list[int] | None:
        if n > self.free + len(self.lru):
            return None
        evicted = []
        while self.free < n:
            h, _ = self.lru.popitem(last=False)
            del self.refs[h]
            evicted.append(h)
            self.free += 1
        self.free -= n
        return evicted

    def untake(self, restore: list[int], back: int) -> None:
        for h in reversed(restore):
            self.refs[h] = 0
            self.lru[h] = None
            self.lru.move_to_end(h, last=False)
        self.free += back

    def promote(self, hashes: list[int]) -> list[int]:
        new = [h for h in hashes if h not in self.refs]
        for h in new:
            self.refs[h] = 1
        return new

    def release(self, hashes: list[int]) -> None:
        for h in reversed(hashes):
            self.refs[h] -= 1
            if self.refs[h] == 0:
                self.lru[h] = None


class _Req:
    """One request (or pin) of :class:`PoolMachine`: its chain, how far it has computed, what
    it holds by reference (in chain order) and how many private blocks it owns."""

    def __init__(self, rid: int, tokens: list[int], chain: list[int], cached: list[int],
                 private: int) -> None:
        self.rid = rid
        self.tokens = tokens
        self.chain = chain
        self.cached = cached
        self.pos = len(cached)  # blocks computed or hit; past the chain: generated blocks
        self.private = private
        self.end = len(chain) + 2 if chain else 0  # computes up to two generated blocks

    def generated(self) -> list[int]:
        return generated_block_ids(self.rid, len(self.chain), self.pos)


_LIVE = 5  # live requests at most (more would mostly fill the pool)


class PoolMachine(RuleBasedStateMachine):
    """Requests on a tree of hash chains (prompts sharing prefixes) hit, compute (promote,
    concurrently too: duplicates), generate, finish (release), are re-admitted (hitting their
    own generated blocks) and take/untake speculatively, the way the engines call the pool;
    it must conserve blocks, keep every run a stretch of one chain, and agree with
    :class:`ModelPool` on every result, reference count, LRU order and event."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = BlockPool(16, record=True)
        self.model = ModelPool(16)
        self.ids: dict[tuple[int, ...], int] = {}  # token prefix -> its chained hash
        self.parent: dict[int, int] = {}  # hash -> the hash before it in its chain
        self.live: list[_Req] = []
        self.done: list[_Req] = []  # finished, may be re-admitted
        self.next_rid = 1
        self.undo: tuple[int, list[int], int, _Req] | None = None  # last take_undoable, untouched since
        self.expected: list[int] = []  # KV events due: h stored, ~h evicted (prompt blocks only)

    def _expect(self, changes: list[int]) -> None:
        self.expected += [h for h in changes if -PRIVATE_HASH_BASE <= h < PRIVATE_HASH_BASE]

    def _chain(self, tokens: list[int]) -> list[int]:
        out = []
        for j in range(1, len(tokens) + 1):
            h = self.ids.setdefault(tuple(tokens[:j]), len(self.ids) + 1)
            if out:
                self.parent[h] = out[-1]
            out.append(h)
        return out

    def _take(self, n: int) -> bool:
        evicted = self.model.take(n)
        ok = self.pool.take(n)
        assert ok is (evicted is not None)
        if evicted:
            self._expect([~h for h in evicted])
        return ok

    def _admit(self, rid: int, tokens: list[int], known: list[int], fresh: int) -> None:
        chain = self._chain(tokens)
        n = self.pool.match_prefix(known, len(known))[0]
        prefix = known[:n]
        inactive = sum(1 for h in prefix if self.model.refs[h] == 0)
        fits = fresh <= self.pool.available - inactive
        before = (self.pool.free, self.pool.ref_counts(), self.pool.inactive_order())
        self.undo = None
        assert self.pool.claim(prefix, fresh) is fits
        if not fits:
            assert (self.pool.free, self.pool.ref_counts(), self.pool.inactive_order()) == before
            return
        self.model.acquire(prefix)
        evicted = self.model.take(fresh)
        assert evicted is not None
        if evicted:
            self._expect([~h for h in evicted])
        self.live.append(_Req(rid, tokens, chain, prefix, fresh))

    @precondition(lambda self: len(self.live) < _LIVE)
    @rule(tokens=st.lists(st.integers(0, 2), min_size=1, max_size=6), fresh=st.integers(0, 2))
    def admit(self, tokens: list[int], fresh: int) -> None:
        """A new request (or a destination pin, if it never computes) claims its cached prefix."""
        self._admit(self.next_rid, tokens, self._chain(tokens), fresh)
        self.next_rid += 1

    @precondition(lambda self: len(self.live) < _LIVE and any(r.tokens for r in self.live))
    @rule(data=st.data(), more=st.lists(st.integers(0, 2), max_size=3), fresh=st.integers(0, 2))
    def admit_alike(self, data: st.DataObject, more: list[int], fresh: int) -> None:
        """A request sharing a prefix with a live one (perhaps still computing it: the two
        compute the same blocks, the later ones stay private duplicates)."""
        r = data.draw(st.sampled_from([r for r in self.live if r.tokens]))
        cut = data.draw(st.one_of(st.just(len(r.tokens)), st.integers(1, len(r.tokens))))
        tokens = r.tokens[:cut] + more
        self._admit(self.next_rid, tokens, self._chain(tokens), fresh)
        self.next_rid += 1

    @precondition(lambda self: len(self.live) < _LIVE and bool(self.done))
    @rule(data=st.data(), fresh=st.integers(0, 2))
    def readmit(self, data: st.DataObject, fresh: int) -> None:
        """A preempted request comes back: it can hit its own generated blocks too."""
        r = self.done.pop(data.draw(st.integers(0, len(self.done) - 1)))
        self._admit(r.rid, r.tokens, r.chain + r.generated(), fresh)

    @precondition(lambda self: any(r.pos < r.end for r in self.live))
    @rule(data=st.data(), k=st.integers(1, 3), conservative=st.booleans())
    def compute(self, data: st.DataObject, k: int, conservative: bool) -> None:
        """A request computes ``k`` more blocks; the full prompt ones enter the cache (some may
        be cached by someone else meanwhile: they stay private duplicates).  A conservative
        caller does not tell the pool that it holds the block before them."""
        r = data.draw(st.sampled_from([r for r in self.live if r.pos < r.end]))
        k = min(k, r.end - r.pos)
        self.undo = None
        if not self._take(k):
            return
        r.private += k
        lo, hi = r.pos, min(r.pos + k, len(r.chain))
        r.pos += k
        if lo < hi:
            held = not lo or (bool(r.cached) and r.cached[-1] == r.chain[lo - 1])
            new = self.pool.promote(r.chain, lo, hi, held and not conservative)
            assert new == self.model.promote(r.chain[lo:hi])
            self._expect(new)
            r.cached += new
            r.private -= len(new)

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data(), oldest=st.booleans())
    def finish(self, data: st.DataObject, oldest: bool) -> None:
        """A request ends: its generated blocks enter the cache, then it releases everything."""
        r = self.live.pop(0 if oldest else data.draw(st.integers(0, len(self.live) - 1)))
        self.undo = None
        generated = r.generated()
        new = self.pool.promote(generated)
        assert new == self.model.promote(generated)
        self._expect(new)
        r.cached += new
        r.private -= len(new)
        # (the pool counts what leaves use before anything is released)
        others = [(q.private + len(q.cached), q.cached) for q in self.live if data.draw(st.booleans())]
        holdings = [(r.private + len(r.cached), r.cached)] + others
        freed = blocks_freed(self.pool, holdings)
        model_freed = sum(p for p, _ in holdings) - sum(len(c) for _, c in holdings)
        counts: dict[int, int] = {}
        for _, c in holdings:
            for h in c:
                counts[h] = counts.get(h, 0) + 1
        model_freed += sum(1 for h, n in counts.items() if self.model.refs[h] == n)
        assert freed == model_freed
        self.pool.release(r.cached)
        self.model.release(r.cached)
        self.pool.give_back(r.private)
        self.model.free += r.private
        r.cached, r.private = [], 0
        self.done.append(r)

    @precondition(lambda self: len(self.live) < _LIVE)
    @rule(n=st.integers(1, 8))
    def take_undoable(self, n: int) -> None:
        """A bulk run's speculative take (evictions recorded for undo, no events)."""
        if n > self.pool.available:
            return
        evicted = self.model.take(n)
        free, got = self.pool.take_undoable(n)
        assert got == evicted
        owner = _Req(0, [], [], [], n)
        self.live.append(owner)
        self.undo = (free, got, n, owner)

    @precondition(lambda self: self.undo is not None)
    @rule(data=st.data())
    def untake(self, data: st.DataObject) -> None:
        assert self.undo is not None
        free, evicted, taken, owner = self.undo
        keep = data.draw(st.integers(0, taken))
        still = self.pool.untake(free, evicted, taken, keep)
        assert still == evicted[:len(still)]
        restore = evicted[len(still):]
        self.model.untake(restore, taken - keep - len(restore))
        owner.private = keep
        self.undo = (free, still, keep, owner)  # a bulk run may be cut again

    @rule(tokens=st.lists(st.integers(0, 2), max_size=7), limit=st.integers(0, 7))
    def match(self, tokens: list[int], limit: int) -> None:
        chain = self._chain(tokens)
        assert self.pool.match_prefix(chain, limit) == self.model.match_prefix(chain, limit)

    @invariant()
    def conserved(self) -> None:
        self.pool.check()
        private = sum(r.private for r in self.live)
        assert self.pool.free + private + len(self.pool.ref_counts()) == self.pool.total
        assert self.pool.private_blocks == private
        counts: dict[int, int] = {}
        for r in self.live:
            for h in r.cached:
                counts[h] = counts.get(h, 0) + 1
        assert self.pool.ref_counts() == {h: counts.get(h, 0) for h in self.pool.ref_counts()}

    @invariant()
    def runs_are_chain_stretches(self) -> None:
        for run in self.pool.starts.values():
            for a, b in zip(run.keys, run.keys[1:]):
                assert self.parent.get(b, b - 1) == a, run.keys  # (generated ids: a range)

    @invariant()
    def agrees_with_model(self) -> None:
        assert _drained(self.pool) == self.expected
        self.expected = []
        assert self.pool.free == self.model.free
        assert self.pool.ref_counts() == self.model.refs
        assert self.pool.inactive_order() == list(self.model.lru)
        assert self.pool.num_inactive == len(self.model.lru)


@pytest.mark.slow
class TestPoolMachine(PoolMachine.TestCase):
    settings = settings(max_examples=150, stateful_step_count=80, deadline=None)


class TestPoolMachineShort(PoolMachine.TestCase):
    """The same model check, short enough for the quick loop (``pytest -m "not slow"``)."""

    settings = settings(max_examples=10, stateful_step_count=80, deadline=None)
