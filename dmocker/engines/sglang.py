"""Mock SGLang worker: paged radix cache, FIFO extend batches, new-token-ratio budget, retraction.

Reference behaviour (``ai-dynamo/dynamo`` ``lib/mocker/src/scheduler/sglang/``), checked against
Dynamo 1.6.1 replays (the golden probe traces of ``tests/engines/test_engine_fidelity.py`` match
to the digit).  One pass:

1. **Promote** activated handoff destinations (``prebuilt_ready``) into the running batch, up to
   ``max_num_seqs`` (admitted with ``reused_input_tokens = 0``).  If some are still waiting, or a
   destination reservation is pending, no fresh prefill batch forms this pass.
2. **Extend batch** (FIFO): the budget is ``available + evictable - page slack of every request -
   sum over running of min(remaining output, clip) * new_token_ratio``.  A first chunk starts
   after the radix prefix (capped so the last token is computed).  A request is charged its
   page-rounded new tokens plus, on its final chunk, its clipped output reserve; the one that
   does not fit the remaining ``chunked_prefill_size`` budget is cut to fill it (page-aligned)
   and continues next pass; ``max_prefill_tokens`` also bounds the batch.  An allocation
   failure is "out of memory" and resets the ratio to its initial value.
3. **Decode**: an extend pass decodes only the requests whose prompt it completed (their first
   token; on a decode worker that costs one decode step, on a prefill worker nothing, as in
   Dynamo 1.6.1); otherwise every running request decodes.  When pages run out, the running
   request with the fewest output tokens is retracted (KV freed, progress reset, back to the
   front of the queue).  The ratio then decays linearly (600 steps) to ``0.14 x`` its initial
   value.  Decode time uses the summed sequence lengths of the decoded requests.

A request's prompt pages enter the radix tree (Stored, visible at pass end or in the command's
effects) between chunks and when it finishes or its held source is released, not at
allocation: a request cannot hit the pages of one still being prefilled or held (1.6.1).
Activation at a destination publishes its unpublished complete pages (Stored); a page the tree
already holds (a request of the same prefix activated or finished since the reservation) is a
duplicate: the request locks the tree's copy and frees its own, and capacity freed that way bumps
the capacity generation so the pending reservation is retried (``ai-dynamo/aisimulate``
``crates/core/src/engine/kv_manager/sglang_backend.rs``, ``activate_destination_lease``).

Hot path: decode-only passes and bulk decode runs are event-driven
(:mod:`dmocker.engines.sglang_decode`): the running batch advances a pass counter and touches
only the requests that need a page or finish in a pass; the objects are written back before any
other code path reads them.  Anything unusual (a page shortage that needs retraction, a request
with nothing to generate, unpublished prompt pages) falls back to the per-request step; a
Hypothesis test replays random workloads through both and demands identical output.

Pages are the blocks of :class:`~dmocker.engines.block_pool.BlockPool` (page size = block
size): radix nodes are chained page hashes, locked = referenced, evictable = inactive.  Because
every access to a page also touches its whole prefix, LRU order there always evicts children
before parents, which is the radix tree's leaf-first eviction.
"""

from __future__ import annotations

import enum
from collections import deque
from typing import Hashable

import numpy as np
import numpy.typing as npt

from dmocker.engines.block_pool import BlockPool, generated_block_ids, holds_before
from dmocker.engines.common import ceil_div
from dmocker.engines.interface import (
    Admission,
    BatchDelta,
    EngineArgs,
    EngineRequest,
    LifecycleEvent,
    PassCompletion,
    PassPlan,
    WorkerType,
    empty_ids,
    ids_array,
)
from dmocker.engines.sglang_decode import SglDecodePath
from dmocker.engines.sglang_request import SglRequest as _SReq
from dmocker.engines.sglang_request import SglStatus as _St
from dmocker.engines.engine_spec import EngineSpec
from dmocker.engines.timing import PassTiming

__all__ = ["ENGINE", "SglangWorker"]

I64 = npt.NDArray[np.int64]


