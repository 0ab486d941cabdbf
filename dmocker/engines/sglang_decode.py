"""The mock SGLang worker's decode fast path: an event-driven running batch.

Why event-driven: between two changes of a decode batch (a request joins or leaves, a
retraction, an extend batch) every pass is the same step -- each running request gains one
token, and a new page whenever its tokens fill the ones it holds.  So instead of touching every
request every pass, :class:`LazyBatch` keeps a pass counter ``k`` and each request its offset
(``seq = off + k``), and files each request under the pass at which it next needs a page and
the pass at which it finishes.  A pass then costs the requests that need a page or finish in it
(one in 64 passes per request at page 64), not the batch size: the summed sequence length that
times the pass is ``sum(off) + n * k``.

While the batch is *lazy* the objects' ``seq`` / ``materialized`` are stale (``npages`` is kept
current); :meth:`LazyBatch.sync` writes them back before any other code path reads them
(extend batch, retraction, aborts, invariant checks).  Anything unusual (a page shortage that
needs retraction, a request with nothing to generate, unpublished prompt pages) takes the
per-request step of :mod:`dmocker.engines.sglang_scheduler` instead; a Hypothesis test replays
random workloads through both and demands identical output.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import numpy.typing as npt

from dmocker.engines.block_pool import BlockPool
from dmocker.engines.common import BatchIds, BatchTracker
from dmocker.engines.interface import BatchDelta
from dmocker.engines.sglang_queues import SglQueues
from dmocker.engines.sglang_request import SglRequest
from dmocker.engines.timing import PassTiming

__all__ = ["LazyBatch", "lazy_ok"]

I64 = npt.NDArray[np.int64]


def _position(items: list[SglRequest], item: SglRequest) -> int:
    """Where ``item`` is in ``items``, by identity (it is there)."""
    i = 0
    for x in items:
        if x is item:
            return i
        i += 1
    raise ValueError("not in the batch")


def lazy_ok(r: SglRequest) -> bool:
    """Whether ``r`` can decode on the event-driven path: all its prompt pages published, its KV
    complete, and at least one token left to generate."""
    return r.pub >= len(r.hashes) and r.materialized == r.seq and r.seq < r.prompt + r.maxout


class LazyBatch:
    """The event-driven running batch of an SGLang worker (module docstring).  ``allowed``
    False keeps every pass on the per-request step (tests compare the two)."""

    def __init__(self, queues: SglQueues, pool: BlockPool, timing: PassTiming, page: int, total_tokens: int,
                 allowed: bool) -> None:
        self._queues = queues
        self._pool = pool
        self._timing = timing
        self._page = page
        self._total_tokens = total_tokens
        self._allowed = allowed
        self.lazy = False  # the running batch is event-driven (objects' seq stale)
        self.k = 0  # passes decoded by the lazy batch (seq = off + k)
        self._grow: dict[int, list[SglRequest]] = {}  # pass -> requests that take a page in it
        self.fin: dict[int, list[SglRequest]] = {}  # pass -> requests that finish in it
        self.sum_off = 0  # sum of the running requests' offsets
        self.rids = BatchIds()  # ids of the running batch, in order, while lazy
        self.tracker = BatchTracker()  # joins and leaves between handed-out arrays, while lazy
        self.passes = 0  # passes decoded here (telemetry, tests)

    def _enter(self, r: SglRequest) -> None:
        """File running request ``r`` (fresh object, :func:`lazy_ok`) in the lazy batch."""
        k = self.k
        off = r.seq - k
        r.off = off
        self.sum_off += off
        self.rids.append(r.rid)
        at = r.npages * self._page - off  # the pass whose token no longer fits its pages
        grow = self._grow.get(at)
        if grow is None:
            self._grow[at] = [r]
        else:
            grow.append(r)
        at = r.prompt + r.maxout - 1 - off  # the pass that yields its last token
        fin = self.fin.get(at)
        if fin is None:
            self.fin[at] = [r]
        else:
            fin.append(r)

    def load(self) -> bool:
        """Make the running batch lazy (False: a request needs the per-request step)."""
        run = self._queues.running
        for r in run:
            if not lazy_ok(r):
                return False
        for r in run:
            self._enter(r)
        self.lazy = True
        self.tracker.reset()
        return True

    def append(self, added: list[SglRequest]) -> None:
        """Requests appended to the running batch while it is lazy (their objects are fresh)."""
        ok = True
        for r in added:
            self._enter(r)  # (a fresh object's offset writes its own seq back unchanged)
            ok = ok and lazy_ok(r)
        self.joined(added)
        if not ok:
            self.sync()

    def enter(self, added: list[SglRequest]) -> None:
        """File requests just appended to the running batch (fresh objects, :func:`lazy_ok`)."""
        for r in added:
            self._enter(r)

    def sync(self) -> None:
        """Write the lazy batch back into the running objects and leave the fast path."""
        if not self.lazy:
            return
        self.lazy = False
        k = self.k
        for r in self._queues.running:
            seq = r.off + k
            d = seq - r.seq
            if d:
                r.seq = seq
                r.materialized += d
        self._grow = {}
        self.fin = {}
        self.sum_off = 0
        self.rids = BatchIds()
        self.tracker.reset()

    # The emitted-ids array is ``rids.to_numpy()``: the same array while the batch keeps its
    # members, a new one after a change (handed-out arrays are never mutated; the collector's
    # same-array shortcut relies on it).  The tracker records the joins and leaves between them.

    def joined(self, added: list[SglRequest]) -> None:
        """``added`` entered the batch (appended to ``rids``)."""
        self.tracker.join([r.rid for r in added])

    def _leaving(self, done: list[SglRequest]) -> None:
        """``done`` are about to leave the batch (still in ``rids``)."""
        batch = self.tracker
        for r in done:
            batch.leave(r.rid)

    def decode(self, finished: list[int]) -> tuple[float, I64, BatchDelta | None] | None:
        """The per-request decode step over the whole running batch, for the common case:
        nobody is done before the step and the pool covers every page growth (no retraction).
        Returns (decode ms, emitted ids, their BatchDelta), or None when the per-request step must run instead."""
        run = self._queues.running
        if not run or not self._allowed:
            return None
        if not self.lazy and not self.load():
            return None
        # (nobody is done before the step: requests with nothing to generate never enter the
        # lazy batch, and those that finish leave it)
        k = self.k
        # (one int object as the key of both dicts, which the compiled build would create anew
        # for each lookup; and a lookup then a delete, where it calls dict.pop as a Python method)
        key: object = k
        grows = cast("dict[object, list[SglRequest]]", self._grow)
        grow = grows.get(key)
        need = len(grow) if grow is not None else 0
        pool = self._pool
        if pool.available < need:
            return None
        n = len(run)
        decode_ms = self._timing.decode_ms(n, min(self.sum_off + n * k, self._total_tokens))
        if grow is not None:
            pool.take(need)
            del grows[key]
            for r in grow:
                r.npages += 1
            at: object = k + self._page
            later = grows.get(at)
            if later is None:
                grows[at] = grow
            else:
                later.extend(grow)
        self.k = k + 1
        self.passes += 1
        emitted = self.rids.to_numpy()
        delta = self.tracker.handout(emitted)
        fins = cast("dict[object, list[SglRequest]]", self.fin)
        done = fins.get(key)
        if done is not None:
            del fins[key]
            self.retire(done, finished)
        return decode_ms, emitted, delta

    def retire(self, done: list[SglRequest], finished: list[int]) -> None:
        """Running requests that yielded their last token in the pass just counted: write
        their state back, drop them from the batch, complete them (in batch order)."""
        run = self._queues.running
        # Positions found by identity, once (``list.remove`` would compare each request with ``==``).
        if len(done) == 1:
            places = [_position(run, done[0])]
        else:
            located = sorted([(_position(run, r), r) for r in done])  # batch order
            done = [r for _, r in located]
            places = [p for p, _ in located]
        k = self.k
        page = self._page
        grow = self._grow
        self._leaving(done)
        for r in done:
            seq = r.off + k
            r.materialized += seq - r.seq
            r.seq = seq
            at = r.npages * page - r.off
            filed = grow[at]
            filed.pop(_position(filed, r))
            if not filed:
                del grow[at]
            self.sum_off -= r.off
        rids = self.rids
        for p in reversed(places):  # last first: the earlier positions stay valid
            run.pop(p)
            rids.remove_at(p)
        for r in done:
            finished.append(r.rid)
            self._queues.complete(r)

    def set_progress(self, k: int, npg0: list[int]) -> None:
        """Put the lazy batch at pass ``k``, its requests' pages grown from ``npg0`` as the
        passes since would have grown them (a bulk run applied, or cut)."""
        self.k = k
        page = self._page
        grow: dict[int, list[SglRequest]] = {}
        for r, p0 in zip(self._queues.running, npg0):
            off = r.off
            p = (off + k + page - 1) // page  # pages for seq = off + k
            if p < p0:
                p = p0
            r.npages = p
            at = p * page - off
            filed = grow.get(at)
            if filed is None:
                grow[at] = [r]
            else:
                filed.append(r)
        self._grow = grow

    def check(self, tail: bool) -> None:
        """Assert that the lazy batch files every running request where it belongs (tests);
        ``tail``: a bulk run's last pass, applied but not yet known to have started, finishes
        some."""
        if not self.lazy:
            return
        run = self._queues.running
        k, page = self.k, self._page
        assert self.rids.tolist() == [r.rid for r in run], (self.rids, run)
        assert self.rids.to_numpy().tolist() == self.rids.tolist(), self.rids
        assert self.sum_off == sum(r.off for r in run)
        grow = sorted((at, r.rid) for at, filed in self._grow.items() for r in filed)
        assert grow == sorted((r.npages * page - r.off, r.rid) for r in run), grow
        fin = sorted((at, r.rid) for at, filed in self.fin.items() for r in filed)
        assert fin == sorted((r.prompt + r.maxout - 1 - r.off, r.rid) for r in run), fin
        for r in run:
            assert r.off + k <= r.npages * page, (r.rid, r.off + k, r.npages)
            assert r.off + k < r.prompt + r.maxout + tail, (r.rid, r.off + k)
