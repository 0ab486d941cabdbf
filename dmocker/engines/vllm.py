"""The mock vLLM engine: paged prefix cache, chunked prefill, LIFO preemption, handoff holds.

A worker is composed of parts with one job each; it owns them and is the only one that calls
across them (the parts below it call down, never back up):

* :class:`~dmocker.engines.handoff_commands.HandoffCommands` -- the handoff commands, on the
  :class:`~dmocker.engines.handoff_book.HandoffBook` (the handoff registries) and the vLLM queues
  through :class:`VllmHandoffSide` (both shared with SGLang but the side);
* :class:`~dmocker.engines.vllm_queues.VllmQueues` -- the waiting queue and the running batch,
  and the KV each request holds;
* :class:`~dmocker.engines.vllm_scheduler.ExactScheduler` -- the reference's scheduler, request
  by request (its module docstring describes a pass);
* :class:`~dmocker.engines.vllm_lockstep.LockstepBatch` -- the decode steady state, O(1) per
  pass, falling back to the exact scheduler;
* :class:`~dmocker.engines.bulk_run.BulkRuns` -- many lockstep passes computed at once
  (:class:`~dmocker.engines.vllm_bulk.LockstepRuns`), the run in flight and its cut;
* :class:`~dmocker.engines.outbox.Outbox` -- the pass in flight and what it owes the runtime;
* the :class:`~dmocker.engines.block_pool.BlockPool` and the
  :class:`~dmocker.engines.timing.PassTiming` model.
"""

from __future__ import annotations

from typing import Hashable

from dmocker.engines.block_pool import BlockPool
from dmocker.engines.bulk_run import BulkRuns
from dmocker.engines.common import ceil_div, check_holdings, kv_share
from dmocker.engines.engine_spec import EngineSpec
from dmocker.engines.handoff_book import HandoffBook
from dmocker.engines.handoff_commands import HandoffCommands, HandoffSide
from dmocker.engines.interface import (
    CommandEffects,
    DecodeKvAccounting,
    EngineArgs,
    EngineRequest,
    EngineWorker,
    PassCompletion,
    PassPlan,
    WorkerProbes,
    WorkerType,
)
from dmocker.engines.outbox import Outbox
from dmocker.engines.timing import PassTiming
from dmocker.engines.vllm_bulk import LockstepRuns
from dmocker.engines.vllm_lockstep import LockstepBatch
from dmocker.engines.vllm_queues import VllmQueues
from dmocker.engines.vllm_request import VllmRequest, VllmStatus
from dmocker.engines.vllm_scheduler import ExactScheduler

__all__ = ["ENGINE", "VllmHandoffSide", "VllmWorker"]


class VllmHandoffSide(HandoffSide[VllmRequest]):
    """What the handoff commands do to a vLLM worker's queues."""

    def __init__(self, args: EngineArgs, queues: VllmQueues, lock: LockstepBatch) -> None:
        self._queues = queues
        self._lock = lock
        self._mml = args.max_model_len
        self._max_seqs = args.max_num_seqs

    def new_request(self, request: EngineRequest, maxout: int, handoff: Hashable, destination: bool) -> VllmRequest:
        status = VllmStatus.REMOTE_PENDING if destination else VllmStatus.WAITING
        return VllmRequest(request, maxout, handoff, status, self._mml)

    def enqueue(self, r: VllmRequest) -> None:
        self._queues.waiting.append(r)

    def is_held(self, r: VllmRequest) -> bool:
        return r.status is VllmStatus.HELD

    def release_held(self, r: VllmRequest) -> None:
        self._queues.free_kv(r)

    def free_reserved(self, r: VllmRequest) -> None:
        self._queues.free_kv(r)

    def remove(self, r: VllmRequest) -> None:
        if r.status is VllmStatus.RUNNING and self._lock.locked:
            self._lock.materialize_at_rest()  # the queues work on explicit state
        self._queues.drop(r)

    def may_reserve(self) -> bool:
        return len(self._queues.run) < self._max_seqs  # a running slot is free

    def mark_reserved(self, head: VllmRequest, n_blocks: int) -> None:
        self._queues.mark_reserved(head, n_blocks)

    def activate(self, r: VllmRequest) -> None:
        self._queues.materialize_destination(r)


class VllmWorker(EngineWorker, WorkerProbes):
    """One mock vLLM worker (module docstring).  ``lockstep=False`` keeps every pass on the
    exact scheduler (tests compare the two)."""

    def __init__(self, args: EngineArgs, worker_idx: int = 0, *, record_kv_events: bool = False,
                 lockstep: bool = True) -> None:
        self.args = args
        self.worker_idx = worker_idx
        bs = args.page_tokens  # (resolved once: a missing block size is looked up in the spec)
        self._bs = bs
        self._record = record_kv_events and args.enable_prefix_caching
        # bulk runs cover the common decode case only (see LockstepRuns.begin): a decode
        # worker's, or an aggregated one's while its batch only decodes
        self._bulk_ok = (args.decode_kv_accounting is DecodeKvAccounting.LOGICAL
                         and args.worker_type is not WorkerType.PREFILL and not self._record)
        self.pool = pool = BlockPool(args.num_gpu_blocks, record=self._record)
        timing = PassTiming(args)
        book: HandoffBook[VllmRequest] = HandoffBook(pool, bs, "block size", args.enable_prefix_caching,
                                                     args.transfer_timing(0))
        self._book = book
        self._outbox = outbox = Outbox(pool, self._record)
        self._queues = queues = VllmQueues(book, pool, outbox, bs, args.enable_prefix_caching)
        self._exact = exact = ExactScheduler(args, bs, queues, book, pool, outbox, timing)
        self._lock = lock = LockstepBatch(args, bs, queues, exact, book, pool, outbox, timing, lockstep)
        self._bulk = BulkRuns(LockstepRuns(args, bs, lock, queues, pool, timing), pool, outbox)
        self._commands = HandoffCommands(book, outbox, VllmHandoffSide(args, queues, lock))

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
        return self._commands.submit_handoff_prefill(handoff_id, request)

    def submit(self, request: EngineRequest) -> CommandEffects:
        """Plain (non-handoff) request: aggregated use and tests."""
        return self._commands.submit(request)

    def release_source(self, handoff_id: Hashable) -> CommandEffects:
        return self._commands.release_source(handoff_id)

    def cancel_source(self, handoff_id: Hashable) -> CommandEffects:
        return self._commands.cancel_source(handoff_id)

    def reserve_destination(self, handoff_id: Hashable, request: EngineRequest) -> CommandEffects:
        return self._commands.reserve_destination(handoff_id, request)

    def activate_destination(self, handoff_id: Hashable) -> CommandEffects:
        return self._commands.activate_destination(handoff_id)

    def cancel_destination(self, handoff_id: Hashable) -> CommandEffects:
        return self._commands.cancel_destination(handoff_id)

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
        return self._commands.deliver(outbox.finish())

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
        snap = self.snapshot()
        check_holdings(self.pool, [(rid, snap[rid][3], r.cached) for rid, r in self._book.live.items()])
        assert len(self._queues.run) <= self.args.max_num_seqs
        self._lock.check()


ENGINE = EngineSpec("vllm", VllmWorker)
