"""The mock vLLM worker's lockstep decode pass and bulk decode runs.

Hot path ("lockstep decode")
----------------------------
When every running request is decoding (its only uncomputed token is the dangling one), a
pass advances all of them by exactly one token.  The worker then keeps them *implicitly*:
request ``r`` has generated ``K + r.off`` tokens after pass ``K``, needs a new block in pass
``k`` iff ``k % block_size == r.bkt``, and finishes in pass ``r.kf``.  A pass is then O(1) plus
the requests that arrive or finish: block demand is a bucket count, completions a dict lookup,
and the emitted ids a cached numpy array.  Anything else (prefill chunks, preemption, a full
pool, a token budget smaller than the batch) materialises the explicit per-request state and
runs the exact scheduler; the worker returns to lockstep as soon as the batch allows it.  Both
paths implement the same rules, and a test replays random workloads through both.

Bulk runs (``start_pass(now, bulk=True)``) go one step further: while nothing is queued but
activated destinations that all join now, every pass through the next completion is determined
(the batch, each pass's block demand, its decode time), so those passes are computed at once and
the runtime cuts the run (:meth:`LockstepDecode.split_run`) where the per-pass simulation would
be when something reaches the worker mid-run.  Differential tests replay random workloads pass
by pass and in bulk and demand identical output.

:class:`LockstepDecode` sits between the shared handoff bookkeeping
(:class:`dmocker.engines.handoff_base.HandoffWorkerBase`) and the worker
(:class:`dmocker.engines.vllm.VllmWorker`), which owns the state declared here and the exact
scheduler these methods fall back to.
"""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate

import numpy as np
import numpy.typing as npt

from dmocker.engines.common import BatchIds, BatchTracker, blocks_freed, ceil_div, cut_completion, cut_point
from dmocker.engines.handoff_base import HandoffWorkerBase
from dmocker.engines.interface import Admission, BatchDelta, PassCompletion, PassPlan
from dmocker.engines.timing import PassTiming
from dmocker.engines.vllm_request import Demand, VllmRequest, VllmStatus, blocks_through

__all__ = ["LockstepDecode"]

I64 = npt.NDArray[np.int64]


