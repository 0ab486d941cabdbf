"""The mock SGLang worker's bulk decode runs: many decode passes computed at once.

When every running request decodes and only activated destinations (all joining now) are
queued, the passes through the first one in which a request finishes are computed at once by
:class:`SglBulkRuns`; the runtime cuts the run (:meth:`SglBulkRuns.split`) where the per-pass
simulation would be when something reaches the worker mid-run.  A run is the lazy batch's pass
counter advanced by many passes (:class:`~dmocker.engines.sglang_decode.LazyBatch`), so its start
and its cut cost one step per request.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dmocker.engines.block_pool import BlockPool
from dmocker.engines.common import blocks_freed, cut_completion, cut_point
from dmocker.engines.handoff_book import HandoffBook
from dmocker.engines.interface import Admission, PassCompletion, PassPlan
from dmocker.engines.outbox import Outbox
from dmocker.engines.sglang_decode import LazyBatch, lazy_ok
from dmocker.engines.sglang_queues import SglQueues
from dmocker.engines.sglang_request import SglRequest, SglStatus, TokenRatio
from dmocker.engines.timing import PassTiming

__all__ = ["SglBulkRuns"]


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


class SglBulkRuns:
    """Bulk decode runs of an SGLang worker's lazy batch (module docstring)."""

    def __init__(self, lazy: LazyBatch, queues: SglQueues, book: HandoffBook[SglRequest], pool: BlockPool,
                 outbox: Outbox, timing: PassTiming, ratio: TokenRatio, page: int, max_seqs: int) -> None:
        self._lazy = lazy
        self._queues = queues
        self._book = book
        self._pool = pool
        self._outbox = outbox
        self._timing = timing
        self._ratio = ratio
        self._page = page
        self._max_seqs = max_seqs
        self._inflight: _Run | None = None  # the run in flight
        self._tail = False  # the run's last pass finishes requests, applied once it has started
        self.runs = 0
        self.joins = 0  # runs whose first pass admits activated requests
        self.tails = 0  # runs whose last pass finishes requests

    def start(self, now_ms: float) -> PassPlan | None:
        """Every running request decodes, nothing is queued but activated destinations that
        all join now: until the first request finishes, each pass is the lazy decode step with
        a known batch, so the passes through that one are computed at once (None: fewer than
        two such passes, or the pool might not cover them and the per-pass path decides).  The
        first pass promotes the joiners, as a decode pass does; the completions of the last
        pass are applied once it is known to have started (:meth:`_end_tail`, from
        :meth:`split` or :meth:`finish`), so a run cut before it leaves them running."""
        queues = self._queues
        lazy = self._lazy
        running = queues.running
        promote: list[SglRequest] | None = None
        if queues.prebuilt:
            promote = list(queues.prebuilt)
            if len(running) + len(promote) > self._max_seqs:
                return None
            for r in promote:
                if not lazy_ok(r):
                    return None
        if not lazy.lazy and not lazy.load():
            return None
        k0 = lazy.k
        batch = running if promote is None else running + promote
        seqs = [r.off + k0 for r in running]
        if promote is not None:
            seqs += [r.seq for r in promote]
        left = [r.prompt + r.maxout - s for r, s in zip(batch, seqs)]
        n_pass = min(left)  # through the pass in which somebody finishes
        page = self._page
        pool = self._pool
        # a held source's SourceHeld belongs to its own pass: stop before it (prefill side)
        tail = True
        if self._book.sources:
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
            queues.prebuilt.clear()
            running.extend(promote)
            lazy.enter(promote)
            lazy.joined(promote)
            admissions = tuple(adm)
        n = len(batch)
        # summed sequence lengths before each pass (the per-pass step caps them at the pool's
        # tokens; the timing model's own cap at 1.0 gives the same floats)
        active0 = lazy.sum_off + n * k0
        times = self._timing.run_ends(now_ms, n, active0, n_pass)
        free, evicted = pool.take_undoable(need)
        ratio = self._ratio
        self._inflight = _Run(now_ms, times, k0, npg0, ratio.value, need, free, evicted)
        lazy.set_progress(k0 + n_pass, npg0)
        ratio.decay_passes(n_pass)
        lazy.passes += n_pass
        self.runs += 1
        self.joins += promote is not None
        self.tails += tail
        self._tail = tail
        end = float(times[-1])
        emitted = lazy.rids.to_numpy()
        delta = lazy.tracker.handout(emitted)
        finished: tuple[int, ...] = ()
        if tail:
            finished = tuple([r.rid for r, lf in zip(batch, left) if lf == n_pass])
        self._outbox.start(PassCompletion(end_ms=end, emitted=emitted, finished=finished, run_times=times,
                                          delta=delta))
        return PassPlan(start_ms=now_ms, end_ms=end, admissions=admissions, decode_tokens=n,
                        last_start_ms=float(times[-2]))

    def finish(self) -> None:
        """The run's completion is due (the worker's ``finish_pass``): no run is in flight any
        more, and the requests its last pass finishes complete."""
        self._inflight = None
        if self._tail:
            self._end_tail()

    def _end_tail(self) -> None:
        """The run's last pass has started: the requests it finishes complete (what the decode
        step does after it)."""
        self._tail = False
        lazy = self._lazy
        done = lazy.fin.pop(lazy.k - 1, None)
        if done is not None:
            lazy.retire(done, [])

    def split(self, now_ms: float, started: bool) -> tuple[float, float] | None:
        """Cut the run in flight where the per-pass simulation is at ``now_ms``
        (:meth:`~dmocker.engines.interface.EngineWorker.split_run`)."""
        run = self._inflight
        if run is None:
            return None
        times = run.times
        total = int(times.shape[0])
        keep = cut_point(times, now_ms, started)
        if keep >= total:
            if self._tail:
                self._end_tail()
            return None
        self._tail = False  # the finishing pass was cut off: they keep running
        npg0 = run.npg0
        lazy = self._lazy
        lazy.set_progress(run.k0 + keep, npg0)
        need = 0
        for r, p0 in zip(self._queues.running, npg0):
            need += r.npages - p0
        evicted = self._pool.untake(run.free, run.evicted, run.need, need)
        self._ratio.value = run.ratio
        self._ratio.decay_passes(keep)
        lazy.passes -= total - keep
        outbox = self._outbox
        outbox.completion, kept, end = cut_completion(outbox.completion, times, keep)
        if keep < 2:
            self._inflight = None
        else:
            self._inflight = _Run(run.start_ms, kept, run.k0, npg0, run.ratio, need, run.free, evicted)
        return end, float(kept[-2]) if keep >= 2 else run.start_ms

    def blocks_ahead(self, at_ms: float) -> int:
        """Pages the run in flight holds beyond the per-pass simulation at ``at_ms``
        (:meth:`SglangWorker.run_blocks_ahead <dmocker.engines.sglang.SglangWorker.run_blocks_ahead>`)."""
        run = self._inflight
        if run is None:
            return 0
        keep = cut_point(run.times, at_ms, True)
        if keep >= run.times.shape[0]:
            return self._tail_blocks() if self._tail else 0
        k = run.k0 + keep
        page = self._page
        need = 0
        for r, p0 in zip(self._queues.running, run.npg0):
            p = (r.off + k + page - 1) // page
            if p > p0:
                need += p - p0
        return run.need - need

    def _tail_blocks(self) -> int:
        """Pages the run's finishing requests give up when its last pass starts (what
        :meth:`_end_tail` will free): the per-pass replay has already freed them once that
        pass has started.  A held source keeps its pages; a cached page stays in use while
        someone else still references it."""
        lazy = self._lazy
        done = lazy.fin.get(lazy.k - 1, [])
        return blocks_freed(self._pool, ((r.npages, r.cached) for r in done if not r.source))

    @property
    def tail_pending(self) -> bool:
        """The run in flight's last pass finishes requests, not applied yet (tests)."""
        return self._tail
