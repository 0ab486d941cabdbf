"""The mock vLLM worker's lockstep decode: the batch kept implicitly while every request decodes.

When every running request is decoding (its only uncomputed token is the dangling one), a pass
advances all of them by exactly one token.  :class:`LockstepBatch` then keeps them
*implicitly*: request ``r`` has generated ``k + r.off`` tokens after pass ``k``, needs a new
block in pass ``j`` iff ``j % block_size == r.bkt``, and finishes in pass ``r.kf``.  A pass is
then O(1) plus the requests that arrive or finish: block demand is a bucket count, completions
a dict lookup, and the emitted ids a cached numpy array.  Anything else (prefill chunks,
preemption, a full pool, a token budget smaller than the batch) writes the explicit
per-request state back and runs the exact scheduler (:class:`ExactScheduler`); the batch
returns to lockstep as soon as it allows.  Both paths implement the same rules, and a test
replays random workloads through both.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dmocker.engines.block_pool import BlockPool
from dmocker.engines.common import BatchIds, BatchTracker, ceil_div
from dmocker.engines.handoff_book import HandoffBook
from dmocker.engines.interface import Admission, DecodeKvAccounting, EngineArgs, PassPlan, WorkerType
from dmocker.engines.outbox import Outbox
from dmocker.engines.timing import PassTiming
from dmocker.engines.vllm_queues import VllmQueues
from dmocker.engines.vllm_request import VllmRequest
from dmocker.engines.vllm_scheduler import ExactScheduler, begin_pass

__all__ = ["LockstepBatch"]

I64 = npt.NDArray[np.int64]


class LockstepBatch:
    """The implicit decode batch of a vLLM worker (module docstring).  ``k`` counts the passes
    the worker has started (the exact scheduler's too: offsets are relative to it)."""

    def __init__(self, args: EngineArgs, block_size: int, queues: VllmQueues, exact: ExactScheduler,
                 book: HandoffBook[VllmRequest], pool: BlockPool, outbox: Outbox, timing: PassTiming,
                 allowed: bool) -> None:
        self._queues = queues
        self._exact = exact
        self._book = book
        self._pool = pool
        self._outbox = outbox
        self._timing = timing
        self._allowed = allowed  # False: always the exact scheduler (tests)
        self._bs = block_size
        self._mml = args.max_model_len
        self._max_seqs = args.max_num_seqs
        self._mbt = args.max_num_batched_tokens
        self._is_prefill = args.worker_type is WorkerType.PREFILL
        self._logical_kv = args.decode_kv_accounting is DecodeKvAccounting.LOGICAL
        self.locked = False  # the running batch is kept implicitly
        self.k = 0  # passes started so far
        self.bcount = [0] * self._bs  # running requests per block bucket
        self.sum_po = 0  # sum of prompt + off over the running requests
        self.finish_at: dict[int, list[VllmRequest]] = {}  # pass -> requests finishing in it
        self._rid_q: BatchIds | None = None  # ids of the batch, in running order, while tracked (None: rebuild)
        self.tracker = BatchTracker()  # joins and leaves between the handed-out batch arrays
        self.passes = 0  # lockstep passes (telemetry, tests)

    def fits(self, k: int) -> bool:
        """Whether pass ``k`` can run in lockstep: the batch fits the token budget and the pool
        gives the blocks it needs (taken now)."""
        return len(self._queues.run) <= self._mbt and self._pool.take(self.bcount[k % self._bs])

    # --- lockstep pass -------------------------------------------------------------------------

    def run_pass(self, now_ms: float, k: int, n_before: int) -> PassPlan | None:
        """Every running request computes its dangling token and samples the next one."""
        self.k = k
        budget = self._mbt - n_before
        admissions: list[Admission] = []
        rejected: list[int] = []
        new: list[VllmRequest] = []
        exact_tail = False
        run = self._queues.run
        max_seqs = self._max_seqs
        bs = self._bs
        while self._queues.waiting and len(run) + len(new) < max_seqs:
            r = self._queues.next_waiting(bool(self._book.pending))
            if r is None:
                break
            if self._mml is not None and r.prompt >= self._mml:
                self._queues.drop(r)
                rejected.append(r.rid)
                continue
            if self._queues.materialized(r):
                self._queues.admit(r)
                admissions.append(Admission(r.rid, 0))
                new.append(r)
                if budget == 0:
                    break
                continue
            if self._book.pending:
                break
            exact_tail = True  # a fresh admission needs the exact scheduler
            break
        if exact_tail:
            # Finish this pass exactly: running requests have computed their dangling token.
            self._materialize_mid_pass(k)
            for r in new:
                run[r.rid] = r
            plan = self._exact.run(now_ms, k, resume=(budget, admissions, rejected))
            self.try_enter()
            return plan
        self.passes += 1
        # decode time sees the active KV before completions free anything (as the reference)
        if self._logical_kv:
            # sequence lengths before this pass's sample: prompt + (k - 1 + off) generated
            active_tokens = self.sum_po + len(run) * (k - 1) + sum(r.prompt for r in new if r.limit > 0)
        else:
            active_tokens = self._pool.num_active_blocks * bs
        finished_ids: list[int] = []
        no_token: list[VllmRequest] = []
        joined: list[int] = []  # emitting newcomers, in the order they join `run`
        if new:
            for r in new:
                run[r.rid] = r
                r.off = 1 - k
                if r.limit <= 0:
                    no_token.append(r)
                    continue
                joined.append(r.rid)
                self.file(r)  # (one that emits once finishes in this pass)
        finishing = self.finish_at.pop(k, None)
        if no_token:
            for r in no_token:
                del run[r.rid]
                finished_ids.append(r.rid)
                self._queues.complete(r)
        if joined:
            # run = the batch + the joiners (no-token newcomers already left again)
            self.join_batch(joined)
        emitted = self.running_ids()
        delta = self.tracker.handout(emitted)
        n_ready = len(emitted)
        if finishing:
            for r in finishing:
                finished_ids.append(r.rid)
            self.retire(finishing)
        if not run:
            self.locked = False
        decode_ms = self._timing.decode_ms(n_ready, active_tokens) if not self._is_prefill else 0.0
        if not n_ready and not finished_ids and not admissions and not rejected and not n_before:
            return None
        return begin_pass(self._outbox, now_ms, now_ms + decode_ms, admissions, rejected, emitted,
                           tuple(finished_ids),
                           0, n_ready, delta)

    def file(self, r: VllmRequest) -> None:
        """File running request ``r`` (its offset set) in the implicit batch: its block bucket,
        its prompt and offset in ``sum_po``, the pass in which it finishes."""
        r.bkt = (2 - r.prompt - r.off) % self._bs
        self.bcount[r.bkt] += 1
        self.sum_po += r.prompt + r.off
        r.kf = r.limit - r.off
        self.finish_at.setdefault(r.kf, []).append(r)

    def retire(self, finishing: list[VllmRequest]) -> None:
        """``finishing`` (taken from ``finish_at``) yielded their last token in pass ``k``: their
        explicit state is written back, they leave the batch and complete, in order."""
        run = self._queues.run
        bs = self._bs
        for r in finishing:
            del run[r.rid]
            self.bcount[r.bkt] -= 1
            self.sum_po -= r.prompt + r.off
            r.seq = r.prompt + r.limit
            r.computed = r.seq - 1
            r.nblocks = ceil_div(r.computed, bs)
            self._queues.complete(r)
        # the next batch is this one minus the leavers (a new array when the next pass asks:
        # handed-out arrays are never mutated; the collector's same-array shortcut relies on it)
        self.leave_batch(finishing)

    def running_ids(self) -> I64:
        """The batch's ids as the numpy array a completion hands out: the same array while
        the batch is unchanged, else one buffer copy of the tracked ids (see BatchIds)."""
        q = self._rid_q
        if q is None:
            q = self._rid_q = BatchIds(self._queues.run.keys())
            self.tracker.reset()  # rebuilt: the changes since the last array are not known
        return q.to_numpy()

    def join_batch(self, rids: list[int]) -> None:
        """``rids`` joined the batch (appended to the running requests): tracked if the batch is
        (else the next array is rebuilt from the running requests)."""
        q = self._rid_q
        if q is not None:
            q.extend(rids)
            self.tracker.join(rids)

    def leave_batch(self, leavers: list[VllmRequest]) -> None:
        """``leavers`` leave the tracked batch (:meth:`running_ids` was called since it changed)."""
        q = self._rid_q
        assert q is not None
        batch = self.tracker
        for r in leavers:
            q.remove(r.rid)
            batch.leave(r.rid)

    def materialize_at_rest(self) -> None:
        """Lockstep -> explicit state between passes (after pass ``k``: the token it sampled is
        not computed yet)."""
        self._write_back(self.k, 1)

    def _materialize_mid_pass(self, k: int) -> None:
        """Lockstep -> explicit state after pass ``k``'s running phase (the dangling token
        computed, the next not sampled yet)."""
        self._write_back(k - 1, 0)

    def _write_back(self, passes: int, dangling: int) -> None:
        """Every running request has generated ``passes + off`` tokens, the last ``dangling`` of
        them not computed: its explicit state says so, and the batch leaves lockstep."""
        bs = self._bs
        for r in self._queues.run.values():
            r.seq = r.prompt + passes + r.off
            r.computed = r.seq - dangling
            r.nblocks = ceil_div(r.computed, bs)
        self._leave()

    def _leave(self) -> None:
        self.locked = False
        self.sum_po = 0
        self.bcount = [0] * self._bs
        self.finish_at.clear()
        self._rid_q = None
        self.tracker.reset()

    def try_enter(self) -> None:
        """After an exact pass ``k``: switch to lockstep if every running request is decoding."""
        if not self._allowed or not self._queues.run:
            return
        bs = self._bs
        for r in self._queues.run.values():
            if r.computed != r.seq - 1 or r.computed < r.prompt or r.nblocks != ceil_div(r.computed, bs):
                return
        K = self.k
        self.bcount = [0] * bs
        self.sum_po = 0
        self.finish_at = {}
        for r in self._queues.run.values():
            r.off = (r.seq - r.prompt) - K
            self.file(r)
        self._rid_q = None
        self.tracker.reset()
        self.locked = True

    def check(self) -> None:
        """Assert that the tracked ids are the batch's (tests)."""
        q = self._rid_q
        if self.locked and q is not None:
            run = list(self._queues.run)
            assert q.tolist() == run, (q, run)
            assert q.to_numpy().tolist() == run, (q, run)
