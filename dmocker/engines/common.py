"""Small helpers shared by the vLLM and SGLang mocks."""

from __future__ import annotations

from collections import deque
from itertools import compress, count, islice, repeat
from operator import gt, invert, le
from typing import Hashable, Iterable, Protocol, Sequence, TypeVar

import numpy as np
import numpy.typing as npt

from dmocker.engines.interface import KvEvent, KvRemoved, KvStored

__all__ = ["kv_events", "ceil_div", "remove_pending", "cut_point", "blocks_freed"]


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def kv_events(encoded: Sequence[int]) -> tuple[KvEvent, ...]:
    """Group an ordered list of encoded cache changes (``h`` stored, ``~h`` removed) into runs of
    KvStored / KvRemoved, keeping their order (a hash evicted then re-stored stays present).

    Per block in C, not in Python: a pass of a 12k-token prompt stores ~750 blocks at once.  Each
    run's end is found by one C-level scan (``compress`` over the sign test ``0 > e`` or
    ``0 <= e`` yields the first element of the other kind), so a list costs a few calls per run
    and stored hashes are sliced, never rebuilt; most lists are one run (all stored or all
    removed, told by one ``min`` or ``max``) or two (vLLM's evictions, then the blocks stored in
    their place)."""
    n = len(encoded)
    if not n:
        return ()
    # One kind only (SGLang's lists, vLLM's without evictions): ``min`` / ``max`` tell fastest.
    if encoded[0] >= 0:
        if min(encoded) >= 0:
            return (KvStored(tuple(encoded)),)
    elif encoded[-1] < 0 and max(encoded) < 0:
        return (KvRemoved(tuple(map(invert, encoded))),)
    out: list[KvEvent] = []
    start = 0
    while start < n:
        if encoded[start] >= 0:
            stop = next(compress(count(start), map(gt, _ZEROS, islice(encoded, start, None))), n)
            out.append(KvStored(tuple(encoded[start:stop])))
        else:
            stop = next(compress(count(start), map(le, _ZEROS, islice(encoded, start, None))), n)
            out.append(KvRemoved(tuple(map(invert, encoded[start:stop]))))
        start = stop
    return tuple(out)


_ZEROS = repeat(0)  # map(gt, _ZEROS, xs): 0 > x, i.e. x encodes a removal (endless, never exhausted)


class _Handed(Protocol):
    @property
    def handoff(self) -> Hashable: ...


_R = TypeVar("_R", bound=_Handed)


def remove_pending(pending: deque[tuple[_R, int]], pending_ids: set[Hashable], handoff_id: Hashable) -> _R:
    """Take a handoff's request out of the destination retry queue (``(request, generation)``
    pairs, FIFO) and its id out of the membership set; the caller guarantees it is queued.

    Both engine mocks keep this same queue for reservations waiting on capacity, so the
    removal lives here once."""
    for i, (p, _g) in enumerate(pending):
        if p.handoff == handoff_id:
            del pending[i]
            break
    pending_ids.discard(handoff_id)
    return p


def cut_point(times: npt.NDArray[np.float64], now_ms: float, started: bool) -> int:
    """How many passes of a bulk run (pass end times ``times``) the per-pass simulation has
    started by ``now_ms``: the passes ended by then plus the one in flight; at an exact pass
    end, the next pass counts only if it has ``started`` (the caller's time step is past the
    point where idle workers start passes).  At least 1 (the run's first pass has started)."""
    ended = int(times.searchsorted(now_ms, side="right"))
    if ended and float(times[ended - 1]) == now_ms and not started:
        return ended
    return max(ended + 1, 1)


class _RefCounts(Protocol):
    def refs_of(self, hashes: Sequence[int]) -> list[int]: ...


def blocks_freed(pool: _RefCounts, holdings: Iterable[tuple[int, Sequence[int]]]) -> int:
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
