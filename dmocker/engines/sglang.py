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

* :class:`~dmocker.engines.handoff_book.HandoffBook` -- the handoff registries and the
  destination retry (shared with vLLM);
* :class:`~dmocker.engines.sglang_queues.SglQueues` -- the waiting, activated and running
  requests, and their pages in the radix cache;
* :class:`~dmocker.engines.sglang_scheduler.SglScheduler` -- one pass: promotion, the extend
  batch, the per-request decode step, with the :class:`~dmocker.engines.sglang_request.TokenRatio`;
* :class:`~dmocker.engines.sglang_decode.LazyBatch` -- decode-only passes, event-driven;
* :class:`~dmocker.engines.sglang_bulk.SglBulkRuns` -- many decode passes computed at once;
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
    EngineArgs,
    EngineRequest,
    EngineWorker,
    LifecycleEvent,
    PassCompletion,
    PassPlan,
    WorkerProbes,
)
from dmocker.engines.outbox import Outbox
from dmocker.engines.sglang_bulk import SglBulkRuns
from dmocker.engines.sglang_decode import LazyBatch
from dmocker.engines.sglang_queues import SglQueues
from dmocker.engines.sglang_request import SglRequest, SglStatus, TokenRatio
from dmocker.engines.sglang_scheduler import SglScheduler
from dmocker.engines.timing import PassTiming

__all__ = ["ENGINE", "SglangWorker"]


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
        self._bulk = SglBulkRuns(lazy, queues, book, pool, outbox, timing, ratio, page, args.max_num_seqs)

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
        self._book.check_source(handoff_id, request)
        r = SglRequest(request, min(request.max_output_tokens, 1), handoff_id, SglStatus.WAITING)
        self._book.add_source(handoff_id, r)
        self._queues.waiting.append(r)
        return SUBMITTED

    def submit(self, request: EngineRequest) -> CommandEffects:
        """Plain (non-handoff) request: aggregated use and tests."""
        self._book.check_new(request)
        r = SglRequest(request, request.max_output_tokens, None, SglStatus.WAITING)
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
        if r.status is SglStatus.HELD:
            self._queues.publish(r, r.seq)  # the finished request's pages enter the radix tree now
            self._queues.free_kv(r)
            self._book.retire(r)
        elif cancel:
            self._remove(r)
        # a release of a pending source: the prefill releases itself when it finishes
        return self._applied()

    def reserve_destination(self, handoff_id: Hashable, request: EngineRequest) -> CommandEffects:
        self._book.check_destination(handoff_id, request)
        r = SglRequest(request, request.max_output_tokens, handoff_id, SglStatus.REMOTE_PENDING)
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

    def _remove(self, r: SglRequest) -> None:
        """Take ``r`` out wherever it is (between passes), freeing its pages."""
        self._lazy.sync()  # the queues work on written-back requests
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
        """The destination retry: reserve the pending head if its pages fit now."""
        head = self._book.reserve_head(True)
        if head is None:
            return ()
        n_pages = ceil_div(head.prompt, self._page)
        self._queues.mark_reserved(head, n_pages)
        return (DestinationReserved(head.handoff, (n_pages - len(head.cached)) * self._page),)

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
        c = outbox.finish()
        retry = self._retry() if self._book.pending else ()
        return outbox.deliver(c, retry)

    # --- introspection for tests ---------------------------------------------------------------

    def check_lazy_batch(self) -> None:
        """Assert that the event-driven batch files every running request where it belongs,
        leaving it as it is (tests)."""
        self._lazy.check(self._bulk.tail_pending)

    def check_invariants(self) -> None:
        """Assert pool conservation against every request's holdings (tests); the event-driven
        batch is written back first."""
        self.check_lazy_batch()
        self._lazy.sync()
        self.pool.check()
        private = 0
        ref_count: dict[int, int] = {}
        for r in self._book.live.values():
            assert r.npages >= len(r.cached), (r.rid, r.npages, r.cached)
            assert r.npages * self._page >= r.materialized, (r.rid, r.npages, r.materialized)
            private += r.npages - len(r.cached)
            for h in r.cached:
                ref_count[h] = ref_count.get(h, 0) + 1
        assert private == self.pool.private_blocks, (private, self.pool.private_blocks)
        for h, c in self.pool.ref_counts().items():
            assert ref_count.get(h, 0) == c, (h, c)
        assert len(self._queues.running) <= self.args.max_num_seqs
        ratio = self._ratio
        assert ratio.floor <= ratio.value <= ratio.initial


ENGINE = EngineSpec("sglang", SglangWorker)
