"""The mock vLLM worker's bulk decode runs: many lockstep passes computed at once.

While the batch is in lockstep and nothing is queued but activated destinations that all join
now, every pass through the next completion is determined (the batch, each pass's block demand,
its decode time), so :class:`LockstepRuns` computes those passes at once;
:class:`~dmocker.engines.bulk_run.BulkRuns` keeps the run in flight and cuts it where the
per-pass simulation would be when something reaches the worker mid-run.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate

from dmocker.engines.block_pool import BlockPool
from dmocker.engines.bulk_run import RunModel, RunStart
from dmocker.engines.common import blocks_freed, ceil_div
from dmocker.engines.interface import Admission, EngineArgs
from dmocker.engines.timing import PassTiming
from dmocker.engines.vllm_lockstep import LockstepBatch
from dmocker.engines.vllm_queues import VllmQueues
from dmocker.engines.vllm_request import Demand, VllmRequest, VllmStatus, blocks_through

__all__ = ["LockstepRuns"]


class LockstepRuns(RunModel):
    """Bulk decode runs of a vLLM worker's lockstep batch (module docstring)."""

    def __init__(self, args: EngineArgs, block_size: int, lock: LockstepBatch, queues: VllmQueues, pool: BlockPool,
                 timing: PassTiming) -> None:
        self._lock = lock
        self._queues = queues
        self._pool = pool
        self._timing = timing
        self._bs = block_size
        self._mml = args.max_model_len
        self._max_seqs = args.max_num_seqs
        self._mbt = args.max_num_batched_tokens
        # the run in flight: the pass counter before it, and its block demand
        self._k0 = 0
        self._demand: Demand = ([0], 0)

    def begin(self, now_ms: float) -> RunStart | None:
        """Lockstep with nothing queued but activated destinations that all join now: every
        pass through the next completion is determined (the batch, each pass's block demand,
        its decode time), so those passes are computed at once, as far as the pool surely
        covers their blocks (None: fewer than two).  The first pass admits the joiners (as a
        lockstep pass does: they need no block in it); the last pass may be the one where
        requests finish: they complete when it is known to have started (:meth:`end_tail`),
        so a run cut before it leaves them running."""
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
                if not queues.materialized(r) or r.limit < 2 or (mml is not None and r.prompt >= mml):
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
            for r in joiners:
                r.status = VllmStatus.RUNNING
                adm.append(Admission(r.rid, 0))
                run[r.rid] = r
                r.off = 1 - k
                lock.file(r)
                joined.append(r.rid)
            lock.join_batch(joined)
            admissions = tuple(adm)
        active0 = lock.sum_po + n * K  # summed sequence lengths before pass k's sample
        times = self._timing.run_ends(now_ms, n, active0, n_pass)
        self._k0 = K
        self._demand = demand
        lock.k = K + n_pass  # (the tail's pass, when the run has one)
        lock.passes += n_pass
        finished: tuple[int, ...] = ()
        if tail >= 0:
            finished = tuple([r.rid for r in finish_at[tail]])
        emitted = lock.running_ids()
        return RunStart(times, need, admissions, emitted, lock.tracker.handout(emitted), finished,
                        joiners is not None, tail >= 0)

    def end_tail(self) -> None:
        """(What the lockstep pass does at its start for them.)"""
        lock = self._lock
        finishing = lock.finish_at.pop(lock.k)
        lock.running_ids()  # (tracked from here)
        lock.retire(finishing)
        if not self._queues.run:
            lock.locked = False

    def rewind(self, keep: int, total: int) -> int:
        lock = self._lock
        lock.k = self._k0 + keep
        lock.passes -= total - keep
        return blocks_through(self._demand, keep)

    def blocks_kept(self, keep: int) -> int:
        return blocks_through(self._demand, keep)

    def tail_blocks(self) -> int:
        bs = self._bs
        lock = self._lock
        return blocks_freed(self._pool, ((ceil_div(r.prompt + r.limit - 1, bs), r.cached)
                                         for r in lock.finish_at[lock.k] if not r.source))
