"""The mock SGLang worker's scheduler: one pass as the reference computes it.

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
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dmocker.engines.block_pool import BlockPool
from dmocker.engines.common import ceil_div
from dmocker.engines.handoff_book import HandoffBook
from dmocker.engines.interface import (
    Admission,
    BatchDelta,
    EngineArgs,
    PassCompletion,
    PassPlan,
    WorkerType,
    empty_ids,
    ids_array,
)
from dmocker.engines.outbox import Outbox
from dmocker.engines.sglang_decode import LazyBatch
from dmocker.engines.sglang_queues import SglQueues
from dmocker.engines.sglang_request import SglRequest, SglStatus, TokenRatio
from dmocker.engines.timing import PassTiming

__all__ = ["SglScheduler"]

I64 = npt.NDArray[np.int64]


class SglScheduler:
    """The reference's pass over an SGLang worker's queues (module docstring); decode-only
    passes go to the lazy batch when it can take them."""

    def __init__(self, args: EngineArgs, page: int, total_tokens: int, queues: SglQueues, lazy: LazyBatch,
                 book: HandoffBook[SglRequest], pool: BlockPool, outbox: Outbox, timing: PassTiming,
                 ratio: TokenRatio) -> None:
        self._queues = queues
        self._lazy = lazy
        self._book = book
        self._pool = pool
        self._outbox = outbox
        self._timing = timing
        self._ratio = ratio
        self._page = page  # args.page_tokens and args.total_kv_tokens, resolved once by the worker
        self._caching = args.enable_prefix_caching
        self._max_seqs = args.max_num_seqs
        self._decode_worker = args.worker_type is WorkerType.DECODE
        self._total_tokens = total_tokens
        self._clip = args.clip_max_new_tokens
        self._max_prefill = args.max_prefill_tokens
        self._chunk = args.chunked_prefill_size

    def run_pass(self, now_ms: float) -> PassPlan | None:
        """Compute the next pass (the worker has work and no bulk run applies)."""
        admissions: list[Admission] = []
        # 1. promote materialized destinations
        queues = self._queues
        lazy = self._lazy
        running = queues.running
        max_run = self._max_seqs
        promoted: list[SglRequest] = []
        while queues.prebuilt and len(running) < max_run:
            r = queues.prebuilt.popleft()
            r.status = SglStatus.RUNNING
            running.append(r)
            promoted.append(r)
            admissions.append(Admission(r.rid, 0))
        if promoted and lazy.lazy:
            lazy.append(promoted)
        can_run: list[SglRequest] = []
        total_isl = total_prefix = prompt_tokens = 0
        if not queues.prebuilt and not self._book.pending and queues.waiting:
            lazy.sync()
            can_run, total_isl, total_prefix, prompt_tokens = self._extend_batch(admissions)
        prefill_ms = 0.0
        if can_run and not self._decode_worker:
            prefill_ms = self._timing.prefill_ms(len(can_run), total_isl, total_prefix)
        newly: list[SglRequest] = []
        for r in can_run:
            if r.materialized < r.seq:
                queues.publish(r, r.materialized)  # cache_unfinished_req: the aligned part
                queues.waiting.appendleft(r)  # partial chunk: continues next pass
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
            running.extend(newly)  # completed and retracted ones were removed
        else:
            fast = lazy.decode(finished)
            if fast is not None:
                decode_ms, emitted_arr, delta = fast
                retracted = False
            else:
                lazy.sync()
                decode_ms, retracted = self._decode_step(running, emitted, finished)
        ratio = self._ratio
        if retracted:
            ratio.reset()
            self._book.gen += 1
        ratio.decay()
        if emitted_arr is not None and len(emitted_arr):
            emitted_out = emitted_arr
        elif emitted:
            emitted_out = ids_array(emitted)
        else:
            emitted_out = empty_ids()
        if not (admissions or can_run or len(emitted_out) or finished or retracted):
            return None
        end = now_ms + prefill_ms + decode_ms
        outbox = self._outbox
        outbox.start(PassCompletion(
            end_ms=end,
            emitted=emitted_out,
            finished=tuple(finished),
            lifecycle=outbox.take_held(),
            kv_events=outbox.drain_kv(),  # SGLang: visible at pass end
            delta=delta,
        ))
        return PassPlan(start_ms=now_ms, end_ms=end, admissions=tuple(admissions),
                        prefill_tokens=prompt_tokens, decode_tokens=len(emitted_out))

    def _extend_batch(self, admissions: list[Admission]) -> tuple[list[SglRequest], int, int, int]:
        """FIFO extend batch under the new-token-ratio budget (module docstring, step 2)."""
        queues = self._queues
        page = self._page
        pool = self._pool
        clip = self._clip
        ratio = self._ratio.value
        reserved_decode = 0.0
        overhead = 0
        for r in queues.running:
            reserved_decode += min(r.maxout - (r.seq - r.prompt), clip) * ratio
            overhead += r.npages * page - r.materialized
        for r in queues.waiting:
            overhead += r.npages * page - r.materialized
        avail = pool.available * page
        rem_total = float(max(avail - overhead, 0)) - reserved_decode
        rem_input = float(self._max_prefill)
        rem_chunk = float(self._chunk)
        slots = self._max_seqs - len(queues.running)
        can_run: list[SglRequest] = []
        total_isl = total_prefix = prompt_tokens = 0
        waiting = queues.waiting
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
                    self._ratio.out_of_memory()
                    break
                r.cached = list(prefix)
                r.pub = n_prefix
                r.npages = pages_after
                r.cached_tokens = n_prefix * page
                prefix_len = r.cached_tokens
            else:
                fresh = pages_after - r.npages
                if not pool.take(fresh):
                    self._ratio.out_of_memory()
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
            r.status = SglStatus.RUNNING
            can_run.append(r)
            if rem_chunk <= 0:
                break
        return can_run, total_isl, total_prefix, prompt_tokens

    def _decode_step(self, batch: list[SglRequest], emitted: list[int], finished: list[int]) -> tuple[float, bool]:
        """One decode step over ``batch`` (in place); returns (decode ms, retracted any)."""
        if not batch:
            return 0.0, False
        queues = self._queues
        page = self._page
        pool = self._pool
        done_now = [r for r in batch if r.seq - r.prompt >= r.maxout]
        if done_now:
            self._complete(batch, done_now, finished)
        if not batch:
            return 0.0, False
        retracted = False

        def growth() -> int:
            return sum(1 for r in batch if r.seq + 1 > r.npages * page)

        need = growth()
        victims: list[SglRequest] = []
        while pool.available < need and len(batch) > 1:
            victim = min(batch, key=lambda q: q.seq - q.prompt)
            batch.remove(victim)
            queues.retract(victim)
            victims.append(victim)
            retracted = True
            need = growth()
        if victims:
            # back to the front of the queue in retraction order (the first retracted first),
            # as SGLang's scheduler re-queues a step's retracted list
            queues.waiting.extendleft(reversed(victims))
        if pool.available < need:
            return 0.0, retracted  # cannot decode at all (single request too large)
        total_context = 0
        for r in batch:
            total_context += r.seq
        active = min(total_context, self._total_tokens)
        decode_ms = self._timing.decode_ms(len(batch), active)
        pool.take(need)
        completed: list[SglRequest] = []
        for r in batch:
            if r.seq + 1 > r.npages * page:
                r.npages += 1
            r.seq += 1
            r.materialized += 1
            emitted.append(r.rid)
            if r.seq - r.prompt >= r.maxout:
                completed.append(r)
            elif r.pub < len(r.hashes):
                queues.publish(r, r.materialized)  # cache_materialized_prefix after a token
        if completed:
            self._complete(batch, completed, finished)
        return decode_ms, retracted

    def _complete(self, batch: list[SglRequest], done: list[SglRequest], finished: list[int]) -> None:
        """``done`` leave ``batch`` and complete, in order."""
        for r in done:
            batch.remove(r)
            finished.append(r.rid)
            self._queues.complete(r)
