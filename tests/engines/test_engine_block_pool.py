"""Block pool: conservation, no negative refs, prefix matching, LRU eviction order."""

from __future__ import annotations

from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from dmocker.engines.block_pool import BlockPool


def test_lru_evicts_oldest_and_leaves_first() -> None:
    p = BlockPool(4, record=True)
    assert p.take(4)
    assert p.promote([1, 2, 3, 4]) == [1, 2, 3, 4]
    p.release([1, 2])  # leaf 2 becomes older than its parent 1
    p.release([3, 4])
    assert list(p.inactive) == [2, 1, 4, 3]
    assert p.take(1)
    assert 2 not in p.refs and p.match_prefix([1, 2], 2) == (1, 0, 1)
    p.acquire([1])  # re-activated: no longer evictable
    assert p.take(2)
    assert sorted(p.refs) == [1]
    assert p.drain_events() == [1, 2, 3, 4, ~2, ~4, ~3]
    p.check()


def test_claim_cannot_use_the_blocks_it_reactivates() -> None:
    p = BlockPool(3)
    assert p.take(2)
    p.promote([1, 2])
    p.release([1, 2])  # both inactive: available == 3
    assert not p.claim([1, 2], 2)  # re-referencing 1 and 2 leaves only the free block
    assert p.available == 3 and list(p.inactive) == [2, 1]
    assert p.claim([1, 2], 1)
    assert p.refs == {1: 1, 2: 1} and p.free == 0 and not p.inactive
    p.check()


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


class PoolMachine(RuleBasedStateMachine):
    """Random owners take/promote/share/release blocks; the pool must conserve them."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = BlockPool(12)
        self.owners: list[tuple[list[int], int]] = []  # (hashes held by ref, private count)
        self.next_hash = 1

    @rule(n=st.integers(1, 5), promote=st.integers(0, 5))
    def allocate(self, n: int, promote: int) -> None:
        if not self.pool.take(n):
            return
        hashes = list(range(self.next_hash, self.next_hash + min(n, promote)))
        self.next_hash += len(hashes)
        new = self.pool.promote(hashes)
        self.owners.append((new, n - len(new)))

    @precondition(lambda self: bool(self.pool.refs))
    @rule(data=st.data(), extra=st.integers(0, 3))
    def share(self, data: st.DataObject, extra: int) -> None:
        hashes = sorted(self.pool.refs)
        chosen = data.draw(st.lists(st.sampled_from(hashes), unique=True, max_size=4))
        inactive = sum(1 for h in chosen if self.pool.refs[h] == 0)
        if extra > self.pool.available - inactive:
            return
        self.pool.acquire(chosen)
        assert self.pool.take(extra)
        self.owners.append((chosen, extra))

    @precondition(lambda self: bool(self.pool.refs))
    @rule(data=st.data(), extra=st.integers(0, 6))
    def claim(self, data: st.DataObject, extra: int) -> None:
        """claim == the fit test + acquire + take above, and changes nothing when it fails."""
        hashes = sorted(self.pool.refs)
        chosen = data.draw(st.lists(st.sampled_from(hashes), unique=True, max_size=4))
        inactive = sum(1 for h in chosen if self.pool.refs[h] == 0)
        fits = extra <= self.pool.available - inactive
        before = (self.pool.free, dict(self.pool.refs), list(self.pool.inactive))
        assert self.pool.claim(chosen, extra) is fits
        if fits:
            self.owners.append((chosen, extra))
        else:
            assert (self.pool.free, dict(self.pool.refs), list(self.pool.inactive)) == before

    @precondition(lambda self: bool(self.owners))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(0, len(self.owners) - 1))
        hashes, private = self.owners.pop(i)
        self.pool.release(hashes)
        self.pool.give_back(private)

    @invariant()
    def conserved(self) -> None:
        self.pool.check()
        private = sum(p for _, p in self.owners)
        assert self.pool.free + private + len(self.pool.refs) == self.pool.total
        counts: dict[int, int] = {}
        for hashes, _ in self.owners:
            for h in hashes:
                counts[h] = counts.get(h, 0) + 1
        for h, r in self.pool.refs.items():
            assert r == counts.get(h, 0) >= 0


TestPoolMachine = PoolMachine.TestCase
TestPoolMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
