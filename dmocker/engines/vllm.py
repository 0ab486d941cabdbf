"""The mock vLLM engine: paged prefix cache, chunked prefill, LIFO preemption, handoff holds.

A worker is composed of parts with one job each; it owns them and is the only one that calls
across them (the parts below it call down, never back up):

* :class:`~dmocker.engines.handoff_book.HandoffBook` -- the handoff registries and the
  destination retry (shared with SGLang);
* :class:`~dmocker.engines.vllm_queues.VllmQueues` -- the waiting queue and the running batch,
  and the KV each request holds;
* :class:`~dmocker.engines.vllm_scheduler.ExactScheduler` -- the reference's scheduler, request
  by request (its module docstring describes a pass);
* :class:`~dmocker.engines.vllm_lockstep.LockstepBatch` -- the decode steady state, O(1) per
  pass, falling back to the exact scheduler;
* :class:`~dmocker.engines.vllm_bulk.BulkRuns` -- many lockstep passes computed at once;
* :class:`~dmocker.engines.outbox.Outbox` -- the pass in flight and what it owes the runtime;
* the :class:`~dmocker.engines.block_pool.BlockPool` and the
  :class:`~dmocker.engines.timing.PassTiming` model.
"""

from __future__ import annotations

from typing import Hashable

from dmocker.handoff import DestinationReserved
from dmocker.engines.block_pool import BlockPool
from dmocker.engines.common import ceil_div, kv_share
from dmocker.engines.engine_spec import EngineSpec
from dmocker.engines.handoff_book import APPLIED, NOOP, SUBMITTED, HandoffBook
from dmocker.engines.interface import (
    CommandEffects,
    CommandResult,
    DecodeKvAccounting,
    EngineArgs,
    EngineRequest,
    EngineWorker,
    LifecycleEvent,
    PassCompletion,
    PassPlan,
    WorkerProbes,
    WorkerType,
)
from dmocker.engines.outbox import Outbox
from dmocker.engines.timing import PassTiming
from dmocker.engines.vllm_bulk import BulkRuns
from dmocker.engines.vllm_lockstep import LockstepBatch
from dmocker.engines.vllm_queues import VllmQueues
from dmocker.engines.vllm_request import VllmRequest, VllmStatus
from dmocker.engines.vllm_scheduler import ExactScheduler

__all__ = ["ENGINE", "VllmWorker"]


