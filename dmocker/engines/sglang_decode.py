"""The mock SGLang worker's decode fast path: an event-driven running batch and bulk decode runs.

Why event-driven: between two changes of a decode batch (a request joins or leaves, a
retraction, an extend batch) every pass is the same step -- each running request gains one
token, and a new page whenever its tokens fill the ones it holds.  So instead of touching every
request every pass, the batch keeps a pass counter ``k`` and each request its offset
(``seq = off + k``), and files each request under the pass at which it next needs a page and
the pass at which it finishes.  A pass then costs the requests that need a page or finish in it
(one in 64 passes per request at page 64), not the batch size: the summed sequence length that
times the pass is ``sum(off) + n * k``.  That pays on small batches (the Mooncake trace's decode
batches average ~2.6 requests, where numpy's per-call cost outweighs any vector work) and on
large ones alike.

While the batch is *lazy* the objects' ``seq`` / ``materialized`` are stale (``npages`` is kept
current); :meth:`SglDecodePath._sync_running` writes them back before any other code path reads
them (extend batch, retraction, aborts, invariant checks).  Anything unusual (a page shortage
that needs retraction, a request with nothing to generate, unpublished prompt pages) takes the
per-request step of :mod:`dmocker.engines.sglang` instead; a Hypothesis test replays random
workloads through both and demands identical output.

Bulk decode runs (``start_pass(now, bulk=True)``): when every running request decodes and only
activated destinations (all joining now) are queued, the passes through the first one in which
a request finishes are computed at once; the runtime cuts the run (:meth:`split_run`) where the
per-pass simulation would be when something reaches the worker mid-run.  A run is the same
counter advanced by many passes, so its start and its cut cost one step per request.
"""

from __future__ import annotations

from collections import deque
from typing import cast

import numpy as np
import numpy.typing as npt

from dmocker.engines.handoff_base import HandoffWorkerBase
from dmocker.engines.common import BatchIds, BatchTracker, blocks_freed, cut_completion, cut_point
from dmocker.engines.interface import Admission, BatchDelta, PassCompletion, PassPlan
from dmocker.engines.sglang_request import SglRequest, SglStatus
from dmocker.engines.timing import PassTiming

__all__ = ["SglDecodePath"]

I64 = npt.NDArray[np.int64]


def _position(items: list[SglRequest], item: SglRequest) -> int:
    """Where ``item`` is in ``items``, by identity (it is there)."""
    i = 0
    for x in items:
        if x is item:
            return i
        i += 1
    raise ValueError("not in the batch")


def _lazy_ok(r: SglRequest) -> bool:
    """Whether ``r`` can decode on the event-driven path: all its prompt pages published, its KV
    complete, and at least one token left to generate."""
    return r.pub >= len(r.hashes) and r.materialized == r.seq and r.seq < r.prompt + r.maxout


class _Run:
    """A bulk decode run in flight: what cutting it needs (the state before it)."""

    __slots__ = ("start_ms", "times", "k0", "npg0", "ratio", "need", "free", "evicted")

    def __init__(self, start_ms: float, times: npt.NDArray[np.float64], k0: int, npg0: list[int],
                 ratio: float, need: int, free: int, evicted: list[int]) -> None:
        self.start_ms = start_ms
        self.times = times
        self.k0 = k0  # pass counter before the run
        self.npg0 = npg0  # pages of each running request before the run
        self.ratio = ratio
        self.need = need  # pages taken
        self.free = free  # free pages before
        self.evicted = evicted  # cached pages evicted for it, oldest first


