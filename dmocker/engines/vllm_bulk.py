"""The mock vLLM worker's bulk decode runs: many lockstep passes computed at once.

While the batch is in lockstep and nothing is queued but activated destinations that all join
now, every pass through the next completion is determined (the batch, each pass's block demand,
its decode time), so :class:`BulkRuns` computes those passes at once and the runtime cuts the
run (:meth:`BulkRuns.split`) where the per-pass simulation would be when something reaches the
worker mid-run.  Differential tests replay random workloads pass by pass and in bulk and demand
identical output.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate

import numpy as np
import numpy.typing as npt

from dmocker.engines.block_pool import BlockPool
from dmocker.engines.common import blocks_freed, ceil_div, cut_completion, cut_point
from dmocker.engines.interface import Admission, EngineArgs, PassCompletion, PassPlan
from dmocker.engines.outbox import Outbox
from dmocker.engines.timing import PassTiming
from dmocker.engines.vllm_lockstep import LockstepBatch
from dmocker.engines.vllm_queues import VllmQueues
from dmocker.engines.vllm_request import Demand, VllmRequest, VllmStatus, blocks_through

__all__ = ["BulkRuns"]


class BulkRuns:
    """Bulk decode runs of a vLLM worker's lockstep batch (module docstring)."""

    def __init__(self, args: EngineArgs, block_size: int, lock: LockstepBatch, queues: VllmQueues, pool: BlockPool,
                 outbox: Outbox, timing: PassTiming) -> None:
        self._lock = lock
        self._queues = queues
        self._pool = pool
        self._outbox = outbox
        self._timing = timing
        self._bs = block_size
        self._mml = args.max_model_len
        self._max_seqs = args.max_num_seqs
        self._mbt = args.max_num_batched_tokens
        # the run in flight: (start ms, pass end times, pass counter before, block demand, free
        # blocks before, blocks evicted)
        self._inflight: tuple[float, npt.NDArray[np.float64], int, Demand, int, list[int]] | None = None
        self._tail = -1  # the run's last pass finishes requests, applied once it has started
        self.runs = 0
        self.joins = 0  # runs whose first pass admits activated requests
        self.tails = 0  # runs whose last pass finishes requests

    def start(self, now_ms: float) -> PassPlan | None:
        """Lockstep with nothing queued but activated destinations that all join now: every
        pass through the next completion is determined (the batch, each pass's block demand,
        its decode time), so those passes are computed at once, as far as the pool surely
        covers their blocks (None: fewer than two).  The first pass admits the joiners (as a
        lockstep pass does: they need no block in it); the last pass may be the one where
        requests finish: that completion is applied when the run's last pass is known to have
        started (:meth:`_end_tail`, from :meth:`split` or :meth:`finish`), so a run
        cut before it leaves them running."""
        lock = self._lock
        queues = self._queues
        run = queues.run
        n = len(run)
        mbt = self._mbt
        K = lock.k
        k = K + 1
        bs = self._bs
        finish_at = lock.finish_at
        kf = min(finish_at) if finish_at else -1
        joiners: list[VllmRequest] | None = None
        if queues.waiting:
            joiners = list(queues.waiting)
            n += len(joiners)
            if n > mbt or n > self._max_seqs:
                return None
            mml = self._mml
            for r in joiners:
                # materialized (no prefill), not rejected, and emitting at least twice
                if (r.computed < r.prompt or r.nblocks * bs < r.prompt or r.limit < 2
                        or (mml is not None and r.prompt >= mml)):
                    return None
                if kf < 0 or r.limit + K < kf:
                    kf = r.limit + K  # its finishing pass: limit - off with off = 1 - k
        elif n > mbt:
            return None
        if kf < 0:
            return None
        n_pass = kf - K  # through the first pass in which somebody finishes
        if n_pass < 2:
            return None
        # Block demand of pass k + i is rot[i % bs] (a request's bucket comes round every bs
        # passes), so the blocks the first j passes take have a closed form (blocks_through).
        bcount = lock.bcount
        k0 = k % bs
        rot = bcount[k0:] + bcount[:k0]
        adj = 0
        if joiners is not None:
            first = rot[0]
            for r in joiners:
                rot[(1 - r.prompt) % bs] += 1  # its bucket (1 + k - prompt) % bs, relative to k
            adj = rot[0] - first  # joiners need no block in the pass that admits them
        demand = (list(accumulate(rot, initial=0)), adj)
        need = blocks_through(demand, n_pass)
        available = self._pool.available
        tail = kf
        if need > available:
            n_pass = bisect_right(range(n_pass + 1), available, key=lambda j: blocks_through(demand, j)) - 1
            if n_pass < 2:
                return None
            need = blocks_through(demand, n_pass)
            tail = -1
        elif any(r.source for r in finish_at.get(kf, ())):
            tail = -1  # a held source's SourceHeld belongs to its own pass: stop before it
            n_pass -= 1
            if n_pass < 2:
                return None
            need = blocks_through(demand, n_pass)
        admissions: tuple[Admission, ...] = ()
        if joiners is not None:
            queues.waiting.clear()
            adm: list[Admission] = []
            joined: list[int] = []
            sum_po = lock.sum_po
            for r in joiners:
                r.status = VllmStatus.RUNNING
                adm.append(Admission(r.rid, 0))
                run[r.rid] = r
                r.off = 1 - k
                r.bkt = (2 - r.prompt - r.off) % bs
                bcount[r.bkt] += 1
                sum_po += r.prompt + r.off
                r.kf = r.limit - r.off
                finish_at.setdefault(r.kf, []).append(r)
                joined.append(r.rid)
            lock.sum_po = sum_po
            lock.join_batch(joined)
            admissions = tuple(adm)
        active0 = lock.sum_po + n * K  # summed sequence lengths before pass k's sample
        times = self._timing.run_ends(now_ms, n, active0, n_pass)
        free, evicted = self._pool.take_undoable(need)
        self._inflight = (now_ms, times, K, demand, free, evicted)
        self._tail = tail
        lock.k = K + n_pass
        lock.passes += n_pass
        self.runs += 1
        self.joins += joiners is not None
        self.tails += tail >= 0
        end = float(times[-1])
        finished: tuple[int, ...] = ()
        if tail >= 0:
            finished = tuple([r.rid for r in finish_at[tail]])
        emitted = lock.running_ids()
        self._outbox.start(PassCompletion(end_ms=end, emitted=emitted, finished=finished, run_times=times,
                                          delta=lock.tracker.handout(emitted)))
        return PassPlan(start_ms=now_ms, end_ms=end, admissions=admissions, decode_tokens=n,
                        last_start_ms=float(times[-2]))

    def finish(self) -> None:
        """The run's completion is due (the worker's ``finish_pass``): no run is in flight any
        more, and the requests its last pass finishes complete."""
        self._inflight = None
        if self._tail >= 0:
            self._end_tail()

    def _end_tail(self) -> None:
        """The run's last pass has started: its finishing requests complete (what the lockstep
        pass does at its start for them)."""
        lock = self._lock
        k = self._tail
        self._tail = -1
        finishing = lock.finish_at.pop(k)
        queues = self._queues
        run = queues.run
        bs = self._bs
        bcount = lock.bcount
        lock.running_ids()  # (tracked from here)
        lock.leave_batch(finishing)
        for r in finishing:
            del run[r.rid]
            bcount[r.bkt] -= 1
            lock.sum_po -= r.prompt + r.off
            r.seq = r.prompt + r.limit
            r.computed = r.seq - 1
            r.nblocks = ceil_div(r.computed, bs)
            queues.complete(r)
        if not run:
            lock.locked = False

    def split(self, now_ms: float, started: bool) -> tuple[float, float] | None:
        """Cut the run in flight where the per-pass simulation is at ``now_ms``
        (:meth:`~dmocker.engines.interface.EngineWorker.split_run`)."""
        run = self._inflight
        if run is None:
            return None
        start, times, K, demand, free, evicted = run
        total = int(times.shape[0])
        keep = cut_point(times, now_ms, started)
        if keep >= total:
            if self._tail >= 0:
                self._end_tail()
            return None
        self._tail = -1  # the finishing pass was cut off: they keep running
        evicted = self._pool.untake(free, evicted, blocks_through(demand, total), blocks_through(demand, keep))
        lock = self._lock
        lock.k = K + keep
        lock.passes -= total - keep
        outbox = self._outbox
        outbox.completion, kept, end = cut_completion(outbox.completion, times, keep)
        self._inflight = (start, kept, K, demand, free, evicted) if keep >= 2 else None
        return end, float(kept[-2]) if keep >= 2 else start

    def blocks_ahead(self, at_ms: float) -> int:
        """KV blocks the run in flight holds beyond the per-pass simulation at ``at_ms``
        (:meth:`VllmWorker.run_blocks_ahead <dmocker.engines.vllm.VllmWorker.run_blocks_ahead>`)."""
        run = self._inflight
        if run is None:
            return 0
        times, demand = run[1], run[3]
        total = int(times.shape[0])
        keep = cut_point(times, at_ms, True)
        if keep < total:
            return blocks_through(demand, total) - blocks_through(demand, keep)
        return self._tail_blocks() if self._tail >= 0 else 0

    def _tail_blocks(self) -> int:
        """Blocks the run's finishing requests give up when its last pass starts (what
        :meth:`_end_tail` will free): the per-pass replay has already freed them once that
        pass has started.  A held source keeps its blocks; a cached block stays in use while
        someone else still references it."""
        bs = self._bs
        return blocks_freed(self._pool, ((ceil_div(r.prompt + r.limit - 1, bs), r.cached)
                                         for r in self._lock.finish_at[self._tail] if not r.source))
