"""Mock vLLM worker: paged prefix cache, chunked prefill, LIFO preemption, handoff holds.

One pass (``start_pass``), as the reference's vLLM mock schedules it:

1. **Running requests first**, in order, under the ``max_num_batched_tokens`` budget: each asks
   for the tokens it still has to compute (a prompt chunk, or the one sampled token of a decode
   step).  A block allocation that fails preempts the *last* running request (LIFO): its KV is
   freed, its progress reset to 0 and it goes to the front of the waiting queue.
2. **Waiting requests**, FIFO, while fewer than ``max_num_seqs`` run and nothing was preempted:
   rejected if the prompt is ``>= max_model_len`` or its known sequence needs more blocks than
   the pool has; admitted only if the whole known sequence fits the non-active blocks (minus
   shared active prefix blocks); then scheduled like a running request.  While a destination
   reservation is pending, only *materialized* requests (activated handoffs, prompt already
   present) are admitted — they cost no prefill and report ``reused_input_tokens = 0``.
3. **Emission**: every running request whose sequence is fully computed samples one token; a
   request that reaches its output limit completes.  The sampled token is "dangling": its KV
   slot is allocated only when the next pass computes it, so a finished request never holds a
   block for its last token.  On a prefill worker the first token comes out of the prefill pass
   (no decode time) and a completing handoff request becomes a *held source*: its KV stays
   referenced and ``SourceHeld`` is emitted.

Full prompt blocks are cached under their chained hash as soon as a scheduling step computes
them (Stored, visible at pass start), so a later request in the same pass can hit them.

Decode time takes as active KV the summed sequence lengths of the requests decoded in the pass
(``DecodeKvAccounting.LOGICAL``, Dynamo 1.6.1: golden probe traces match it to the digit) or,
optionally, the distinct resident blocks (``RESIDENT``, newer mocker sources).

The lockstep decode hot path and bulk decode runs live in :mod:`dmocker.engines.vllm_lockstep`;
the request record in :mod:`dmocker.engines.vllm_request`.
"""

from __future__ import annotations

import enum
from collections import deque
from typing import Hashable

import numpy as np
import numpy.typing as npt

from dmocker.engines.block_pool import BlockPool, generated_block_ids, holds_before
from dmocker.engines.common import BatchTracker, ceil_div
from dmocker.engines.interface import (
    Admission,
    BatchDelta,
    DecodeKvAccounting,
    EngineArgs,
    EngineRequest,
    LifecycleEvent,
    PassCompletion,
    PassPlan,
    WorkerType,
    ids_array,
)
from dmocker.engines.engine_spec import EngineSpec
from dmocker.engines.timing import PassTiming
from dmocker.engines.vllm_lockstep import LockstepDecode
from dmocker.engines.vllm_request import VllmRequest, VllmStatus

__all__ = ["ENGINE", "VllmWorker"]

I64 = npt.NDArray[np.int64]


class _Outcome(enum.Enum):
    SCHEDULED = 1
    BLOCKED = 2
    CURRENT_PREEMPTED = 3


