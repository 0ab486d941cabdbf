"""Block pool: conservation, no negative refs, prefix matching, LRU eviction order."""

from __future__ import annotations

from collections import OrderedDict

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from dmocker.engines.block_pool import BlockPool


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
    assert 2 not in p.blocks and p.match_prefix([1, 2], 2) == (1, 0, 1)
    p.acquire([1])  # re-activated: no longer evictable
    assert p.take(2)
    assert sorted(p.blocks) == [1]
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
    assert not p.blocks and not p.inactive_order()


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
    p.release([12])  # 12 inactive
    assert p.match_prefix([10, 11, 12, 13], 4) == (3, 2, 1)
    assert p.match_prefix([10, 11, 12], 2) == (2, 2, 0)
    assert p.match_prefix([9, 10], 2) == (0, 0, 0)


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


class PoolMachine(RuleBasedStateMachine):
    """Random owners take/promote/share/release blocks; the pool must conserve them and agree
    with :class:`ModelPool` on every result, reference count, LRU order and event."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = BlockPool(12, record=True)
        self.model = ModelPool(12)
        self.owners: list[tuple[list[int], int]] = []  # (hashes held by ref, private count)
        self.next_hash = 1
        self.undo: tuple[int, list[int], int] | None = None  # last take_undoable, untouched since

    def _take(self, n: int) -> bool:
        evicted = self.model.take(n)
        ok = self.pool.take(n)
        assert ok is (evicted is not None)
        if evicted:
            assert _drained(self.pool)[-len(evicted):] == [~h for h in evicted]
        return ok

    @rule(n=st.integers(1, 5), promote=st.integers(0, 5))
    def allocate(self, n: int, promote: int) -> None:
        self.undo = None
        if not self._take(n):
            return
        hashes = list(range(self.next_hash, self.next_hash + min(n, promote)))
        self.next_hash += len(hashes)
        new = self.pool.promote(hashes)
        assert new == self.model.promote(hashes)
        self.owners.append((new, n - len(new)))

    @rule(data=st.data(), n=st.integers(1, 6))
    def allocate_over_cached(self, data: st.DataObject, n: int) -> None:
        """Promote a mix of new and already-cached hashes in any order (blocks computed while
        someone else cached the same content stay private): the new ones form one run with
        gaps, which later shares, releases and evictions split."""
        self.undo = None
        if not self._take(n):
            return
        fresh = list(range(self.next_hash, self.next_hash + n))
        self.next_hash += n
        cached = data.draw(st.lists(st.sampled_from(sorted(self.pool.blocks) or [0]), unique=True, max_size=3))
        hashes = data.draw(st.permutations(fresh + [h for h in cached if h in self.pool.blocks]))
        hashes = hashes[:n]
        new = self.pool.promote(hashes)
        assert new == self.model.promote(hashes)
        self.owners.append((new, n - len(new)))

    @rule(n=st.integers(1, 8))
    def take_undoable(self, n: int) -> None:
        """A bulk run's speculative take (evictions recorded for undo, no events)."""
        if n > self.pool.available:
            return
        evicted = self.model.take(n)
        free, got = self.pool.take_undoable(n)
        assert got == evicted
        self.owners.append(([], n))
        self.undo = (free, got, n)

    @precondition(lambda self: self.undo is not None)
    @rule(data=st.data())
    def untake(self, data: st.DataObject) -> None:
        assert self.undo is not None
        free, evicted, taken = self.undo
        keep = data.draw(st.integers(0, taken))
        still = self.pool.untake(free, evicted, taken, keep)
        assert still == evicted[:len(still)]
        restore = evicted[len(still):]
        self.model.untake(restore, taken - keep - len(restore))
        assert self.owners[-1] == ([], taken)
        self.owners[-1] = ([], keep)
        self.undo = None

    @precondition(lambda self: bool(self.pool.blocks))
    @rule(data=st.data(), limit=st.integers(0, 6))
    def match(self, data: st.DataObject, limit: int) -> None:
        known = sorted(self.pool.blocks) + [0]
        hashes = data.draw(st.lists(st.sampled_from(known), unique=True, max_size=6))
        assert self.pool.match_prefix(hashes, limit) == self.model.match_prefix(hashes, limit)

    @precondition(lambda self: bool(self.pool.blocks))
    @rule(data=st.data(), extra=st.integers(0, 3))
    def share(self, data: st.DataObject, extra: int) -> None:
        hashes = sorted(self.pool.blocks)
        chosen = data.draw(st.lists(st.sampled_from(hashes), unique=True, max_size=4))
        inactive = sum(1 for h in chosen if self.pool.ref_count(h) == 0)
        if extra > self.pool.available - inactive:
            return
        self.undo = None
        self.pool.acquire(chosen)
        self.model.acquire(chosen)
        assert self._take(extra)
        self.owners.append((chosen, extra))

    @precondition(lambda self: bool(self.pool.blocks))
    @rule(data=st.data(), extra=st.integers(0, 6))
    def claim(self, data: st.DataObject, extra: int) -> None:
        """claim == the fit test + acquire + take above, and changes nothing when it fails."""
        hashes = sorted(self.pool.blocks)
        chosen = data.draw(st.lists(st.sampled_from(hashes), unique=True, max_size=4))
        inactive = sum(1 for h in chosen if self.pool.ref_count(h) == 0)
        fits = extra <= self.pool.available - inactive
        before = (self.pool.free, self.pool.ref_counts(), self.pool.inactive_order())
        self.undo = None
        assert self.pool.claim(chosen, extra) is fits
        if fits:
            self.model.acquire(chosen)
            evicted = self.model.take(extra)
            assert evicted is not None
            if evicted:
                assert _drained(self.pool)[-len(evicted):] == [~h for h in evicted]
            self.owners.append((chosen, extra))
        else:
            assert (self.pool.free, self.pool.ref_counts(), self.pool.inactive_order()) == before

    @precondition(lambda self: bool(self.owners))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(0, len(self.owners) - 1))
        hashes, private = self.owners.pop(i)
        self.undo = None
        self.pool.release(hashes)
        self.pool.give_back(private)
        self.model.release(hashes)
        self.model.free += private

    @invariant()
    def conserved(self) -> None:
        self.pool.check()
        private = sum(p for _, p in self.owners)
        assert self.pool.free + private + len(self.pool.blocks) == self.pool.total
        counts: dict[int, int] = {}
        for hashes, _ in self.owners:
            for h in hashes:
                counts[h] = counts.get(h, 0) + 1
        for h, r in self.pool.ref_counts().items():
            assert r == counts.get(h, 0) >= 0

    @invariant()
    def agrees_with_model(self) -> None:
        assert self.pool.free == self.model.free
        assert self.pool.ref_counts() == self.model.refs
        assert self.pool.inactive_order() == list(self.model.lru)
        assert self.pool.num_inactive == len(self.model.lru)


TestPoolMachine = PoolMachine.TestCase
TestPoolMachine.settings = settings(max_examples=80, stateful_step_count=40, deadline=None)