class SglDecodePath(HandoffWorkerBase[SglRequest]):
    """Base of :class:`~dmocker.engines.sglang.SglangWorker`: the lazy running batch and bulk
    runs (module docstring).  The worker sets the attributes below and calls
    :meth:`_init_decode_path` in its ``__init__``."""

    new_token_ratio: float
    _running: list[SglRequest]
    _prebuilt: deque[SglRequest]
    _page: int
    _total_tokens: int
    _timing: PassTiming
    _allow_vec: bool
    _min_ratio: float
    _decay: float
    _completion: PassCompletion | None

    def _init_decode_path(self) -> None:
        self._lazy = False  # the running batch is event-driven (objects' seq stale)
        self._k = 0  # passes decoded by the lazy batch (seq = off + k)
        self._grow: dict[int, list[SglRequest]] = {}  # pass -> requests that take a page in it
        self._fin: dict[int, list[SglRequest]] = {}  # pass -> requests that finish in it
        self._sum_off = 0  # sum of the running requests' offsets
        self._rids = BatchIds()  # ids of the running batch, in order, while lazy
        self._batch = BatchTracker()  # joins and leaves between handed-out arrays, while lazy
        self.vectorized_passes = 0
        self._bulk: _Run | None = None  # the bulk decode run in flight (start_pass(bulk=True))
        self._tail = False  # the run's last pass finishes requests, applied once it has started
        self.bulk_runs = 0
        self.bulk_joins = 0  # runs whose first pass admits activated requests
        self.bulk_tails = 0  # runs whose last pass finishes requests

    def _complete(self, r: SglRequest) -> None:
        raise NotImplementedError

    # --- the lazy batch ------------------------------------------------------------------------

    def _enter(self, r: SglRequest) -> None:
        """File running request ``r`` (fresh object, :func:`_lazy_ok`) in the lazy batch."""
        k = self._k
        off = r.seq - k
        r.off = off
        self._sum_off += off
        self._rids.append(r.rid)
        at = r.npages * self._page - off  # the pass whose token no longer fits its pages
        grow = self._grow.get(at)
        if grow is None:
            self._grow[at] = [r]
        else:
            grow.append(r)
        at = r.prompt + r.maxout - 1 - off  # the pass that yields its last token
        fin = self._fin.get(at)
        if fin is None:
            self._fin[at] = [r]
        else:
            fin.append(r)

    def _vec_load(self) -> bool:
        """Make the running batch lazy (False: a request needs the per-request step)."""
        run = self._running
        for r in run:
            if not _lazy_ok(r):
                return False
        for r in run:
            self._enter(r)
        self._lazy = True
        self._batch.reset()
        return True

    def _vec_append(self, added: list[SglRequest]) -> None:
        """Requests appended to ``_running`` while the batch is lazy (their objects are fresh)."""
        ok = True
        for r in added:
            self._enter(r)  # (a fresh object's offset writes its own seq back unchanged)
            ok = ok and _lazy_ok(r)
        self._emit_appended(added)
        if not ok:
            self._sync_running()

    def _sync_running(self) -> None:
        """Write the lazy batch back into the running objects and leave the fast path."""
        if not self._lazy:
            return
        self._lazy = False
        k = self._k
        for r in self._running:
            seq = r.off + k
            d = seq - r.seq
            if d:
                r.seq = seq
                r.materialized += d
        self._grow = {}
        self._fin = {}
        self._sum_off = 0
        self._rids = BatchIds()
        self._batch.reset()

    # The emitted-ids array is ``_rids.to_numpy()``: the same array while the batch keeps its
    # members, a new one after a change (handed-out arrays are never mutated; the collector's
    # same-array shortcut relies on it).  The tracker records the joins and leaves between them.

    def _emit_appended(self, added: list[SglRequest]) -> None:
        """``added`` entered the batch (appended to ``_rids``)."""
        self._batch.join([r.rid for r in added])

    def _emit_removed(self, done: list[SglRequest]) -> None:
        """``done`` are about to leave the batch (still in ``_rids``)."""
        batch = self._batch
        for r in done:
            batch.leave(r.rid)

    def _decode_running_vec(self, finished: list[int]) -> tuple[float, I64, BatchDelta | None] | None:
        """The per-request decode step over the whole running batch, for the common case:
        nobody is done before the step and the pool covers every page growth (no retraction).
        Returns (decode ms, emitted ids, their BatchDelta), or None when the per-request step must run instead."""
        run = self._running
        if not run or not self._allow_vec:
            return None
        if not self._lazy and not self._vec_load():
            return None
        # (nobody is done before the step: requests with nothing to generate never enter the
        # lazy batch, and those that finish leave it)
        k = self._k
        # The pass index boxed once for its dict lookups (an ``int`` key is boxed at every use),
        # and a lookup then a delete where ``dict.pop`` is a generic method call.
        key: object = k
        grows = cast("dict[object, list[SglRequest]]", self._grow)
        grow = grows.get(key)
        need = len(grow) if grow is not None else 0
        pool = self.pool
        if pool.available < need:
            return None
        n = len(run)
        decode_ms = self._timing.decode_ms(n, min(self._sum_off + n * k, self._total_tokens))
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
        self._k = k + 1
        self.vectorized_passes += 1
        emitted = self._rids.to_numpy()
        delta = self._batch.handout(emitted)
        fins = cast("dict[object, list[SglRequest]]", self._fin)
        done = fins.get(key)
        if done is not None:
            del fins[key]
            self._retire(done, finished)
        return decode_ms, emitted, delta

    def _retire(self, done: list[SglRequest], finished: list[int]) -> None:
        """Running requests that yielded their last token in the pass just counted: write
        their state back, drop them from the batch, complete them (in batch order)."""
        run = self._running
        # Positions found by identity, once: ``list.remove`` / ``index`` compare every request
        # passed with ``==`` (a generic rich comparison each), and the ids list by value.
        if len(done) == 1:
            places = [_position(run, done[0])]
        else:
            located = sorted([(_position(run, r), r) for r in done])  # batch order
            done = [r for _, r in located]
            places = [p for p, _ in located]
        k = self._k
        page = self._page
        grow = self._grow
        self._emit_removed(done)
        for r in done:
            seq = r.off + k
            r.materialized += seq - r.seq
            r.seq = seq
            at = r.npages * page - r.off
            filed = grow[at]
            filed.pop(_position(filed, r))
            if not filed:
                del grow[at]
            self._sum_off -= r.off
        rids = self._rids
        for p in reversed(places):  # last first: the earlier positions stay valid
            run.pop(p)
            rids.remove_at(p)
        for r in done:
            finished.append(r.rid)
            self._complete(r)

    def _set_progress(self, k: int, npg0: list[int]) -> None:
        """Put the lazy batch at pass ``k``, its requests' pages grown from ``npg0`` as the
        passes since would have grown them (a bulk run applied, or cut)."""
        self._k = k
        page = self._page
        grow: dict[int, list[SglRequest]] = {}
        for r, p0 in zip(self._running, npg0):
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

    # --- bulk decode runs ---------------------------------------------------------------------

    def _start_run(self, now_ms: float) -> PassPlan | None:
        """Every running request decodes, nothing is queued but activated destinations that
        all join now: until the first request finishes, each pass is the lazy decode step with
        a known batch, so the passes through that one are computed at once (None: fewer than
        two such passes, or the pool might not cover them and the per-pass path decides).  The
        first pass promotes the joiners, as a decode pass does; the completions of the last
        pass are applied once it is known to have started (:meth:`_end_run_tail`, from
        :meth:`split_run` or :meth:`finish_pass`), so a run cut before it leaves them
        running."""
        promote: list[SglRequest] | None = None
        if self._prebuilt:
            promote = list(self._prebuilt)
            if len(self._running) + len(promote) > self.args.max_num_seqs:
                return None
            for r in promote:
                if not _lazy_ok(r):
                    return None
        if not self._lazy and not self._vec_load():
            return None
        k0 = self._k
        batch = self._running if promote is None else self._running + promote
        seqs = [r.off + k0 for r in self._running]
        if promote is not None:
            seqs += [r.seq for r in promote]
        left = [r.prompt + r.maxout - s for r, s in zip(batch, seqs)]
        n_pass = min(left)  # through the pass in which somebody finishes
        page = self._page
        pool = self.pool
        # a held source's SourceHeld belongs to its own pass: stop before it (prefill side)
        tail = True
        if self._sources:
            tail = not any(r.source for r, lf in zip(batch, left) if lf == n_pass)
        if not tail:
            n_pass -= 1
        npg0 = [r.npages for r in batch]
        need = 0
        for s, p in zip(seqs, npg0):
            p1 = (s + n_pass + page - 1) // page  # pages for seq + n_pass
            if p1 > p:
                need += p1 - p
        if need > pool.available:
            if not tail:
                return None
            tail = False  # the per-pass path decides the finishing pass
            n_pass -= 1
            need = 0
            for s, p in zip(seqs, npg0):
                p1 = (s + n_pass + page - 1) // page
                if p1 > p:
                    need += p1 - p
            if need > pool.available:
                return None
        if n_pass < 2:
            return None
        admissions: tuple[Admission, ...] = ()
        if promote is not None:
            adm: list[Admission] = []
            for r in promote:
                r.status = SglStatus.RUNNING
                adm.append(Admission(r.rid, 0))
            self._prebuilt.clear()
            self._running.extend(promote)
            for r in promote:
                self._enter(r)
            self._emit_appended(promote)
            admissions = tuple(adm)
        n = len(batch)
        # summed sequence lengths before each pass (the per-pass step caps them at the pool's
        # tokens; the timing model's own cap at 1.0 gives the same floats)
        active0 = self._sum_off + n * k0
        times = self._timing.run_ends(now_ms, n, active0, n_pass)
        free, evicted = pool.take_undoable(need)
        self._bulk = _Run(now_ms, times, k0, npg0, self.new_token_ratio, need, free, evicted)
        self._set_progress(k0 + n_pass, npg0)
        self._decay_ratio(n_pass)
        self.vectorized_passes += n_pass
        self.bulk_runs += 1
        self.bulk_joins += promote is not None
        self.bulk_tails += tail
        self._tail = tail
        end = float(times[-1])
        emitted = self._rids.to_numpy()
        delta = self._batch.handout(emitted)
        finished: tuple[int, ...] = ()
        if tail:
            finished = tuple([r.rid for r, lf in zip(batch, left) if lf == n_pass])
        self._completion = PassCompletion(end_ms=end, emitted=emitted, finished=finished, run_times=times,
                                          delta=delta)
        self._busy = True
        return PassPlan(start_ms=now_ms, end_ms=end, admissions=admissions, decode_tokens=n,
                        last_start_ms=float(times[-2]))

    def _end_run_tail(self) -> None:
        """The run's last pass has started: the requests it finishes complete (what the decode
        step does after it)."""
        self._tail = False
        done = self._fin.pop(self._k - 1, None)
        if done is not None:
            self._retire(done, [])

    def _decay_ratio(self, passes: int) -> None:
        ratio, floor, decay = self.new_token_ratio, self._min_ratio, self._decay
        while passes > 0 and ratio > floor:
            ratio = max(ratio - decay, floor)
            passes -= 1
        self.new_token_ratio = ratio

    def split_run(self, now_ms: float, started: bool) -> tuple[float, float] | None:
        run = self._bulk
        if run is None:
            return None
        times = run.times
        total = int(times.shape[0])
        keep = cut_point(times, now_ms, started)
        if keep >= total:
            if self._tail:
                self._end_run_tail()
            return None
        self._tail = False  # the finishing pass was cut off: they keep running
        npg0 = run.npg0
        self._set_progress(run.k0 + keep, npg0)
        need = 0
        for r, p0 in zip(self._running, npg0):
            need += r.npages - p0
        evicted = self.pool.untake(run.free, run.evicted, run.need, need)
        self.new_token_ratio = run.ratio
        self._decay_ratio(keep)
        self.vectorized_passes -= total - keep
        self._completion, kept, end = cut_completion(self._completion, times, keep)
        if keep < 2:
            self._bulk = None
        else:
            self._bulk = _Run(run.start_ms, kept, run.k0, npg0, run.ratio, need, run.free, evicted)
        return end, float(kept[-2]) if keep >= 2 else run.start_ms

    def run_blocks_ahead(self, at_ms: float) -> int:
        run = self._bulk
        if run is None:
            return 0
        keep = cut_point(run.times, at_ms, True)
        if keep >= run.times.shape[0]:
            return self._tail_blocks() if self._tail else 0
        k = run.k0 + keep
        page = self._page
        need = 0
        for r, p0 in zip(self._running, run.npg0):
            p = (r.off + k + page - 1) // page
            if p > p0:
                need += p - p0
        return run.need - need

    def _tail_blocks(self) -> int:
        """Pages the run's finishing requests give up when its last pass starts (what
        :meth:`_end_run_tail` will free): the per-pass replay has already freed them once that
        pass has started.  A held source keeps its pages; a cached page stays in use while
        someone else still references it."""
        done = self._fin.get(self._k - 1, [])
        return blocks_freed(self.pool, ((r.npages, r.cached) for r in done if not r.source))

    def _check_lazy(self) -> None:
        """Assert that the lazy batch files every running request where it belongs (tests)."""
        if not self._lazy:
            return
        run = self._running
        k, page = self._k, self._page
        assert self._rids.tolist() == [r.rid for r in run], (self._rids, run)
        assert self._rids.to_numpy().tolist() == self._rids.tolist(), self._rids
        assert self._sum_off == sum(r.off for r in run)
        grow = sorted((at, r.rid) for at, filed in self._grow.items() for r in filed)
        assert grow == sorted((r.npages * page - r.off, r.rid) for r in run), grow
        fin = sorted((at, r.rid) for at, filed in self._fin.items() for r in filed)
        assert fin == sorted((r.prompt + r.maxout - 1 - r.off, r.rid) for r in run), fin
        for r in run:
            assert r.off + k <= r.npages * page, (r.rid, r.off + k, r.npages)
            # (a run's last pass, applied but not yet known to have started, finishes some)
            assert r.off + k < r.prompt + r.maxout + self._tail, (r.rid, r.off + k)