class SglangWorker(SglDecodePath):
    """One mock SGLang worker (see module docstring)."""

    def __init__(self, args: EngineArgs, worker_idx: int = 0, *, record_kv_events: bool = False,
                 vectorized: bool = True) -> None:
        self.args = args
        self._link = args.transfer_timing(0)
        self._max_seqs = args.max_num_seqs
        self._mbt = args.max_num_batched_tokens
        self._decode_worker = args.worker_type is WorkerType.DECODE
        self._allow_vec = vectorized  # False: always the per-request decode step (tests)
        self.worker_idx = worker_idx
        self._page = args.page_tokens
        self._block = self._page
        self._unit = "page size"
        self._held = _St.HELD
        self._waiting_status = _St.WAITING
        self._pending_status = _St.REMOTE_PENDING
        self._caching = args.enable_prefix_caching
        self._record = record_kv_events and args.enable_prefix_caching
        self.pool = BlockPool(args.num_gpu_blocks, record=self._record)
        self._total_tokens = args.total_kv_tokens
        self._timing = PassTiming(args)
        init = 0.7 * args.schedule_conservativeness
        self._init_ratio = init
        self._min_ratio = init * args.min_new_token_ratio_factor
        self._decay = (init - self._min_ratio) / args.new_token_ratio_decay_steps
        self.new_token_ratio = init
        self._busy = False
        self._completion = None
        self._gen = 0
        self._live = {}
        self._waiting = deque()
        self._prebuilt = deque()
        self._running = []
        self._sources = {}
        self._pending = deque()
        self._pending_ids = set()
        self._reserved = {}
        self._active_dest = {}
        self._lifecycle: list[LifecycleEvent] = []
        self.retractions = 0
        self.oom_resets = 0
        self._init_decode_path()

    # --- hooks of the shared handoff bookkeeping (handoff_base) --------------------------------

    def _new_request(self, request: EngineRequest, maxout: int, handoff: Hashable, status: enum.Enum) -> _SReq:
        assert isinstance(status, _St)
        return _SReq(request, maxout, handoff, status)

    def _remove(self, r: _SReq) -> None:
        self._abort(r)

    def _before_release(self, r: _SReq) -> None:
        self._publish(r, r.seq)  # the finished request's pages enter the radix tree now

    def _mark_reserved(self, head: _SReq, n_blocks: int) -> None:
        head.npages = n_blocks
        head.status = _St.RESERVED
        # the locked prefix is in the radix tree already: publishing at materialization starts
        # past it (promoting it again would only find every page a duplicate, one by one)
        head.pub = len(head.cached)

    # --- protocol surface ----------------------------------------------------------------------

    def has_work(self) -> bool:
        return bool(self._waiting) or bool(self._prebuilt) or bool(self._running)

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        """Queued prompts plus activated destinations waiting to join the batch."""
        return len(self._waiting) + len(self._prebuilt)
    def queue_depth(self) -> int:
        return len(self._waiting) + len(self._prebuilt) + len(self._pending)

    # --- commands: source side -----------------------------------------------------------------




    # --- commands: destination side ------------------------------------------------------------

    def _materialize_destination(self, r: _SReq) -> None:
        # publish the unpublished complete prompt pages beyond the locked prefix; a page the
        # radix tree already holds is a duplicate: the tree's copy is locked, ours freed, and
        # pages freed that way are new capacity for the pending reservations
        free = self.pool.free
        self._publish(r, r.prompt, canonical=True)
        if self.pool.free > free:
            self._gen += 1
        r.materialized = r.prompt
        r.seq = r.prompt
        r.status = _St.PREBUILT
        self._prebuilt.append(r)

    # --- passes --------------------------------------------------------------------------------

    def start_pass(self, now_ms: float, bulk: bool = False) -> PassPlan | None:
        if self._busy:
            raise RuntimeError(f"worker {self.worker_idx} is already mid-pass")
        if not self.has_work():
            return None
        if (bulk and (self._running or self._prebuilt) and not self._waiting and not self._pending
                and not self._record and not self._lifecycle and self._allow_vec):
            plan = self._start_run(now_ms)
            if plan is not None:
                return plan
        admissions: list[Admission] = []
        # 1. promote materialized destinations
        max_run = self._max_seqs
        promoted: list[_SReq] = []
        while self._prebuilt and len(self._running) < max_run:
            r = self._prebuilt.popleft()
            r.status = _St.RUNNING
            self._running.append(r)
            promoted.append(r)
            admissions.append(Admission(r.rid, 0))
        if promoted and self._lazy:
            self._vec_append(promoted)
        can_run: list[_SReq] = []
        total_isl = total_prefix = prompt_tokens = 0
        if not self._prebuilt and not self._pending and self._waiting:
            self._sync_running()
            can_run, total_isl, total_prefix, prompt_tokens = self._extend_batch(admissions)
        prefill_ms = 0.0
        if can_run and not self._decode_worker:
            prefill_ms = self._timing.prefill_ms(len(can_run), total_isl, total_prefix)
        newly: list[_SReq] = []
        for r in can_run:
            if r.materialized < r.seq:
                self._publish(r, r.materialized)  # cache_unfinished_req: the aligned part
                self._waiting.appendleft(r)  # partial chunk: continues next pass
            else:
                newly.append(r)
        emitted: list[int] = []
        finished: list[int] = []
        emitted_arr: I64 | None = None
        delta: BatchDelta | None = None
        if can_run:
            decode_ms, retracted = self._decode_step(newly, emitted, finished)
            # Dynamo 1.6.1 charges an extend pass its prefill time only, on every worker (a
            # newer mocker revision adds one decode step): on a decode worker, the re-extend
            # of retracted requests takes no time.  Replays match 1.6.1 this way.
            decode_ms = 0.0
            self._running.extend(newly)  # completed and retracted ones were removed
        else:
            fast = self._decode_running_vec(finished)
            if fast is not None:
                decode_ms, emitted_arr, delta = fast
                retracted = False
            else:
                self._sync_running()
                decode_ms, retracted = self._decode_step(self._running, emitted, finished)
        if retracted:
            self.new_token_ratio = self._init_ratio
            self._gen += 1
        self.new_token_ratio = max(self.new_token_ratio - self._decay, self._min_ratio)
        if emitted_arr is not None and len(emitted_arr):
            emitted_out = emitted_arr
        elif emitted:
            emitted_out = ids_array(emitted)
        else:
            emitted_out = empty_ids()
        if not (admissions or can_run or len(emitted_out) or finished or retracted):
            return None
        end = now_ms + prefill_ms + decode_ms
        lifecycle: tuple[LifecycleEvent, ...] = ()
        if self._lifecycle:
            lifecycle = tuple(self._lifecycle)
            self._lifecycle.clear()
        self._completion = PassCompletion(
            end_ms=end,
            emitted=emitted_out,
            finished=tuple(finished),
            lifecycle=lifecycle,
            kv_events=self._drain_kv(),  # SGLang: visible at pass end
            delta=delta,
        )
        self._busy = True
        return PassPlan(start_ms=now_ms, end_ms=end, admissions=tuple(admissions),
                        prefill_tokens=prompt_tokens, decode_tokens=len(emitted_out))

    def finish_pass(self) -> PassCompletion:
        if not self._busy or self._completion is None:
            raise RuntimeError(f"worker {self.worker_idx} has no pass in flight")
        self._busy = False
        self._bulk = None
        if self._tail:
            self._end_run_tail()
        c = self._completion
        self._completion = None
        retry = self._retry_destinations() if self._pending else []
        events = self._drain_kv()
        if retry or events:
            c = PassCompletion(end_ms=c.end_ms, emitted=c.emitted, finished=c.finished,
                               rejected=c.rejected, lifecycle=c.lifecycle + tuple(retry),
                               kv_events=c.kv_events + events, run_times=c.run_times, delta=c.delta)
        return c

    # --- internals -----------------------------------------------------------------------------

    def _extend_batch(self, admissions: list[Admission]) -> tuple[list[_SReq], int, int, int]:
        """FIFO extend batch under the new-token-ratio budget (module docstring, step 2)."""
        args = self.args
        page = self._page
        pool = self.pool
        clip = args.clip_max_new_tokens
        ratio = self.new_token_ratio
        reserved_decode = 0.0
        overhead = 0
        for r in self._running:
            reserved_decode += min(r.maxout - (r.seq - r.prompt), clip) * ratio
            overhead += r.npages * page - r.materialized
        for r in self._waiting:
            overhead += r.npages * page - r.materialized
        avail = pool.available * page
        rem_total = float(max(avail - overhead, 0)) - reserved_decode
        rem_input = float(args.max_prefill_tokens)
        rem_chunk = float(args.chunked_prefill_size)
        slots = self._max_seqs - len(self._running)
        can_run: list[_SReq] = []
        total_isl = total_prefix = prompt_tokens = 0
        waiting = self._waiting
        while len(can_run) < slots and waiting:
            r = waiting[0]
            first = r.materialized == 0
            # A first chunk starts after the radix prefix (SGLang sizes extend_input after
            # matching).  At least the last token is computed (it yields the logits), so the
            # match stops at the page holding token seq - 1, as SGLang's max_prefix_len does.
            n_prefix = 0
            if first and self._caching and r.hashes:
                limit = min(len(r.hashes), (r.seq - 1) // page)
                n_prefix = pool.match_prefix(r.hashes, limit)[0]
            base = r.materialized + n_prefix * page
            extend = r.seq - base
            if extend <= 0:
                break
            if ceil_div(extend, page) * page <= rem_chunk:
                chunk = extend
            else:
                # the request that does not fit is chunked to fill the remaining chunk budget
                chunk = (int(rem_chunk) // page) * page
                if chunk <= 0:
                    break
            charged = ceil_div(chunk, page) * page
            final = chunk >= extend
            reserve = min(r.maxout - (r.seq - r.prompt), clip) if final else 0
            if charged + reserve >= rem_total:
                break
            if charged > rem_input:
                break
            chunk = base + chunk - r.materialized  # tokens from the current materialized point
            chunk_end = r.materialized + chunk
            pages_after = ceil_div(chunk_end, page)
            old_alloc_tokens = r.npages * page
            if first:
                prefix = r.hashes[:n_prefix]
                if not pool.claim(prefix, pages_after - n_prefix):
                    self.new_token_ratio = self._init_ratio  # out of memory
                    self.oom_resets += 1
                    break
                r.cached = list(prefix)
                r.pub = n_prefix
                r.npages = pages_after
                r.cached_tokens = n_prefix * page
                prefix_len = r.cached_tokens
            else:
                fresh = pages_after - r.npages
                if not pool.take(fresh):
                    self.new_token_ratio = self._init_ratio
                    self.oom_resets += 1
                    break
                r.npages = pages_after
                prefix_len = r.materialized
            waiting.popleft()
            admissions.append(Admission(r.rid, r.cached_tokens))
            total_isl += chunk_end
            total_prefix += prefix_len
            prompt_tokens += max(min(chunk_end, r.prompt) - max(prefix_len, 0), 0)
            rem_total -= (pages_after * page - old_alloc_tokens) + reserve
            rem_input -= charged
            rem_chunk -= charged
            r.materialized = chunk_end
            r.status = _St.RUNNING
            can_run.append(r)
            if rem_chunk <= 0:
                break
        return can_run, total_isl, total_prefix, prompt_tokens

    def _decode_step(self, batch: list[_SReq], emitted: list[int], finished: list[int]) -> tuple[float, bool]:
        """One decode step over ``batch`` (in place); returns (decode ms, retracted any)."""
        if not batch:
            return 0.0, False
        page = self._page
        pool = self.pool
        done_now = [r for r in batch if r.seq - r.prompt >= r.maxout]
        if done_now:
            for r in done_now:
                batch.remove(r)
                finished.append(r.rid)
                self._complete(r)
        if not batch:
            return 0.0, False
        retracted = False

        def growth() -> int:
            return sum(1 for r in batch if r.seq + 1 > r.npages * page)

        need = growth()
        victims: list[_SReq] = []
        while pool.available < need and len(batch) > 1:
            victim = min(batch, key=lambda q: q.seq - q.prompt)
            batch.remove(victim)
            self._retract(victim)
            victims.append(victim)
            retracted = True
            need = growth()
        if victims:
            # back to the front of the queue in retraction order (the first retracted first),
            # as SGLang's scheduler re-queues a step's retracted list
            self._waiting.extendleft(reversed(victims))
        if pool.available < need:
            return 0.0, retracted  # cannot decode at all (single request too large)
        total_context = 0
        for r in batch:
            total_context += r.seq
        active = min(total_context, self._total_tokens)
        decode_ms = self._timing.decode_ms(len(batch), active)
        pool.take(need)
        completed: list[_SReq] = []
        for r in batch:
            if r.seq + 1 > r.npages * page:
                r.npages += 1
            r.seq += 1
            r.materialized += 1
            emitted.append(r.rid)
            if r.seq - r.prompt >= r.maxout:
                completed.append(r)
            elif r.pub < len(r.hashes):
                self._publish(r, r.materialized)  # cache_materialized_prefix after a token
        if completed:
            for r in completed:
                batch.remove(r)
                finished.append(r.rid)
                self._complete(r)
        return decode_ms, retracted

    def _retract(self, r: _SReq) -> None:
        self._free_kv(r, cache_generated=False)
        r.materialized = 0
        r.cached_tokens = 0
        r.status = _St.WAITING
        self.retractions += 1

    def _complete(self, r: _SReq) -> None:
        r.status = _St.HELD
        if r.source:
            self._lifecycle.append(self._source_held(r.handoff, r.prompt))
            return
        self._publish(r, r.seq)
        self._free_kv(r)
        del self._live[r.rid]
        if r.dest:
            self._active_dest.pop(r.handoff, None)
            r.dest = False
        self._gen += 1

    def _publish(self, r: _SReq, tokens: int, canonical: bool = False) -> None:
        """Insert the complete prompt pages below ``tokens`` into the radix tree (Stored).

        SGLang (1.6.1) publishes a request's pages when it finishes or between prefill chunks,
        not at allocation: a request cannot hit pages of one still being prefilled or held.
        Generated-token pages are inserted at release (:meth:`_free_kv`).
        """
        hi = min(tokens // self._page, len(r.hashes))
        if hi > r.pub:
            if self._caching:
                lo = r.pub
                held = holds_before(r.cached, r.hashes, lo)
                new = self.pool.promote(r.hashes, lo, hi, held)
                if len(new) == hi - lo or not canonical:
                    r.cached.extend(new)
                else:
                    self._adopt_duplicates(r, r.hashes[lo:hi], new)
            r.pub = hi

    def _adopt_duplicates(self, r: _SReq, pages: tuple[int, ...] | list[int], new: list[int]) -> None:
        """Pages of ``pages`` already in the radix tree: ``r`` frees its own copy and locks
        the tree's page instead, so that it holds one chain in prefix order."""
        inserted = set(new)
        dups = [h for h in pages if h not in inserted]
        self.pool.acquire(dups)
        self.pool.give_back(len(dups))
        r.cached.extend(pages)

    def _free_kv(self, r: _SReq, *, cache_generated: bool = True) -> None:
        if cache_generated and self._caching:
            # a finished request's full pages of generated tokens enter the radix tree too
            # (under unreachable ids): they were locked until now, so inserting them here is
            # equivalent to inserting them as they filled
            first = len(r.hashes)
            stop = r.materialized // self._page
            if stop > first:
                r.cached.extend(self.pool.promote(generated_block_ids(r.rid, first, stop)))
        if r.cached:
            self.pool.release(r.cached)
        self.pool.give_back(r.npages - len(r.cached))
        r.cached = []
        r.npages = 0
        r.pub = 0

    def _abort(self, r: _SReq) -> None:
        self._sync_running()
        for q in (self._waiting, self._prebuilt):
            try:
                q.remove(r)
            except ValueError:
                pass
        if r in self._running:
            self._running.remove(r)
        if r.npages:
            self._free_kv(r, cache_generated=False)
            self._gen += 1
        if r.source:
            self._sources.pop(r.handoff, None)
            r.source = False
        if r.dest:
            self._active_dest.pop(r.handoff, None)
            r.dest = False
        self._live.pop(r.rid, None)



    # --- introspection for tests ---------------------------------------------------------------

    def check_invariants(self) -> None:
        self._check_lazy()
        self._sync_running()
        self.pool.check()
        private = 0
        ref_count: dict[int, int] = {}
        for r in self._live.values():
            assert r.npages >= len(r.cached), (r.rid, r.npages, r.cached)
            assert r.npages * self._page >= r.materialized, (r.rid, r.npages, r.materialized)
            private += r.npages - len(r.cached)
            for h in r.cached:
                ref_count[h] = ref_count.get(h, 0) + 1
        assert private == self.pool.private_blocks, (private, self.pool.private_blocks)
        for h, c in self.pool.ref_counts().items():
            assert ref_count.get(h, 0) == c, (h, c)
        assert len(self._running) <= self.args.max_num_seqs
        assert self._min_ratio <= self.new_token_ratio <= self._init_ratio


ENGINE = EngineSpec("sglang", SglangWorker)