class LockstepDecode(HandoffWorkerBase[VllmRequest]):
    """Lockstep passes and bulk runs of :class:`dmocker.engines.vllm.VllmWorker` (see module
    docstring); the worker sets every attribute declared here in its ``__init__``."""

    _bs: int
    _mml: int | None
    _is_prefill: bool
    _allow_lockstep: bool
    _logical_kv: bool
    _timing: PassTiming
    _completion: PassCompletion | None
    _run: dict[int, VllmRequest]  # running, in running order
    _lock: bool
    _K: int  # passes started so far
    _bcount: list[int]
    _sum_po: int  # sum of prompt + off over lockstep running requests
    _finish_at: dict[int, list[VllmRequest]]
    _rid_q: BatchIds | None  # ids of the batch, in running order, while tracked (None: rebuild)
    _batch: BatchTracker  # joins and leaves between the handed-out batch arrays, in lockstep
    # the bulk decode run in flight: (start ms, pass end times, K before, block demand, free
    # blocks before, blocks evicted)
    _bulk: tuple[float, npt.NDArray[np.float64], int, Demand, int, list[int]] | None
    _tail: int  # the run's last pass finishes requests, applied once it has started
    lockstep_passes: int
    bulk_runs: int
    bulk_joins: int
    bulk_tails: int

    # The worker's scheduler, which these paths fall back to (VllmWorker defines them).

    def _exact_pass(self, now_ms: float, k: int,
                    resume: tuple[int, list[Admission], list[int]] | None = None) -> PassPlan | None:
        raise NotImplementedError

    def _begin(self, now_ms: float, end: float, admissions: list[Admission], rejected: list[int],
               emitted: I64, finished: tuple[int, ...], prefill_tokens: int, n_ready: int,
               delta: BatchDelta | None = None) -> PassPlan:
        raise NotImplementedError

    def _next_waiting(self, prefer_materialized: bool) -> VllmRequest | None:
        raise NotImplementedError

    def _complete(self, r: VllmRequest) -> None:
        raise NotImplementedError

    def _drop(self, r: VllmRequest) -> None:
        raise NotImplementedError

    # --- lockstep pass -------------------------------------------------------------------------

    def _lockstep_pass(self, now_ms: float, k: int, n_before: int) -> PassPlan | None:
        """Every running request computes its dangling token and samples the next one."""
        self._K = k
        budget = self._mbt - n_before
        admissions: list[Admission] = []
        rejected: list[int] = []
        new: list[VllmRequest] = []
        exact_tail = False
        run = self._run
        max_seqs = self._max_seqs
        bs = self._bs
        while self._waiting and len(run) + len(new) < max_seqs:
            r = self._next_waiting(bool(self._pending))
            if r is None:
                break
            if self._mml is not None and r.prompt >= self._mml:
                self._drop(r)
                rejected.append(r.rid)
                continue
            if r.computed >= r.prompt and r.nblocks * bs >= r.prompt:
                self._waiting.remove(r)
                r.status = VllmStatus.RUNNING
                admissions.append(Admission(r.rid, 0))
                new.append(r)
                if budget == 0:
                    break
                continue
            if self._pending:
                break
            exact_tail = True  # a fresh admission needs the exact scheduler
            break
        if exact_tail:
            # Finish this pass exactly: running requests have computed their dangling token.
            self._materialize_mid_pass(k)
            for r in new:
                run[r.rid] = r
            return self._exact_pass(now_ms, k, resume=(budget, admissions, rejected))
        self.lockstep_passes += 1
        # decode time sees the active KV before completions free anything (as the reference)
        if self._logical_kv:
            # sequence lengths before this pass's sample: prompt + (k - 1 + off) generated
            active_tokens = self._sum_po + len(run) * (k - 1) + sum(r.prompt for r in new if r.limit > 0)
        else:
            active_tokens = self.pool.num_active_blocks * bs
        finishing = self._finish_at.pop(k, None)
        finished_ids: list[int] = []
        no_token: list[VllmRequest] = []
        joined: list[int] = []  # emitting newcomers, in the order they join `run`
        if new:
            for r in new:
                run[r.rid] = r
                r.off = 1 - k
                r.bkt = (2 - r.prompt - r.off) % bs
                if r.limit <= 0:
                    no_token.append(r)
                    continue
                joined.append(r.rid)
                self._bcount[r.bkt] += 1
                self._sum_po += r.prompt + r.off
                r.kf = r.limit - r.off
                if r.kf == k:
                    finishing = (finishing or []) + [r]
                else:
                    self._finish_at.setdefault(r.kf, []).append(r)
        if no_token:
            for r in no_token:
                del run[r.rid]
                finished_ids.append(r.rid)
                self._complete(r)
        if joined:
            # run = the batch + the joiners (no-token newcomers already left again)
            self._join_batch(joined)
        emitted = self._running_ids()
        delta = self._batch.handout(emitted)
        n_ready = len(emitted)
        if finishing:
            for r in finishing:
                del run[r.rid]
                self._bcount[r.bkt] -= 1
                self._sum_po -= r.prompt + r.off
                g = r.limit
                r.seq = r.prompt + g
                r.computed = r.seq - 1
                r.nblocks = ceil_div(r.computed, bs)
                finished_ids.append(r.rid)
                self._complete(r)
        if finishing:
            # the next batch is this one minus the leavers (a new array when the next pass
            # asks: handed-out arrays are never mutated; the collector's same-array shortcut
            # relies on it)
            self._leave_batch(finishing)
        if not run:
            self._lock = False
        decode_ms = self._timing.decode_ms(n_ready, active_tokens) if not self._is_prefill else 0.0
        if not n_ready and not finished_ids and not admissions and not rejected and not n_before:
            return None
        return self._begin(now_ms, now_ms + decode_ms, admissions, rejected, emitted,
                           tuple(finished_ids),
                           0, n_ready, delta)

    def _running_ids(self) -> I64:
        """The batch's ids as the numpy array a completion hands out: the same array while
        the batch is unchanged, else one buffer copy of the tracked ids (see BatchIds)."""
        q = self._rid_q
        if q is None:
            q = self._rid_q = BatchIds(self._run.keys())
            self._batch.reset()  # rebuilt: the changes since the last array are not known
        return q.to_numpy()

    def _join_batch(self, rids: list[int]) -> None:
        """``rids`` joined the batch (appended to ``_run``): tracked if the batch is (else the
        next array is rebuilt from ``_run``)."""
        q = self._rid_q
        if q is not None:
            q.extend(rids)
            self._batch.join(rids)

    def _leave_batch(self, leavers: list[VllmRequest]) -> None:
        """``leavers`` leave the tracked batch (``_running_ids`` was called since it changed)."""
        q = self._rid_q
        assert q is not None
        batch = self._batch
        for r in leavers:
            q.remove(r.rid)
            batch.leave(r.rid)

    def _materialize_at_rest(self) -> None:
        """Lockstep -> explicit state between passes (after pass ``K``)."""
        K = self._K
        bs = self._bs
        for r in self._run.values():
            g = K + r.off
            r.seq = r.prompt + g
            r.computed = r.seq - 1
            r.nblocks = ceil_div(r.computed, bs)
        self._leave_lockstep()

    def _materialize_mid_pass(self, k: int) -> None:
        """Lockstep -> explicit state after pass ``k``'s running phase (dangling token computed)."""
        bs = self._bs
        for r in self._run.values():
            g = k - 1 + r.off
            r.seq = r.prompt + g
            r.computed = r.seq
            r.nblocks = ceil_div(r.computed, bs)
        self._leave_lockstep()

    def _leave_lockstep(self) -> None:
        self._lock = False
        self._sum_po = 0
        self._bcount = [0] * self._bs
        self._finish_at.clear()
        self._rid_q = None
        self._batch.reset()

    def _try_enter_lockstep(self) -> None:
        """After an exact pass ``K``: switch to lockstep if every running request is decoding."""
        if not self._allow_lockstep or not self._run:
            return
        bs = self._bs
        for r in self._run.values():
            if r.computed != r.seq - 1 or r.computed < r.prompt or r.nblocks != ceil_div(r.computed, bs):
                return
        K = self._K
        bcount = [0] * bs
        finish_at: dict[int, list[VllmRequest]] = {}
        sum_po = 0
        for r in self._run.values():
            r.off = (r.seq - r.prompt) - K
            r.bkt = (2 - r.prompt - r.off) % bs
            bcount[r.bkt] += 1
            sum_po += r.prompt + r.off
            r.kf = r.limit - r.off
            finish_at.setdefault(r.kf, []).append(r)
        self._bcount = bcount
        self._sum_po = sum_po
        self._finish_at = finish_at
        self._rid_q = None
        self._batch.reset()
        self._lock = True

    # --- bulk runs ------------------------------------------------------------------------------

    def _start_run(self, now_ms: float) -> PassPlan | None:
        """Lockstep with nothing queued but activated destinations that all join now: every
        pass through the next completion is determined (the batch, each pass's block demand,
        its decode time), so those passes are computed at once, as far as the pool surely
        covers their blocks (None: fewer than two).  The first pass admits the joiners (as a
        lockstep pass does: they need no block in it); the last pass may be the one where
        requests finish: that completion is applied when the run's last pass is known to have
        started (:meth:`_end_run_tail`, from :meth:`split_run` or :meth:`finish_pass`), so a run
        cut before it leaves them running."""
        run = self._run
        n = len(run)
        mbt = self._mbt
        K = self._K
        k = K + 1
        bs = self._bs
        finish_at = self._finish_at
        kf = min(finish_at) if finish_at else -1
        joiners: list[VllmRequest] | None = None
        if self._waiting:
            joiners = list(self._waiting)
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
        bcount = self._bcount
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
        available = self.pool.available
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
            self._waiting.clear()
            adm: list[Admission] = []
            joined: list[int] = []
            sum_po = self._sum_po
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
            self._sum_po = sum_po
            self._join_batch(joined)
            admissions = tuple(adm)
        active0 = self._sum_po + n * K  # summed sequence lengths before pass k's sample
        times = self._timing.run_ends(now_ms, n, active0, n_pass)
        free, evicted = self.pool.take_undoable(need)
        self._bulk = (now_ms, times, K, demand, free, evicted)
        self._tail = tail
        self._K = K + n_pass
        self.lockstep_passes += n_pass
        self.bulk_runs += 1
        self.bulk_joins += joiners is not None
        self.bulk_tails += tail >= 0
        end = float(times[-1])
        finished: tuple[int, ...] = ()
        if tail >= 0:
            finished = tuple([r.rid for r in finish_at[tail]])
        emitted = self._running_ids()
        self._completion = PassCompletion(end_ms=end, emitted=emitted, finished=finished, run_times=times,
                                          delta=self._batch.handout(emitted))
        self._busy = True
        return PassPlan(start_ms=now_ms, end_ms=end, admissions=admissions, decode_tokens=n,
                        last_start_ms=float(times[-2]))

    def _end_run_tail(self) -> None:
        """The run's last pass has started: its finishing requests complete (what the lockstep
        pass does at its start for them)."""
        k = self._tail
        self._tail = -1
        finishing = self._finish_at.pop(k)
        run = self._run
        bs = self._bs
        bcount = self._bcount
        self._running_ids()  # (tracked from here)
        self._leave_batch(finishing)
        for r in finishing:
            del run[r.rid]
            bcount[r.bkt] -= 1
            self._sum_po -= r.prompt + r.off
            r.seq = r.prompt + r.limit
            r.computed = r.seq - 1
            r.nblocks = ceil_div(r.computed, bs)
            self._complete(r)
        if not run:
            self._lock = False

    def split_run(self, now_ms: float, started: bool) -> tuple[float, float] | None:
        run = self._bulk
        if run is None:
            return None
        start, times, K, demand, free, evicted = run
        total = int(times.shape[0])
        keep = cut_point(times, now_ms, started)
        if keep >= total:
            if self._tail >= 0:
                self._end_run_tail()
            return None
        self._tail = -1  # the finishing pass was cut off: they keep running
        evicted = self.pool.untake(free, evicted, blocks_through(demand, total), blocks_through(demand, keep))
        self._K = K + keep
        self.lockstep_passes -= total - keep
        self._completion, kept, end = cut_completion(self._completion, times, keep)
        self._bulk = (start, kept, K, demand, free, evicted) if keep >= 2 else None
        return end, float(kept[-2]) if keep >= 2 else start

    def run_blocks_ahead(self, at_ms: float) -> int:
        run = self._bulk
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
        :meth:`_end_run_tail` will free): the per-pass replay has already freed them once that
        pass has started.  A held source keeps its blocks; a cached block stays in use while
        someone else still references it."""
        bs = self._bs
        return blocks_freed(self.pool, ((ceil_div(r.prompt + r.limit - 1, bs), r.cached)
                                        for r in self._finish_at[self._tail] if not r.source))
