"""The mock SGLang worker's bulk decode runs: many decode passes computed at once.

When every running request decodes and only activated destinations (all joining now) are
queued, the passes through the first one in which a request finishes are computed at once by
:class:`LazyRuns`; :class:`~dmocker.engines.bulk_run.BulkRuns` keeps the run in flight and cuts
it where the per-pass simulation would be when something reaches the worker mid-run.  A run is
the lazy batch's pass counter advanced by many passes
(:class:`~dmocker.engines.sglang_decode.LazyBatch`), so its start and its cut cost one step per
request.
"""

from __future__ import annotations

from dmocker.engines.block_pool import BlockPool
from dmocker.engines.bulk_run import RunModel, RunStart
from dmocker.engines.common import blocks_freed
from dmocker.engines.handoff_book import HandoffBook
from dmocker.engines.interface import Admission
from dmocker.engines.sglang_decode import LazyBatch, lazy_ok
from dmocker.engines.sglang_queues import SglQueues
from dmocker.engines.sglang_request import SglRequest, SglStatus, TokenRatio
from dmocker.engines.timing import PassTiming

__all__ = ["LazyRuns"]


def _growth(seqs: list[int], pages: list[int], passes: int, page: int) -> int:
    """The pages requests of sequence lengths ``seqs``, holding ``pages``, take in ``passes``
    more decode passes."""
    need = 0
    for s, p in zip(seqs, pages):
        p1 = (s + passes + page - 1) // page  # pages for seq + passes
        if p1 > p:
            need += p1 - p
    return need


class LazyRuns(RunModel):
    """Bulk decode runs of an SGLang worker's lazy batch (module docstring)."""

    def __init__(self, lazy: LazyBatch, queues: SglQueues, book: HandoffBook[SglRequest], pool: BlockPool,
                 timing: PassTiming, ratio: TokenRatio, page: int, max_seqs: int) -> None:
        self._lazy = lazy
        self._queues = queues
        self._book = book
        self._pool = pool
        self._timing = timing
        self._ratio = ratio
        self._page = page
        self._max_seqs = max_seqs
        # the run in flight: the state before it (pass counter, each running request's pages,
        # the new-token ratio)
        self._k0 = 0
        self._npg0: list[int] = []
        self._ratio0 = 0.0

    def begin(self, now_ms: float) -> RunStart | None:
        """Every running request decodes, nothing is queued but activated destinations that
        all join now: until the first request finishes, each pass is the lazy decode step with
        a known batch, so the passes through that one are computed at once (None: fewer than
        two such passes, or the pool might not cover them and the per-pass path decides).  The
        first pass promotes the joiners, as a decode pass does; the completions of the last
        pass are applied once it is known to have started (:meth:`end_tail`), so a run cut before
        it leaves them running."""
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
        need = _growth(seqs, npg0, n_pass, page)
        if need > pool.available:
            if not tail:
                return None
            tail = False  # the per-pass path decides the finishing pass
            n_pass -= 1
            need = _growth(seqs, npg0, n_pass, page)
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
        ratio = self._ratio
        self._k0 = k0
        self._npg0 = npg0
        self._ratio0 = ratio.value
        lazy.set_progress(k0 + n_pass, npg0)
        ratio.decay_passes(n_pass)
        lazy.passes += n_pass
        emitted = lazy.rids.to_numpy()
        delta = lazy.tracker.handout(emitted)
        finished: tuple[int, ...] = ()
        if tail:
            finished = tuple([r.rid for r, lf in zip(batch, left) if lf == n_pass])
        return RunStart(times, need, admissions, emitted, delta, finished, promote is not None, tail)

    def end_tail(self) -> None:
        """(What the decode step does after the pass for them.)"""
        lazy = self._lazy
        done = lazy.fin.pop(lazy.k - 1, None)
        if done is not None:
            lazy.retire(done, [])

    def rewind(self, keep: int, total: int) -> int:
        npg0 = self._npg0
        lazy = self._lazy
        lazy.set_progress(self._k0 + keep, npg0)
        need = 0
        for r, p0 in zip(self._queues.running, npg0):
            need += r.npages - p0
        ratio = self._ratio
        ratio.value = self._ratio0
        ratio.decay_passes(keep)
        lazy.passes -= total - keep
        return need

    def blocks_kept(self, keep: int) -> int:
        k = self._k0 + keep
        page = self._page
        need = 0
        for r, p0 in zip(self._queues.running, self._npg0):
            p = (r.off + k + page - 1) // page
            if p > p0:
                need += p - p0
        return need

    def tail_blocks(self) -> int:
        lazy = self._lazy
        done = lazy.fin.get(lazy.k - 1, [])
        return blocks_freed(self._pool, ((r.npages, r.cached) for r in done if not r.source))
