"""Small helpers shared by the vLLM and SGLang mocks."""

from __future__ import annotations

from array import array
from itertools import chain
from typing import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from dmocker.engines.block_pool import BlockPool, KvChunk
from dmocker.engines.interface import BatchDelta, IdArray, KvEvent, KvRemoved, KvStored, PassCompletion, ids_copy

__all__ = [
    "kv_events", "ceil_div", "kv_share", "cut_point", "cut_completion", "blocks_freed", "check_holdings", "BatchIds",
    "BatchTracker",
]


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def kv_share(pool: BlockPool, ahead: int) -> float:
    """Share of the pool's blocks in use, less ``ahead`` blocks a bulk run in flight holds
    beyond the per-pass simulation (a worker's ``kv_usage`` probe)."""
    used = pool.num_active_blocks - ahead
    return used / pool.total if pool.total else 0.0


def kv_events(chunks: Sequence[KvChunk]) -> tuple[KvEvent, ...]:
    """Turn a pool's drained cache changes (:attr:`BlockPool.events
    <dmocker.engines.block_pool.BlockPool.events>`: ``(stored?, hashes)`` chunks, in order) into
    KV events: neighbouring chunks of one kind merge into one KvStored / KvRemoved, and the
    order is kept (a hash evicted then stored again stays present).

    A chunk's tuple is the event's own when it stands alone (the usual case: a pass stores one
    chunk, or evicts one and stores another), so a hash is never handled on its own: a pass of
    a 12k-token prompt stores ~750 blocks at once."""
    n = len(chunks)
    if n == 1:
        stored, hashes = chunks[0]
        return (KvStored(hashes) if stored else KvRemoved(hashes),)
    out: list[KvEvent] = []
    i = 0
    while i < n:
        stored, hashes = chunks[i]
        j = i + 1
        while j < n and chunks[j][0] == stored:
            j += 1
        if j > i + 1:
            hashes = tuple(chain.from_iterable(c[1] for c in chunks[i:j]))
        out.append(KvStored(hashes) if stored else KvRemoved(hashes))
        i = j
    return tuple(out)


def cut_point(times: npt.NDArray[np.float64], now_ms: float, started: bool) -> int:
    """How many passes of a bulk run (pass end times ``times``) the per-pass simulation has
    started by ``now_ms``: the passes ended by then plus the one in flight; at an exact pass
    end, the next pass counts only if it has ``started`` (the caller's time step is past the
    point where idle workers start passes).  At least 1 (the run's first pass has started)."""
    ended = int(times.searchsorted(now_ms, side="right"))
    if ended and float(times[ended - 1]) == now_ms and not started:
        return ended
    return max(ended + 1, 1)


def cut_completion(completion: PassCompletion | None, times: npt.NDArray[np.float64],
                   keep: int) -> tuple[PassCompletion, npt.NDArray[np.float64], float]:
    """A bulk run cut after its first ``keep`` passes (``keep`` >= 1; both engines): its
    completion now ends with the last kept pass and carries the kept pass times (none for a
    single pass).  Returns (completion, kept times, end)."""
    assert completion is not None
    kept = times[:keep]
    end = float(kept[-1])
    cut = PassCompletion(end_ms=end, emitted=completion.emitted, run_times=kept if keep >= 2 else None,
                         delta=completion.delta)
    return cut, kept, end


def blocks_freed(pool: BlockPool, holdings: Iterable[tuple[int, list[int]]]) -> int:
    """Blocks that leave use when requests holding ``(blocks, cached hashes)`` complete together
    (a bulk run's finishing pass, seen by the KV-usage probe before it is applied): every block
    a request holds privately, and each cached block nobody else references."""
    freed = 0
    holders: dict[int, int] = {}
    refs: dict[int, int] = {}
    for blocks, cached in holdings:
        freed += blocks - len(cached)
        for h in cached:
            holders[h] = holders.get(h, 0) + 1
        refs.update(zip(cached, pool.refs_of(cached)))
    for h, n in holders.items():
        if refs[h] == n:
            freed += 1
    return freed


def check_holdings(pool: BlockPool, holdings: Iterable[tuple[int, int, list[int]]]) -> None:
    """Assert that the pool's blocks in use are what the requests ``(id, blocks held, cached
    hashes)`` hold: its private blocks their uncached ones, each cached block's reference count
    its holders (tests)."""
    pool.check()
    private = 0
    refs: dict[int, int] = {}
    for rid, blocks, cached in holdings:
        assert blocks >= len(cached), (rid, blocks, cached)
        private += blocks - len(cached)
        for h in cached:
            refs[h] = refs.get(h, 0) + 1
    assert private == pool.private_blocks, (private, pool.private_blocks)
    for h, c in pool.ref_counts().items():
        assert refs.get(h, 0) == c, (h, c, refs.get(h, 0))


class BatchIds:
    """The ids of a decode batch, in batch order, kept three ways: a list, where a leaver is
    found (``list.index`` compares the ids as they are; ``array.remove`` makes an int object of
    every element it passes); an ``array('q')``; and the numpy array a completion hands out,
    copied from the ``array('q')`` in one go when first asked for and kept until the ids change
    (cheaper than deriving it from the previous array: a concatenation per join, a mask or
    slices per leave).  A handed-out array is never written to: a change makes the next one."""

    def __init__(self, ids: Iterable[int] = ()) -> None:
        self._list: list[int] = list(ids)
        self._array: array[int] = array("q", self._list)
        self._numpy: IdArray | None = None

    def __len__(self) -> int:
        return len(self._list)

    def append(self, rid: int) -> None:
        self._list.append(rid)
        self._array.append(rid)
        self._numpy = None

    def extend(self, rids: list[int]) -> None:
        self._list.extend(rids)
        self._array.fromlist(rids)
        self._numpy = None

    def remove(self, rid: int) -> None:
        self.remove_at(self._list.index(rid))

    def remove_at(self, i: int) -> None:
        """Drop the id at position ``i`` (a caller that knows it skips the search)."""
        self._list.pop(i)
        del self._array[i]
        self._numpy = None

    def to_numpy(self) -> IdArray:
        """The ids as a numpy array: the same array while they are unchanged, else a new one."""
        arr = self._numpy
        if arr is None:
            arr = self._numpy = ids_copy(self._array)
        return arr

    def tolist(self) -> list[int]:
        return list(self._list)


class BatchTracker:
    """The joins and leaves of a decode batch between the emitted-ids arrays its engine hands
    out, for :class:`~dmocker.engines.interface.BatchDelta`.  The engine reports every change
    of the batch while it tracks (``join`` / ``leave``), stops tracking when it leaves the path
    that knows them (``reset``), and asks for the delta of each array it hands out."""

    def __init__(self) -> None:
        self.base: IdArray | None = None  # the array handed out last, while tracking
        self.joined: list[int] = []
        self.left: list[int] = []

    def join(self, rids: list[int]) -> None:
        if self.base is not None:
            self.joined.extend(rids)

    def leave(self, rid: int) -> None:
        if self.base is not None:
            self.left.append(rid)

    def reset(self) -> None:
        self.base = None
        if self.joined:
            self.joined = []
        if self.left:
            self.left = []

    def handout(self, ids: IdArray) -> BatchDelta | None:
        """``ids`` goes into a completion: its delta from the previous array (None: the same
        array, or no previous one tracked); tracking goes on from ``ids``."""
        base = self.base
        joined, left = self.joined, self.left
        self.base = ids
        self.joined = []
        self.left = []
        if base is None or base is ids:  # untracked, or unchanged (a batch keeps its array)
            return None
        return BatchDelta(base, ids, joined, left)
