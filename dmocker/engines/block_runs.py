"""How the block pool groups its cached blocks: runs, and walking a hash chain over them.

Why runs: a Mooncake prompt is hundreds of blocks, and blocks move together -- a request
promotes its new blocks together, releases all it holds together, and is hit on a prefix.
State kept per block (a reference count, an LRU stamp, rewritten at every release and
re-reference) would make every such move a hash-table write per block.  So
:class:`~dmocker.engines.block_pool.BlockPool` keeps no per-block state at all: everything is
per **run**.

* A :class:`Run` is a **stretch of one hash chain**, in chain order (each hash follows its
  chain predecessor; a request's generated ids are a chain of their own), whose blocks share
  their holders (so one reference count) and, while inactive, one LRU entry; the last ones are
  evicted first (leaves last).  Runs are made by ``promote`` (one per stretch of new blocks
  between duplicates), split by a shared prefix and cut by eviction; they never grow or merge.
* The pool's ``starts`` maps the **first** hash of each run to it: the only per-hash index.  A
  cached block that does not start a run sits right after its chain predecessor in the same
  run, so a walk along a chain from its first block never needs the others: at each position
  the block continues the current run or starts one (one lookup) or is not cached
  (:func:`step`).  Whether a list follows a run for ``m`` blocks is one comparison, of the
  ``m``-th blocks: a hash names its whole prefix (the contract below), so equal ``m``-th blocks
  mean equal stretches, and where they differ a binary search over single blocks finds the
  split (:func:`common_prefix`).  So promoting writes one dict entry per new run, evicting
  deletes one per run that empties (cutting a tail writes none), and splitting adds one.

The contract this rests on: a hash names its whole prefix -- two blocks with equal hashes are
the same block of the same prefix at the same position (prompt hashes are chained, see
:mod:`dmocker.engines.hashing`; generated ids are per request and position) -- and every list a
caller passes is a stretch of its chain, in chain order, walked from a known point.
"""

from __future__ import annotations

from typing import TypeAlias, cast

__all__ = ["ObjList", "Run", "Starts", "common_prefix", "locate", "none_started", "step", "stretches"]

# Hash lists read as lists of objects (a cast: the same list, no copy): the pool's dict keys are
# then the int objects the list holds, where read as ints the compiled build would make a new
# int object for each lookup.
ObjList: TypeAlias = "list[object]"


class Run:
    """Cached blocks that share their reference count and LRU fate: a stretch of one hash chain,
    in chain order (module docstring)."""

    __slots__ = ("keys", "refs", "stamp")

    def __init__(self, keys: list[int], refs: int, stamp: int = -1) -> None:
        self.keys = keys  # evicted from the end
        self.refs = refs
        self.stamp = stamp  # absolute LRU position while inactive and listed, else -1


#: The first hash of each run -> the run (int keys).
Starts: TypeAlias = "dict[object, Run]"


def common_prefix(a: list[int], i: int, b: list[int], p: int, n: int) -> int:
    """Length of the common prefix of ``a[i:i+n]`` and ``b[p:p+n]``, given ``a[i] == b[p]``.

    A hash names its whole prefix (module docstring), so blocks ``k`` agree exactly when
    every block up to ``k`` does: a binary search over single blocks, O(log n) comparisons
    and no slices."""
    if a[i + n - 1] == b[p + n - 1]:
        return n
    lo, hi = 1, n - 1  # a[i + lo - 1] == b[p + lo - 1]; the common prefix is at most hi
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if a[i + mid - 1] == b[p + mid - 1]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def none_started(objs: ObjList, starts: Starts) -> bool:
    """No hash of ``objs`` starts a run (a loop rather than ``keys().isdisjoint``, which the
    compiled build runs as a generic Python call per item)."""
    for h in objs:
        if h in starts:
            return False
    return True


def stretches(starts: Starts, hashes: list[int]) -> tuple[list[Run], list[int]]:
    """A list (all cached) as stretches, in order: the runs and, for each, how many of its
    first blocks the stretch covers (a KeyError when a stretch starts no run).

    Two lists, not a generator of pairs: this runs for every acquire, pin and release."""
    objs = cast(ObjList, hashes)
    n = len(hashes)
    runs: list[Run] = []
    lengths: list[int] = []
    i = 0
    while i < n:
        run = starts[objs[i]]
        keys = run.keys
        m = len(keys)
        if i + m > n or hashes[i + m - 1] != keys[m - 1]:
            m = common_prefix(hashes, i, keys, 0, min(m, n - i))
        runs.append(run)
        lengths.append(m)
        i += m
    return runs, lengths


def locate(starts: Starts, chain: list[int], lo: int) -> tuple[Run | None, int]:
    """Where ``chain[lo - 1]`` is cached: (its run, its index there), or (None, 0)."""
    hs = chain
    run: Run | None = None
    p = 0
    i = 0
    while i < lo:
        run, p, m = step(starts, hs, i, lo, run, p)
        i += m or 1
    return (run, p) if run is not None and run.keys[p] == hs[lo - 1] else (None, 0)


def step(starts: Starts, hs: list[int], i: int, n: int, run: Run | None, p: int) -> tuple[Run | None, int, int]:
    """One stretch of a walk along a chain, at ``hs[i]``, given that ``hs[i - 1]`` is cached
    at ``run.keys[p]`` (``run`` None: not cached): ``(run, p, m)`` with the stretch's ``m``
    blocks cached and its last at ``run.keys[p]``, or ``(None, 0, 0)`` if ``hs[i]`` is not
    cached.  A cached block continues the run of the one before it or starts one."""
    if run is not None and p + 1 < len(run.keys) and run.keys[p + 1] == hs[i]:
        m = common_prefix(hs, i, run.keys, p + 1, min(len(run.keys) - p - 1, n - i))
        return run, p + m, m
    found = starts.get(cast(ObjList, hs)[i])
    if found is None:
        return None, 0, 0
    m = common_prefix(hs, i, found.keys, 0, min(len(found.keys), n - i))
    return found, m - 1, m
