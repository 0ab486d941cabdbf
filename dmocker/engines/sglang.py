"""The mock SGLang engine: paged radix cache, FIFO extend batches, new-token-ratio budget, retraction.

Reference behaviour: ``ai-dynamo/dynamo`` ``lib/mocker/src/scheduler/sglang/``, checked against
Dynamo 1.6.1 replays (:mod:`dmocker.engines.sglang_scheduler` describes a pass).

A request's prompt pages enter the radix tree (Stored, visible at pass end or in the command's
effects) between chunks and when it finishes or its held source is released, not at
allocation: a request cannot hit the pages of one still being prefilled or held (1.6.1).
Activation at a destination publishes its unpublished complete pages (Stored); a page the tree
already holds (a request of the same prefix activated or finished since the reservation) is a
duplicate: the request locks the tree's copy and frees its own, and capacity freed that way bumps
the capacity generation so the pending reservation is retried (``ai-dynamo/aisimulate``
``crates/core/src/engine/kv_manager/sglang_backend.rs``, ``activate_destination_lease``).

A worker is composed of parts with one job each; it owns them and is the only one that calls
across them (the parts below it call down, never back up):

* :class:`~dmocker.engines.handoff_commands.HandoffCommands` -- the handoff commands, on the
  :class:`~dmocker.engines.handoff_book.HandoffBook` (the handoff registries) and the SGLang
  queues through :class:`SglHandoffSide` (both shared with vLLM but the side);
* :class:`~dmocker.engines.sglang_queues.SglQueues` -- the waiting, activated and running
  requests, and their pages in the radix cache;
* :class:`~dmocker.engines.sglang_scheduler.SglScheduler` -- one pass: promotion, the extend
  batch, the per-request decode step, with the :class:`~dmocker.engines.sglang_request.TokenRatio`;
* :class:`~dmocker.engines.sglang_decode.LazyBatch` -- decode-only passes, event-driven;
* :class:`~dmocker.engines.bulk_run.BulkRuns` -- many decode passes computed at once
  (:class:`~dmocker.engines.sglang_bulk.LazyRuns`), the run in flight and its cut;
* :class:`~dmocker.engines.outbox.Outbox` -- the pass in flight and what it owes the runtime;
* the :class:`~dmocker.engines.block_pool.BlockPool` and the
  :class:`~dmocker.engines.timing.PassTiming` model.
"""

from __future__ import annotations

from typing import Hashable

from dmocker.engines.block_pool import BlockPool
from dmocker.engines.bulk_run import BulkRuns
from dmocker.engines.common import check_holdings, kv_share
from dmocker.engines.engine_spec import EngineSpec
from dmocker.engines.handoff_book import HandoffBook
from dmocker.engines.handoff_commands import HandoffCommands, HandoffSide
from dmocker.engines.interface import (
    CommandEffects,
    EngineArgs,
    EngineRequest,
    EngineWorker,
    PassCompletion,
    PassPlan,
    WorkerProbes,
)
from dmocker.engines.outbox import Outbox
from dmocker.engines.sglang_bulk import LazyRuns
from dmocker.engines.sglang_decode import LazyBatch
from dmocker.engines.sglang_queues import SglQueues
from dmocker.engines.sglang_request import SglRequest, SglStatus, TokenRatio
from dmocker.engines.sglang_scheduler import SglScheduler
from dmocker.engines.timing import PassTiming

__all__ = ["ENGINE", "SglHandoffSide", "SglangWorker"]


class SglHandoffSide(HandoffSide[SglRequest]):
    """What the handoff commands do to an SGLang worker's queues."""

    def __init__(self, queues: SglQueues, lazy: LazyBatch) -> None:
        self._queues = queues
        self._lazy = lazy

    def new_request(self, request: EngineRequest, maxout: int, handoff: Hashable, destination: bool) -> SglRequest:
        return SglRequest(request, maxout, handoff, SglStatus.REMOTE_PENDING if destination else SglStatus.WAITING)

    def enqueue(self, r: SglRequest) -> None:
        self._queues.waiting.append(r)

    def is_held(self, r: SglRequest) -> bool:
        return r.status is SglStatus.HELD

    def release_held(self, r: SglRequest) -> None:
        self._queues.publish(r, r.seq)  # the finished request's pages enter the radix tree now
        self._queues.free_kv(r)

    def free_reserved(self, r: SglRequest) -> None:
        self._queues.free_kv(r)

    def remove(self, r: SglRequest) -> None:
        self._lazy.sync()  # the queues work on written-back requests
        self._queues.drop(r)

    def may_reserve(self) -> bool:
        return True  # whenever the pages fit

    def mark_reserved(self, head: SglRequest, n_blocks: int) -> None:
        self._queues.mark_reserved(head, n_blocks)

    def activate(self, r: SglRequest) -> None:
        self._queues.materialize_destination(r)