class VllmWorker(LockstepDecode):
    """One mock vLLM worker (see module docstring)."""

    def __init__(self, args: EngineArgs, worker_idx: int = 0, *, record_kv_events: bool = False,
                 lockstep: bool = True) -> None:
        self.args = args
        self._link = args.transfer_timing(0)
        self._max_seqs = args.max_num_seqs
        self._mbt = args.max_num_batched_tokens
        self._decode_worker = args.worker_type is WorkerType.DECODE
        self.worker_idx = worker_idx
        self._bs = args.page_tokens
        self._block = self._bs
        self._unit = "block size"
        self._held = VllmStatus.HELD
        self._waiting_status = VllmStatus.WAITING
        self._pending_status = VllmStatus.REMOTE_PENDING
        self._is_prefill = args.worker_type is WorkerType.PREFILL
        self._caching = args.enable_prefix_caching
        self._mml = args.max_model_len
        self._record = record_kv_events and args.enable_prefix_caching
        self._allow_lockstep = lockstep
        self._logical_kv = args.decode_kv_accounting is DecodeKvAccounting.LOGICAL
        self.pool = BlockPool(args.num_gpu_blocks, record=self._record)
        self._timing = PassTiming(args)
        self._busy = False
        self._completion = None
        self._gen = 0  # capacity generation (destination retry gating)
        self._live = {}  # every request id this worker knows
        self._waiting = deque()
        self._reserved_seq = 0  # destinations reserved so far (their waiting-queue order)
        self._preempted_seq = 0  # minus the preemptions so far (they queue in front)
        self._run = {}  # running, in running order
        # lockstep state
        self._lock = False
        self._K = 0  # passes started so far
        self._bcount = [0] * self._bs
        self._sum_po = 0  # sum of prompt + off over lockstep running requests
        self._finish_at = {}
        self._rid_q = None
        self._batch = BatchTracker()
        # handoff registries (insertion-ordered: deterministic)
        self._sources = {}  # pending or held sources by handoff id
        self._pending = deque()  # (request, last attempted generation)
        self._pending_ids = set()
        self._reserved = {}
        self._active_dest = {}
        self._lifecycle: list[LifecycleEvent] = []
        # counters (telemetry, tests)
        self.preemptions = 0
        self.lockstep_passes = 0
        self.exact_passes = 0
        # the bulk decode run in flight: (start ms, pass end times, K before, blocks taken by
        # the end of each pass, free blocks before, blocks evicted)
        self._bulk = None
        self.bulk_runs = 0
        self.bulk_joins = 0  # runs whose first pass admits activated requests
        self.bulk_tails = 0  # runs whose last pass finishes requests
        self._tail = -1  # the run's last pass finishes requests, applied once it has started

    # --- hooks of the shared handoff bookkeeping (handoff_base) --------------------------------

    def _new_request(self, request: EngineRequest, maxout: int, handoff: Hashable, status: enum.Enum) -> VllmRequest:
        assert isinstance(status, VllmStatus)
        return VllmRequest(request, maxout, handoff, status, self._mml)

    def _remove(self, r: VllmRequest) -> None:
        self._drop(r)

    def _mark_reserved(self, head: VllmRequest, n_blocks: int) -> None:
        head.nblocks = n_blocks
        head.status = VllmStatus.RESERVED
        self._reserved_seq += 1
        head.qseq = self._reserved_seq

    def _reservation_gate(self, head: VllmRequest) -> bool:
        return len(self._run) < self._max_seqs

    # --- protocol surface ----------------------------------------------------------------------

    def has_work(self) -> bool:
        return bool(self._waiting) or bool(self._run)

    @property
    def num_running(self) -> int:
        return len(self._run)

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    # --- commands: source side -----------------------------------------------------------------




    # --- commands: destination side ------------------------------------------------------------

    def _materialize_destination(self, r: VllmRequest) -> None:
        # Commit: fresh full prompt blocks enter the cache (Stored); the partial tail and any
        # block whose hash got cached meanwhile stay private.
        if self._caching and len(r.hashes) > len(r.cached):
            r.cached.extend(self.pool.promote(r.hashes, len(r.cached)))  # (holds the prefix)
        r.computed = r.prompt
        r.seq = r.prompt
        r.status = VllmStatus.WAITING
        # Dynamo 1.6.1 queues a destination for decoding in reservation order, not activation
        # order: one reserved earlier but activated (transferred) later goes ahead of the
        # activated ones reserved after it.
        waiting = self._waiting
        i = len(waiting)
        while i and waiting[i - 1].qseq > r.qseq:
            i -= 1
        if i == len(waiting):
            waiting.append(r)
        else:
            waiting.insert(i, r)

    # --- passes --------------------------------------------------------------------------------

    def start_pass(self, now_ms: float, bulk: bool = False) -> PassPlan | None:
        if self._busy:
            raise RuntimeError(f"worker {self.worker_idx} is already mid-pass")
        if not self._run and not self._waiting:
            return None
        k = self._K + 1
        if (bulk and self._lock and not self._pending and not self._record
                and self._logical_kv and not self._is_prefill and not self._lifecycle):
            plan = self._start_run(now_ms)
            if plan is not None:
                return plan
        if self._lock:
            n = len(self._run)
            nblocks = self._bcount[k % self._bs]
            if n <= self._mbt and self.pool.take(nblocks):
                return self._lockstep_pass(now_ms, k, n)
            self._materialize_at_rest()
        return self._exact_pass(now_ms, k)

    def finish_pass(self) -> PassCompletion:
        if not self._busy or self._completion is None:
            raise RuntimeError(f"worker {self.worker_idx} has no pass in flight")
        self._busy = False
        self._bulk = None
        if self._tail >= 0:
            self._end_run_tail()
        c = self._completion
        self._completion = None
        retry = self._retry_destinations() if self._pending else []
        events = self._drain_kv()
        if retry or events:
            c = PassCompletion(
                end_ms=c.end_ms,
                emitted=c.emitted,
                finished=c.finished,
                rejected=c.rejected,
                lifecycle=c.lifecycle + tuple(retry),
                kv_events=events,
                run_times=c.run_times,
                delta=c.delta,
            )
        return c

    # --- exact pass ----------------------------------------------------------------------------

    def _exact_pass(  # noqa: C901 - one scheduler, kept in one place on purpose
        self,
        now_ms: float,
        k: int,
        resume: tuple[int, list[Admission], list[int]] | None = None,
    ) -> PassPlan | None:
        """The reference scheduler, request by request (explicit state)."""
        self._K = k
        self.exact_passes += 1
        args = self.args
        bs = self._bs
        decode_worker = self._decode_worker
        run = list(self._run.values())
        scheduled: dict[int, tuple[int, int, int]] = {}
        stats = [0, 0, 0, 0]  # batch_count, total_isl, total_prefix, prompt tokens
        preempted_any = False
        changed = False

        budget_box = [0]

        def account(used: int, ptoks: int, pbefore: int,
                    undo: tuple[int, int, int, int] | None) -> None:
            nonlocal preempted_any
            if undo is not None:
                preempted_any = True
                budget_box[0] += undo[0]
                stats[0] -= undo[1]
                stats[1] -= undo[2]
                stats[2] -= undo[3]
            budget_box[0] -= used
            if ptoks > 0 and not decode_worker:
                stats[0] += 1
                stats[1] += pbefore + ptoks
                stats[2] += pbefore
                stats[3] += ptoks

        if resume is None:
            budget_box[0] = self._mbt
            admissions: list[Admission] = []
            rejected: list[int] = []
            # 1. running requests
            i = 0
            while i < len(run) and budget_box[0] > 0:
                r = run[i]
                out, used, ptoks, pbefore, undo = self._schedule(r, False, 0, budget_box[0], run, scheduled)
                account(used, ptoks, pbefore, undo)
                if undo is not None or used:
                    changed = True
                if out is _Outcome.SCHEDULED:
                    i += 1
                elif out is _Outcome.BLOCKED:
                    break
                # CURRENT_PREEMPTED: r left `run`; index i now holds the next request
        else:
            budget_box[0], admissions, rejected = resume
            changed = True  # the lockstep running phase already computed tokens
            for r in run:  # what that phase scheduled (a preemption gives it back)
                scheduled[r.rid] = (1 if r.seq - r.prompt > 0 else 0, 0, r.prompt)

        # 2. waiting requests
        while not preempted_any and self._waiting and len(run) < self._max_seqs:
            pending_head = bool(self._pending)
            nxt = self._next_waiting(pending_head)
            if nxt is None:
                break
            r = nxt
            if self._mml is not None and r.prompt >= self._mml:
                self._drop(r)
                rejected.append(r.rid)
                changed = True
                continue
            if r.computed >= r.prompt and r.nblocks * bs >= r.prompt:
                # Materialized: the prompt is already here; no prefill, no reuse reported.
                self._waiting.remove(r)
                r.status = VllmStatus.RUNNING
                run.append(r)
                admissions.append(Admission(r.rid, 0))
                changed = True
                if budget_box[0] == 0:
                    break
                continue
            if pending_head:
                break
            if r.status is VllmStatus.WAITING and ceil_div(r.seq, bs) > args.num_gpu_blocks:
                self._drop(r)
                rejected.append(r.rid)
                changed = True
                continue
            cached_tokens, active_tokens = self._prefix_cost(r)
            needed = ceil_div(r.seq, bs) - active_tokens // bs
            if needed > args.num_gpu_blocks - self.pool.num_active_blocks:
                break  # the FIFO head does not fit yet
            out, used, ptoks, pbefore, undo = self._schedule(r, True, cached_tokens, budget_box[0], run, scheduled)
            account(used, ptoks, pbefore, undo)
            if undo is not None:
                changed = True
            if out is not _Outcome.SCHEDULED:
                break
            changed = True
            admissions.append(Admission(r.rid, cached_tokens))
            if used == 0 and budget_box[0] == 0:
                break

        # 3. emission
        prefill_ms = self._timing.prefill_ms(stats[0], stats[1], stats[2])
        ready: list[VllmRequest] = []
        done: list[VllmRequest] = []
        for r in run:
            if r.computed >= r.seq:
                if r.seq - r.prompt < r.limit:
                    ready.append(r)
                else:
                    done.append(r)  # nothing left to generate: completes without a token
        n_ready = len(ready)
        if self._logical_kv:
            active_tokens = sum(r.seq for r in ready)
        else:
            active_tokens = self.pool.num_active_blocks * bs
        emitted_ids: list[int] = []
        for r in ready:
            r.seq += 1
            emitted_ids.append(r.rid)
            if r.seq - r.prompt >= r.limit:
                done.append(r)
        finished_ids: list[int] = []
        if done:
            gone = set()
            for r in done:
                gone.add(r.rid)
                finished_ids.append(r.rid)
                self._complete(r)
            run = [r for r in run if r.rid not in gone]
        self._run = {r.rid: r for r in run}
        if n_ready and not self._is_prefill:
            decode_ms = self._timing.decode_ms(n_ready, active_tokens)
        else:
            decode_ms = 0.0
        if emitted_ids or finished_ids:
            changed = True
        self._try_enter_lockstep()
        if not changed:
            return None
        end = now_ms + prefill_ms + decode_ms
        return self._begin(
            now_ms, end, admissions, rejected,
            ids_array(emitted_ids),
            tuple(finished_ids),
            stats[3], n_ready,
        )

    def _begin(self, now_ms: float, end: float, admissions: list[Admission], rejected: list[int],
               emitted: I64, finished: tuple[int, ...], prefill_tokens: int, n_ready: int,
               delta: BatchDelta | None = None) -> PassPlan:
        lifecycle: tuple[LifecycleEvent, ...] = ()
        if self._lifecycle:
            lifecycle = tuple(self._lifecycle)
            self._lifecycle.clear()
        self._completion = PassCompletion(
            end_ms=end, emitted=emitted, finished=finished, rejected=tuple(rejected),
            lifecycle=lifecycle, delta=delta,
        )
        self._busy = True
        return PassPlan(
            start_ms=now_ms, end_ms=end, admissions=tuple(admissions),
            pass_start_kv_events=self._drain_kv(), prefill_tokens=prefill_tokens,
            decode_tokens=n_ready,
        )

    def _prefix_cost(self, r: VllmRequest) -> tuple[int, int]:
        """(cached_tokens, active_cached_tokens) of a waiting request, with vLLM's rule that a
        fully cached context still recomputes its last block (it needs logits)."""
        if not self._caching or not r.hashes:
            return 0, 0
        bs = self._bs
        hashes = self._known_hashes(r)
        n, active, _inactive = self.pool.match_prefix(hashes, len(hashes))
        cached = n * bs
        if r.seq - r.prompt < r.limit:
            cap = ((r.seq - 1) // bs) * bs
            if cached > cap:
                cached = cap
        return cached, min(active * bs, cached)

    def _known_hashes(self, r: VllmRequest) -> list[int]:
        """Cache ids of every full block of the known sequence: the prompt's chained hashes,
        then (a preempted request's) generated blocks, which it can hit again on re-admission
        as in the reference, where they are cached under their token hashes."""
        full = r.seq // self._bs
        first = len(r.hashes)
        if full <= first:
            return r.hashes
        return r.hashes + generated_block_ids(r.rid, first, full)

    def _schedule(
        self,
        r: VllmRequest,
        from_waiting: bool,
        cached_tokens: int,
        budget: int,
        run: list[VllmRequest],
        scheduled: dict[int, tuple[int, int, int]],
    ) -> tuple[_Outcome, int, int, int, tuple[int, int, int, int] | None]:
        """Schedule one request. Returns (outcome, tokens used, prompt tokens, prompt tokens
        before, undo of preempted already-scheduled work as (tokens, batch, isl, prefix))."""
        bs = self._bs
        if r.computed == 0:
            cached = cached_tokens if from_waiting else self._prefix_cost(r)[0]
        else:
            cached = 0
        before = r.computed + cached
        prompt_before = min(before, r.prompt)
        remaining = r.seq - before
        prompt_remaining = r.prompt - prompt_before
        if prompt_remaining > 0 and not self.args.enable_chunked_prefill and prompt_remaining > budget:
            return _Outcome.BLOCKED, 0, 0, 0, None
        desired = min(remaining, budget)
        if desired == 0 and remaining > 0:
            return _Outcome.BLOCKED, 0, 0, 0, None
        target = before + desired
        actual = target
        undo = [0, 0, 0, 0]
        preempted = False
        pool = self.pool
        decode_worker = self._decode_worker
        while True:
            need_total = ceil_div(target, bs)
            if need_total <= r.nblocks:
                break
            hits: list[int] = []
            have = r.nblocks
            if r.nblocks == 0 and cached > 0:
                hits = self._known_hashes(r)[: cached // bs]
                have = len(hits)
            if pool.claim(hits, need_total - have):
                if hits:
                    r.cached = hits
                r.nblocks = need_total
                break
            victim = self._preempt_lifo(run)
            if victim is None:
                actual = before
                break
            preempted = True
            undone = scheduled.pop(victim.rid, None)
            if undone is not None:
                undo[0] += undone[0]
                if undone[1] > 0 and not decode_worker:
                    undo[1] += 1
                    undo[2] += undone[2] + undone[1]
                    undo[3] += undone[2]
            if victim is r:
                return _Outcome.CURRENT_PREEMPTED, 0, 0, 0, (undo[0], undo[1], undo[2], undo[3])
        u = (undo[0], undo[1], undo[2], undo[3]) if preempted else None
        used = actual - before
        if used == 0 and actual < r.seq:
            return _Outcome.BLOCKED, 0, 0, 0, u
        r.computed = actual
        # Cache the full prompt blocks this step completed (visible to later requests now).
        if self._caching:
            lo = before // bs
            hi = min(actual // bs, len(r.hashes))
            if hi > lo:
                held = holds_before(r.cached, r.hashes, lo)
                r.cached.extend(pool.promote(r.hashes, lo, hi, held))
        prompt_tokens = min(actual, r.prompt) - prompt_before
        scheduled[r.rid] = (used, prompt_tokens, prompt_before)
        if from_waiting:
            self._waiting.remove(r)
            r.status = VllmStatus.RUNNING
            run.append(r)
        return _Outcome.SCHEDULED, used, prompt_tokens, prompt_before, u

    def _preempt_lifo(self, run: list[VllmRequest]) -> VllmRequest | None:
        if not run:
            return None
        victim = run.pop()
        self._free_kv(victim)
        victim.computed = 0
        victim.status = VllmStatus.PREEMPTED
        self._preempted_seq -= 1
        victim.qseq = self._preempted_seq
        self._waiting.appendleft(victim)
        self.preemptions += 1
        self._gen += 1
        return victim

    def _next_waiting(self, prefer_materialized: bool) -> VllmRequest | None:
        if not prefer_materialized:
            return self._waiting[0]
        bs = self._bs
        for r in self._waiting:
            if r.computed >= r.prompt and r.nblocks * bs >= r.prompt:
                return r
        return None

    def _complete(self, r: VllmRequest) -> None:
        """Generation finished: a registered source is held, anything else is freed."""
        if r.source:
            r.status = VllmStatus.HELD
            self._lifecycle.append(self._source_held(r.handoff, r.prompt))
        else:
            self._free_kv(r)
            del self._live[r.rid]
            if r.dest:
                self._active_dest.pop(r.handoff, None)
                r.dest = False
        # completion always frees a running slot
        self._gen += 1

    # --- internals: KV and bookkeeping ---------------------------------------------------------

    def _free_kv(self, r: VllmRequest) -> None:
        pool = self.pool
        if self._caching:
            # full blocks of generated tokens were cached when computed (under unreachable
            # ids); doing it at release is equivalent: they were referenced until now
            first = len(r.hashes)
            stop = r.computed // self._bs
            if stop > first:
                r.cached.extend(pool.promote(generated_block_ids(r.rid, first, stop)))
        if r.cached:
            pool.release(r.cached)
        pool.give_back(r.nblocks - len(r.cached))
        r.cached = []
        r.nblocks = 0

    def _drop(self, r: VllmRequest) -> None:
        """Remove a request wherever it is (between passes), freeing its KV."""
        if r.status is VllmStatus.RUNNING:
            if self._lock:
                self._materialize_at_rest()
            del self._run[r.rid]
            self._free_kv(r)
            self._gen += 1
        else:
            try:
                self._waiting.remove(r)
            except ValueError:
                pass
            if r.nblocks:
                self._free_kv(r)
                self._gen += 1
        if r.source:
            self._sources.pop(r.handoff, None)
            r.source = False
        if r.dest:
            self._active_dest.pop(r.handoff, None)
            r.dest = False
        self._live.pop(r.rid, None)



    # --- introspection for tests ---------------------------------------------------------------

    def snapshot(self) -> dict[int, tuple[str, int, int, int]]:
        """Explicit per-request (status, computed, seq, blocks) between passes (tests)."""
        if self._busy:
            raise RuntimeError("snapshot while mid-pass")
        out: dict[int, tuple[str, int, int, int]] = {}
        K, bs = self._K, self._bs
        for rid, r in self._live.items():
            if r.status is VllmStatus.RUNNING and self._lock:
                seq = r.prompt + K + r.off
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
        for rid, r in self._live.items():
            nblocks = snap[rid][3]
            assert nblocks >= len(r.cached), (rid, nblocks, r.cached)
            private += nblocks - len(r.cached)
            for h in r.cached:
                ref_count[h] = ref_count.get(h, 0) + 1
        assert private == self.pool.private_blocks, (private, self.pool.private_blocks)
        for h, c in self.pool.ref_counts().items():
            assert ref_count.get(h, 0) == c, (h, c, ref_count.get(h, 0))
        assert len(self._run) <= self.args.max_num_seqs
        if self._lock and self._rid_q is not None:  # the tracked ids are the batch
            assert self._rid_q.tolist() == list(self._run), (self._rid_q, list(self._run))
            assert self._rid_q.to_numpy().tolist() == list(self._run), (self._rid_q, list(self._run))


ENGINE = EngineSpec("vllm", VllmWorker)
