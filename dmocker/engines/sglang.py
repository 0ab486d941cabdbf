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
Activation at a destination publishes its unpublished complete pages (Stored).

Hot path: a decode-only pass over the running batch runs on numpy arrays (sequence lengths,
pages, output limits, ids; one entry per running request) instead of per-request Python: the
arrays are authoritative while live, and are written back into the request objects before any
other code path reads them (extend batch, retraction, aborts, invariant checks).  Anything
unusual (a page shortage that needs retraction, a request with nothing to generate, unpublished
prompt pages) falls back to the per-request step; a Hypothesis test replays random workloads
through both and demands identical output.

Pages are the blocks of :class:`~dmocker.engines.block_pool.BlockPool` (page size = block
size): radix nodes are chained page hashes, locked = referenced, evictable = inactive.  Because
every access to a page also touches its whole prefix, LRU order there always evicts children
before parents, which is the radix tree's leaf-first eviction.
"""

from __future__ import annotations

import enum
from collections import deque
from itertools import compress
from typing import Hashable

import numpy as np
import numpy.typing as npt

from dmocker.handoff import SourceHeld
from dmocker.engines.block_pool import BlockPool, generated_block_ids
from dmocker.engines.common import blocks_freed, ceil_div, cut_point
from dmocker.engines.handoff_base import HandoffWorkerBase
from dmocker.engines.interface import (
    Admission,
    EngineArgs,
    EngineRequest,
    LifecycleEvent,
    PassCompletion,
    PassPlan,
    WorkerType,
    empty_ids,
)
from dmocker.engines.timing import PassTiming

__all__ = ["SglangWorker"]

I64 = npt.NDArray[np.int64]


class _St(enum.Enum):
    WAITING = 1
    PREBUILT = 2
    RUNNING = 3
    REMOTE_PENDING = 4
    RESERVED = 5
    HELD = 6


class _SReq:
    __slots__ = ("rid", "handoff", "prompt", "maxout", "hashes", "seq", "materialized",
                 "npages", "cached", "cached_tokens", "pub", "status", "source", "dest")

    def __init__(self, req: EngineRequest, maxout: int, handoff: Hashable, status: _St) -> None:
        self.rid = req.request_id
        self.handoff = handoff
        self.prompt = req.input_length
        self.maxout = maxout
        self.hashes = req.block_hashes
        self.seq = req.input_length  # prompt + output tokens
        self.materialized = 0  # tokens whose KV exists
        self.npages = 0  # pages held (locked radix pages + private pages)
        self.cached: list[int] = []  # page hashes locked by this request, in order
        self.cached_tokens = 0  # radix prefix hit of the first chunk
        self.pub = 0  # leading prompt pages already in the radix tree (or known duplicates)
        self.status = status
        self.source = False
        self.dest = False


class _Run:
    """A bulk decode run in flight: what splitting it needs (the state before it)."""

    __slots__ = ("start_ms", "times", "seq", "npg", "ratio", "need", "free", "evicted")

    def __init__(self, start_ms: float, times: npt.NDArray[np.float64], seq: I64, npg: I64,
                 ratio: float, need: int, free: int, evicted: list[int]) -> None:
        self.start_ms = start_ms
        self.times = times
        self.seq = seq
        self.npg = npg
        self.ratio = ratio
        self.need = need  # pages taken
        self.free = free  # free pages before
        self.evicted = evicted  # cached pages evicted for it, oldest first


class SglangWorker(HandoffWorkerBase[_SReq]):
    """One mock SGLang worker (see module docstring)."""

    def __init__(self, args: EngineArgs, worker_idx: int = 0, *, record_kv_events: bool = False,
                 vectorized: bool = True) -> None:
        self.args = args
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
        self._prefill_worker = args.worker_type is WorkerType.PREFILL
        self.pool = BlockPool(args.num_gpu_blocks, record=self._record)
        self._total_tokens = args.total_kv_tokens
        self._timing = PassTiming(args)
        init = 0.7 * args.schedule_conservativeness
        self._init_ratio = init
        self._min_ratio = init * args.min_new_token_ratio_factor
        self._decay = (init - self._min_ratio) / args.new_token_ratio_decay_steps
        self.new_token_ratio = init
        self._busy = False
        self._completion: PassCompletion | None = None
        self._gen = 0
        self._live: dict[int, _SReq] = {}
        self._waiting: deque[_SReq] = deque()
        self._prebuilt: deque[_SReq] = deque()
        self._running: list[_SReq] = []
        # Decode fast path: while ``_vec`` is set these arrays (one entry per ``_running`` request,
        # same order) are authoritative for seq / npages / materialized; the objects are stale
        # by ``_a_seq[i] - r.seq`` steps until :meth:`_sync_running` writes them back.
        self._vec = False
        self._a_seq: I64 = np.zeros(0, dtype=np.int64)
        self._a_npg: I64 = np.zeros(0, dtype=np.int64)
        self._a_end: I64 = np.zeros(0, dtype=np.int64)
        self._a_rid: I64 = np.zeros(0, dtype=np.int64)
        self._sources: dict[Hashable, _SReq] = {}
        self._pending: deque[tuple[_SReq, int]] = deque()
        self._pending_ids: set[Hashable] = set()
        self._reserved: dict[Hashable, _SReq] = {}
        self._active_dest: dict[Hashable, _SReq] = {}
        self._lifecycle: list[LifecycleEvent] = []
        self.retractions = 0
        self.oom_resets = 0
        self.vectorized_passes = 0
        self._bulk: _Run | None = None  # the bulk decode run in flight (start_pass(bulk=True))
        self._tail = False  # the run's last pass finishes requests, applied once it has started
        self.bulk_runs = 0
        self.bulk_joins = 0  # runs whose first pass admits activated requests
        self.bulk_tails = 0  # runs whose last pass finishes requests

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
        # publish the unpublished complete prompt pages beyond the locked prefix
        self._publish(r, r.prompt)
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
        args = self.args
        admissions: list[Admission] = []
        # 1. promote materialized destinations
        max_run = args.max_num_seqs
        promoted: list[_SReq] = []
        while self._prebuilt and len(self._running) < max_run:
            r = self._prebuilt.popleft()
            r.status = _St.RUNNING
            self._running.append(r)
            promoted.append(r)
            admissions.append(Admission(r.rid, 0))
        if promoted and self._vec:
            self._vec_append(promoted)
        can_run: list[_SReq] = []
        total_isl = total_prefix = prompt_tokens = 0
        if not self._prebuilt and not self._pending and self._waiting:
            self._sync_running()
            can_run, total_isl, total_prefix, prompt_tokens = self._extend_batch(admissions)
        prefill_ms = 0.0
        if can_run and args.worker_type is not WorkerType.DECODE:
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
        if can_run:
            decode_ms, retracted = self._decode_step(newly, emitted, finished)
            if self._prefill_worker:
                # Dynamo 1.6.1 charges a prefill worker's extend pass its prefill time only (a
                # newer mocker revision adds one decode step); replays match 1.6.1 this way.
                decode_ms = 0.0
            self._running.extend(newly)  # completed and retracted ones were removed
        else:
            fast = self._decode_running_vec(finished)
            if fast is not None:
                decode_ms, emitted_arr = fast
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
            emitted_out = np.array(emitted, dtype=np.int64)
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
            finished=np.array(finished, dtype=np.int64) if finished else empty_ids(),
            lifecycle=lifecycle,
            kv_events=self._drain_kv(),  # SGLang: visible at pass end
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
                               kv_events=c.kv_events + events, run_times=c.run_times)
        return c

    # --- bulk decode runs ---------------------------------------------------------------------

    def _start_run(self, now_ms: float) -> PassPlan | None:
        """Every running request decodes, nothing is queued but activated destinations that
        all join now: until the first request finishes, each pass is the vectorised decode
        step with a known batch, so the passes through that one are computed at once (None:
        fewer than two such passes, or the pool might not cover them and the per-pass path
        decides).  The first pass promotes the joiners, as a decode pass does; the completions
        of the last pass are applied once it is known to have started (:meth:`_end_run_tail`,
        from :meth:`split_run` or :meth:`finish_pass`), so a run cut before it leaves them
        running."""
        promote: list[_SReq] | None = None
        if self._prebuilt:
            promote = list(self._prebuilt)
            if len(self._running) + len(promote) > self.args.max_num_seqs:
                return None
            for r in promote:
                if r.pub < len(r.hashes) or r.materialized != r.seq or r.seq >= r.prompt + r.maxout:
                    return None
        if not self._vec and not self._vec_load():
            return None
        seq, npg, ends = self._a_seq, self._a_npg, self._a_end
        if promote is not None:
            seq = np.concatenate((seq, [r.seq for r in promote])).astype(np.int64, copy=False)
            npg = np.concatenate((npg, [r.npages for r in promote])).astype(np.int64, copy=False)
            ends = np.concatenate((ends, [r.prompt + r.maxout for r in promote])).astype(np.int64, copy=False)
        left = ends - seq
        n_pass = int(left.min())  # through the pass in which somebody finishes
        page = self._page
        pool = self.pool
        # a held source's SourceHeld belongs to its own pass: stop before it (prefill side)
        tail = True
        if self._sources:
            batch = self._running + promote if promote is not None else self._running
            tail = not any(batch[i].source for i in np.flatnonzero(left == n_pass).tolist())
        if not tail:
            n_pass -= 1
        npg_end = np.maximum(npg, (seq + (n_pass + page - 1)) // page)  # pages for seq + n_pass
        need = int(np.add.reduce(npg_end - npg))
        if need > pool.available:
            if not tail:
                return None
            tail = False  # the per-pass path decides the finishing pass
            n_pass -= 1
            npg_end = np.maximum(npg, (seq + (n_pass + page - 1)) // page)
            need = int(np.add.reduce(npg_end - npg))
            if need > pool.available:
                return None
        if n_pass < 2:
            return None
        admissions: tuple[Admission, ...] = ()
        if promote is not None:
            adm: list[Admission] = []
            for r in promote:
                r.status = _St.RUNNING
                adm.append(Admission(r.rid, 0))
            self._prebuilt.clear()
            self._running.extend(promote)
            self._a_end = ends
            self._a_rid = np.concatenate((self._a_rid, [r.rid for r in promote])).astype(np.int64, copy=False)
            admissions = tuple(adm)
        n = len(self._running)
        # summed sequence lengths before each pass (the per-pass step caps them at the pool's
        # tokens; the timing model's own cap at 1.0 gives the same floats)
        active0 = int(np.add.reduce(seq))
        times = self._timing.run_end_times(
            now_ms, n, np.arange(active0, active0 + n * n_pass, n, dtype=np.int64))
        free, evicted = pool.take_undoable(need)
        run = _Run(now_ms, times, seq.copy() if promote is None else seq,
                   npg.copy() if promote is None else npg, self.new_token_ratio, need, free, evicted)
        self._a_seq = seq + n_pass
        self._a_npg = npg_end
        self._decay_ratio(n_pass)
        self.vectorized_passes += n_pass
        self.bulk_runs += 1
        self.bulk_joins += promote is not None
        self.bulk_tails += tail
        self._bulk = run
        self._tail = tail
        end = float(times[-1])
        finished = self._a_rid[left == n_pass] if tail else empty_ids()
        self._completion = PassCompletion(end_ms=end, emitted=self._a_rid, finished=finished,
                                          run_times=times)
        self._busy = True
        return PassPlan(start_ms=now_ms, end_ms=end, admissions=admissions, decode_tokens=n,
                        last_start_ms=float(times[-2]))

    def _end_run_tail(self) -> None:
        """The run's last pass has started: the requests it finishes complete (what the decode
        step does after it)."""
        self._tail = False
        self._retire_done(self._a_seq >= self._a_end, [])

    def _decay_ratio(self, passes: int) -> None:
        ratio, floor, decay = self.new_token_ratio, self._min_ratio, self._decay
        while passes > 0 and ratio > floor:
            ratio = max(ratio - decay, floor)
            passes -= 1
        self.new_token_ratio = ratio

    def split_run(self, now_ms: float, started: bool) -> tuple[float, float] | None:
        run = self._bulk
        if run is None:
            return None
        times = run.times
        total = int(times.shape[0])
        keep = cut_point(times, now_ms, started)
        if keep >= total:
            if self._tail:
                self._end_run_tail()
            return None
        self._tail = False  # the finishing pass was cut off: they keep running
        seq = run.seq + keep
        npg = np.maximum(run.npg, (seq + (self._page - 1)) // self._page)
        need = int(np.add.reduce(npg - run.npg))
        evicted = self.pool.untake(run.free, run.evicted, run.need, need)
        self._a_seq, self._a_npg = seq, npg
        self.new_token_ratio = run.ratio
        self._decay_ratio(keep)
        self.vectorized_passes -= total - keep
        kept = times[:keep]
        end = float(kept[-1])
        assert self._completion is not None
        self._completion = PassCompletion(end_ms=end, emitted=self._completion.emitted,
                                          run_times=kept if keep >= 2 else None)
        if keep < 2:
            self._bulk = None
        else:
            self._bulk = _Run(run.start_ms, kept, run.seq, run.npg, run.ratio, need, run.free, evicted)
        return end, float(kept[-2]) if keep >= 2 else run.start_ms

    def run_blocks_ahead(self, at_ms: float) -> int:
        run = self._bulk
        if run is None:
            return 0
        keep = cut_point(run.times, at_ms, True)
        if keep >= run.times.shape[0]:
            return self._tail_blocks() if self._tail else 0
        npg = np.maximum(run.npg, -(-(run.seq + keep) // self._page))
        return run.need - int((npg - run.npg).sum())

    def _tail_blocks(self) -> int:
        """Pages the run's finishing requests give up when its last pass starts (what
        :meth:`_end_run_tail` will free): the per-pass replay has already freed them once that
        pass has started.  A held source keeps its pages; a cached page stays in use while
        someone else still references it."""
        done = self._a_seq >= self._a_end
        finishing = [self._running[i] for i in np.flatnonzero(done).tolist()]
        pages = self._a_npg[done].tolist()
        return blocks_freed(self.pool, ((p, r.cached) for r, p in zip(finishing, pages) if not r.source))

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
        slots = args.max_num_seqs - len(self._running)
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

    def _vec_load(self) -> bool:
        """Build the decode arrays from the running objects (False: a request needs the object
        path, e.g. it still has unpublished prompt pages)."""
        run = self._running
        for r in run:
            if r.pub < len(r.hashes) or r.materialized != r.seq or r.seq >= r.prompt + r.maxout:
                return False
        n = len(run)
        self._a_seq = np.fromiter([r.seq for r in run], dtype=np.int64, count=n)
        self._a_npg = np.fromiter([r.npages for r in run], dtype=np.int64, count=n)
        self._a_end = np.fromiter([r.prompt + r.maxout for r in run], dtype=np.int64, count=n)
        self._a_rid = np.fromiter([r.rid for r in run], dtype=np.int64, count=n)
        self._vec = True
        return True

    def _vec_append(self, added: list[_SReq]) -> None:
        """Requests appended to ``_running`` while the arrays are live (their objects are fresh)."""
        for r in added:
            if r.pub < len(r.hashes) or r.materialized != r.seq or r.seq >= r.prompt + r.maxout:
                self._sync_running()
                return
        self._a_seq = np.concatenate((self._a_seq, [r.seq for r in added]))
        self._a_npg = np.concatenate((self._a_npg, [r.npages for r in added]))
        self._a_end = np.concatenate((self._a_end, [r.prompt + r.maxout for r in added]))
        self._a_rid = np.concatenate((self._a_rid, [r.rid for r in added]))

    def _sync_running(self) -> None:
        """Write the decode arrays back into the running objects and leave the fast path."""
        if not self._vec:
            return
        self._vec = False
        for r, seq, npg in zip(self._running, self._a_seq.tolist(), self._a_npg.tolist()):
            d = seq - r.seq
            if d:
                r.seq = seq
                r.materialized += d
            r.npages = npg

    def _decode_running_vec(self, finished: list[int]) -> tuple[float, I64] | None:
        """``_decode_step(self._running)`` on arrays, for the common case: nobody is done
        before the step and the pool covers every page growth (no retraction).  Returns
        (decode ms, emitted ids), or None when the object path must run instead."""
        run = self._running
        if not run or not self._allow_vec:
            return None
        if not self._vec and not self._vec_load():
            return None
        # (nobody is done before the step: requests with nothing to generate never enter the
        # arrays, and those that finish leave them)
        seq, npg = self._a_seq, self._a_npg
        grow = seq >= npg * self._page  # seq + 1 > npages * page
        need = int(np.count_nonzero(grow))
        pool = self.pool
        if pool.available < need:
            return None
        active = min(int(np.add.reduce(seq)), self._total_tokens)
        decode_ms = self._timing.decode_ms(len(run), active)
        pool.take(need)
        self.vectorized_passes += 1
        npg += grow
        seq += 1
        emitted = self._a_rid
        done = seq >= self._a_end
        if np.count_nonzero(done):
            self._retire_done(done, finished)
        return decode_ms, emitted

    def _retire_done(self, done: npt.NDArray[np.bool_], finished: list[int]) -> None:
        """Running requests marked in ``done`` (at least one) finished their last decode step:
        write their state back, drop them from the batch and the arrays, complete them."""
        run = self._running
        seq, npg = self._a_seq, self._a_npg
        idx = np.flatnonzero(done).tolist()
        completed = [run[i] for i in idx]
        seq_l, npg_l = seq[idx].tolist(), npg[idx].tolist()
        for r, s_, p_ in zip(completed, seq_l, npg_l):
            r.materialized += s_ - r.seq
            r.seq = s_
            r.npages = p_
        keep = ~done
        self._running = list(compress(run, keep.tolist()))
        self._a_seq = seq[keep]
        self._a_npg = npg[keep]
        self._a_end = self._a_end[keep]
        self._a_rid = self._a_rid[keep]
        for r in completed:
            finished.append(r.rid)
            self._complete(r)

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
        while pool.available < need and len(batch) > 1:
            victim = min(batch, key=lambda q: q.seq - q.prompt)
            batch.remove(victim)
            self._retract(victim)
            retracted = True
            need = growth()
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
        self._waiting.appendleft(r)
        self.retractions += 1

    def _complete(self, r: _SReq) -> None:
        r.status = _St.HELD
        if r.source:
            self._lifecycle.append(SourceHeld(r.handoff, self.args.transfer_timing(r.prompt)))
            return
        self._publish(r, r.seq)
        self._free_kv(r)
        del self._live[r.rid]
        if r.dest:
            self._active_dest.pop(r.handoff, None)
            r.dest = False
        self._gen += 1

    def _publish(self, r: _SReq, tokens: int) -> None:
        """Insert the complete prompt pages below ``tokens`` into the radix tree (Stored).

        SGLang (1.6.1) publishes a request's pages when it finishes or between prefill chunks,
        not at allocation: a request cannot hit pages of one still being prefilled or held.
        Generated-token pages are inserted at release (:meth:`_free_kv`).
        """
        hi = min(tokens // self._page, len(r.hashes))
        if hi > r.pub:
            if self._caching:
                r.cached.extend(self.pool.promote(r.hashes[r.pub:hi]))
            r.pub = hi

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