class SglangWorker(EngineWorker, WorkerProbes):
    """One mock SGLang worker (module docstring).  ``vectorized=False`` keeps every pass on
    the per-request decode step (tests compare the two)."""

    def __init__(self, args: EngineArgs, worker_idx: int = 0, *, record_kv_events: bool = False,
                 vectorized: bool = True) -> None:
        self.args = args
        self.worker_idx = worker_idx
        page = args.page_tokens  # (resolved once: a missing block size is looked up in the spec)
        total_tokens = args.num_gpu_blocks * page  # args.total_kv_tokens
        self._page = page
        self._record = record_kv_events and args.enable_prefix_caching
        self._bulk_ok = vectorized and not self._record  # bulk runs ride the lazy batch
        self.pool = pool = BlockPool(args.num_gpu_blocks, record=self._record)
        timing = PassTiming(args)
        book: HandoffBook[SglRequest] = HandoffBook(pool, page, "page size", args.enable_prefix_caching,
                                                    args.transfer_timing(0))
        self._book = book
        self._outbox = outbox = Outbox(pool, self._record)
        self._ratio = ratio = TokenRatio(args)
        self._queues = queues = SglQueues(book, pool, outbox, page, args.enable_prefix_caching)
        self._lazy = lazy = LazyBatch(queues, pool, timing, page, total_tokens, vectorized)
        self._scheduler = SglScheduler(args, page, total_tokens, queues, lazy, book, pool, outbox, timing, ratio)
        self._bulk = BulkRuns(LazyRuns(lazy, queues, book, pool, timing, ratio, page, args.max_num_seqs), pool,
                              outbox)
        self._commands = HandoffCommands(book, outbox, SglHandoffSide(queues, lazy))

    # --- state ---------------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self._outbox.busy

    def has_work(self) -> bool:
        q = self._queues
        return bool(q.waiting) or bool(q.prebuilt) or bool(q.running)

    def is_drained(self) -> bool:
        return not self._outbox.busy and not self._book.live

    @property
    def num_running(self) -> int:
        return len(self._queues.running)

    @property
    def num_waiting(self) -> int:
        """Queued prompts plus activated destinations waiting to join the batch."""
        return len(self._queues.waiting) + len(self._queues.prebuilt)

    def queue_depth(self) -> int:
        q = self._queues
        return len(q.waiting) + len(q.prebuilt) + len(self._book.pending)

    def kv_usage(self, at_ms: float | None = None) -> float:
        return kv_share(self.pool, self.run_blocks_ahead(at_ms) if at_ms is not None else 0)

    def run_blocks_ahead(self, at_ms: float) -> int:
        return self._bulk.blocks_ahead(at_ms)

    def kv_in_use(self) -> tuple[int, list[int]]:
        return self.pool.num_active_blocks, sorted(self._book.live)

    # telemetry (tests, benches)
    @property
    def new_token_ratio(self) -> float:
        return self._ratio.value

    @property
    def retractions(self) -> int:
        return self._queues.retractions

    @property
    def oom_resets(self) -> int:
        return self._ratio.oom_resets

    @property
    def vectorized_passes(self) -> int:
        return self._lazy.passes

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
        if not self.has_work():
            return None
        q = self._queues
        if (bulk and self._bulk_ok and (q.running or q.prebuilt) and not q.waiting and not self._book.pending
                and not self._outbox.held):
            plan = self._bulk.start(now_ms)
            if plan is not None:
                return plan
        return self._scheduler.run_pass(now_ms)

    def split_run(self, now_ms: float, started: bool) -> tuple[float, float] | None:
        return self._bulk.split(now_ms, started)

    def finish_pass(self) -> PassCompletion:
        outbox = self._outbox
        if not outbox.busy:
            raise RuntimeError(f"worker {self.worker_idx} has no pass in flight")
        self._bulk.finish()
        return self._commands.deliver(outbox.finish())

    # --- introspection for tests ---------------------------------------------------------------

    def check_lazy_batch(self) -> None:
        """Assert that the event-driven batch files every running request where it belongs,
        leaving it as it is (tests)."""
        self._lazy.check(self._bulk.tail)

    def check_invariants(self) -> None:
        """Assert pool conservation against every request's holdings (tests); the event-driven
        batch is written back first."""
        self.check_lazy_batch()
        self._lazy.sync()
        live = list(self._book.live.values())
        for r in live:
            assert r.npages * self._page >= r.materialized, (r.rid, r.npages, r.materialized)
        check_holdings(self.pool, [(r.rid, r.npages, r.cached) for r in live])
        assert len(self._queues.running) <= self.args.max_num_seqs
        ratio = self._ratio
        assert ratio.floor <= ratio.value <= ratio.initial


ENGINE = EngineSpec("sglang", SglangWorker)