class VllmWorker(EngineWorker, WorkerProbes):
    """One mock vLLM worker (module docstring).  ``lockstep=False`` keeps every pass on the
    exact scheduler (tests compare the two)."""

    def __init__(self, args: EngineArgs, worker_idx: int = 0, *, record_kv_events: bool = False,
                 lockstep: bool = True) -> None:
        self.args = args
        self.worker_idx = worker_idx
        bs = args.page_tokens  # (resolved once: a missing block size is looked up in the spec)
        self._bs = bs
        self._max_seqs = args.max_num_seqs
        self._record = record_kv_events and args.enable_prefix_caching
        # bulk runs cover the common decode case only (see BulkRuns.start)
        self._bulk_ok = (args.decode_kv_accounting is DecodeKvAccounting.LOGICAL
                         and args.worker_type is WorkerType.DECODE and not self._record)
        self.pool = pool = BlockPool(args.num_gpu_blocks, record=self._record)
        timing = PassTiming(args)
        book: HandoffBook[VllmRequest] = HandoffBook(pool, bs, "block size", args.enable_prefix_caching,
                                                     args.transfer_timing(0))
        self._book = book
        self._outbox = outbox = Outbox(pool, self._record)
        self._queues = queues = VllmQueues(book, pool, outbox, bs, args.enable_prefix_caching)
        self._exact = exact = ExactScheduler(args, bs, queues, book, pool, outbox, timing)
        self._lock = lock = LockstepBatch(args, bs, queues, exact, book, pool, outbox, timing, lockstep)
        self._bulk = BulkRuns(args, bs, lock, queues, pool, outbox, timing)

    # --- state ---------------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self._outbox.busy

    def has_work(self) -> bool:
        return bool(self._queues.waiting) or bool(self._queues.run)

    def is_drained(self) -> bool:
        return not self._outbox.busy and not self._book.live

    @property
    def num_running(self) -> int:
        return len(self._queues.run)

    @property
    def num_waiting(self) -> int:
        return len(self._queues.waiting)

    def queue_depth(self) -> int:
        return len(self._queues.waiting) + len(self._book.pending)

    def kv_usage(self, at_ms: float | None = None) -> float:
        return kv_share(self.pool, self.run_blocks_ahead(at_ms) if at_ms is not None else 0)

    def run_blocks_ahead(self, at_ms: float) -> int:
        return self._bulk.blocks_ahead(at_ms)

    def kv_in_use(self) -> tuple[int, list[int]]:
        return self.pool.num_active_blocks, sorted(self._book.live)

    # telemetry (tests, benches)
    @property
    def preemptions(self) -> int:
        return self._queues.preemptions

    @property
    def exact_passes(self) -> int:
        return self._exact.passes

    @property
    def lockstep_passes(self) -> int:
        return self._lock.passes

    @property
    def bulk_runs(self) -> int:
        return self._bulk.runs

    @property
    def bulk_joins(self) -> int:
        return self._bulk.joins

    @property
    def bulk_tails(self) -> int:
        return self._bulk.tails

    # --- commands ------------------------------------------------------------------------------

    def submit_handoff_prefill(self, handoff_id: Hashable, request: EngineRequest) -> CommandEffects:
        self._book.check_source(handoff_id, request)
        r = VllmRequest(request, min(request.max_output_tokens, 1), handoff_id, VllmStatus.WAITING,
                        self.args.max_model_len)
        self._book.add_source(handoff_id, r)
        self._queues.waiting.append(r)
        return SUBMITTED

    def submit(self, request: EngineRequest) -> CommandEffects:
        """Plain (non-handoff) request: aggregated use and tests."""
        self._book.check_new(request)
        r = VllmRequest(request, request.max_output_tokens, None, VllmStatus.WAITING, self.args.max_model_len)
        self._book.add(r)
        self._queues.waiting.append(r)
        return SUBMITTED

    def release_source(self, handoff_id: Hashable) -> CommandEffects:
        return self._end_source(handoff_id, cancel=False)

    def cancel_source(self, handoff_id: Hashable) -> CommandEffects:
        return self._end_source(handoff_id, cancel=True)

    def _end_source(self, handoff_id: Hashable, *, cancel: bool) -> CommandEffects:
        r = self._book.pop_source(handoff_id)
        if r is None:
            return NOOP
        if r.status is VllmStatus.HELD:
            self._queues.free_kv(r)
            self._book.retire(r)
        elif cancel:
            self._remove(r)
        # a release of a pending source: the prefill releases itself when it finishes
        return self._applied()

    def reserve_destination(self, handoff_id: Hashable, request: EngineRequest) -> CommandEffects:
        self._book.check_destination(handoff_id, request)
        r = VllmRequest(request, request.max_output_tokens, handoff_id, VllmStatus.REMOTE_PENDING,
                        self.args.max_model_len)
        self._book.add_pending(handoff_id, r)
        lifecycle = self._retry() if not self._outbox.busy else ()
        return CommandEffects(CommandResult.ACCEPTED, lifecycle, self._outbox.drain_kv())

    def activate_destination(self, handoff_id: Hashable) -> CommandEffects:
        r = self._book.activate(handoff_id)
        if r is None:
            return NOOP
        self._queues.materialize_destination(r)
        return self._applied()

    def cancel_destination(self, handoff_id: Hashable) -> CommandEffects:
        book = self._book
        if book.take_pending(handoff_id) is None:
            r = book.pop_reserved(handoff_id)
            if r is not None:
                self._queues.free_kv(r)
                book.retire(r)
            else:
                r = book.pop_active(handoff_id)
                if r is None:
                    return NOOP
                self._remove(r)
        return self._applied()

    def _remove(self, r: VllmRequest) -> None:
        """Take ``r`` out wherever it is (between passes), freeing its KV."""
        if r.status is VllmStatus.RUNNING and self._lock.locked:
            self._lock.materialize_at_rest()  # the queues work on explicit state
        self._queues.drop(r)

    def _applied(self) -> CommandEffects:
        lifecycle: tuple[LifecycleEvent, ...] = ()
        if not self._outbox.busy and self._book.pending:
            lifecycle = self._retry()
        events = self._outbox.drain_kv()
        if not lifecycle and not events:
            return APPLIED
        return CommandEffects(CommandResult.APPLIED, lifecycle, events)

    def _retry(self) -> tuple[LifecycleEvent, ...]:
        """The destination retry: reserve the pending head if it fits now (a running slot free)."""
        head = self._book.reserve_head(len(self._queues.run) < self._max_seqs)
        if head is None:
            return ()
        n_blocks = ceil_div(head.prompt, self._bs)
        self._queues.mark_reserved(head, n_blocks)
        return (DestinationReserved(head.handoff, (n_blocks - len(head.cached)) * self._bs),)

    # --- passes --------------------------------------------------------------------------------

    def start_pass(self, now_ms: float, bulk: bool = False) -> PassPlan | None:
        if self._outbox.busy:
            raise RuntimeError(f"worker {self.worker_idx} is already mid-pass")
        queues = self._queues
        if not queues.run and not queues.waiting:
            return None
        lock = self._lock
        k = lock.k + 1
        if (bulk and lock.locked and self._bulk_ok and not self._book.pending
                and not self._outbox.held):
            plan = self._bulk.start(now_ms)
            if plan is not None:
                return plan
        if lock.locked:
            n = len(queues.run)
            if lock.fits(k):
                return lock.run_pass(now_ms, k, n)
            lock.materialize_at_rest()
        lock.k = k
        plan = self._exact.run(now_ms, k)
        lock.try_enter()
        return plan

    def split_run(self, now_ms: float, started: bool) -> tuple[float, float] | None:
        return self._bulk.split(now_ms, started)

    def finish_pass(self) -> PassCompletion:
        outbox = self._outbox
        if not outbox.busy:
            raise RuntimeError(f"worker {self.worker_idx} has no pass in flight")
        self._bulk.finish()
        c = outbox.finish()
        retry = self._retry() if self._book.pending else ()
        return outbox.deliver(c, retry)

    # --- introspection for tests ---------------------------------------------------------------

    def snapshot(self) -> dict[int, tuple[str, int, int, int]]:
        """Explicit per-request (status, computed, seq, blocks) between passes (tests)."""
        if self._outbox.busy:
            raise RuntimeError("snapshot while mid-pass")
        out: dict[int, tuple[str, int, int, int]] = {}
        k, bs, locked = self._lock.k, self._bs, self._lock.locked
        for rid, r in self._book.live.items():
            if r.status is VllmStatus.RUNNING and locked:
                seq = r.prompt + k + r.off
                out[rid] = (r.status.name, seq - 1, seq, ceil_div(seq - 1, bs))
            else:
                out[rid] = (r.status.name, r.computed, r.seq, r.nblocks)
        return out

    def check_invariants(self) -> None:
        """Assert pool conservation against every request's holdings (tests)."""
        self.pool.check()
        snap = self.snapshot()
        private = 0
        ref_count: dict[int, int] = {}
        for rid, r in self._book.live.items():
            nblocks = snap[rid][3]
            assert nblocks >= len(r.cached), (rid, nblocks, r.cached)
            private += nblocks - len(r.cached)
            for h in r.cached:
                ref_count[h] = ref_count.get(h, 0) + 1
        assert private == self.pool.private_blocks, (private, self.pool.private_blocks)
        for h, c in self.pool.ref_counts().items():
            assert ref_count.get(h, 0) == c, (h, c, ref_count.get(h, 0))
        assert len(self._queues.run) <= self.args.max_num_seqs
        self._lock.check()


ENGINE = EngineSpec("vllm", VllmWorker)
