"""The mock vLLM worker's scheduler, request by request: one pass as the reference computes it.

1. **Running requests first**, in order, under the ``max_num_batched_tokens`` budget: each asks
   for the tokens it still has to compute (a prompt chunk, or the one sampled token of a decode
   step).  A block allocation that fails preempts the *last* running request (LIFO): its KV is
   freed, its progress reset to 0 and it goes to the front of the waiting queue.
2. **Waiting requests**, FIFO, while fewer than ``max_num_seqs`` run and nothing was preempted:
   rejected if the prompt is ``>= max_model_len`` or its known sequence needs more blocks than
   the pool has; admitted only if the whole known sequence fits the non-active blocks (minus
   shared active prefix blocks); then scheduled like a running request.  While a destination
   reservation is pending, only *materialized* requests (activated handoffs, prompt already
   present) are admitted -- they cost no prefill and report ``reused_input_tokens = 0``.
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
"""

from __future__ import annotations

import enum

import numpy as np
import numpy.typing as npt

from dmocker.engines.block_pool import BlockPool, generated_block_ids, holds_before
from dmocker.engines.common import ceil_div
from dmocker.engines.handoff_book import HandoffBook
from dmocker.engines.interface import (
    Admission,
    BatchDelta,
    DecodeKvAccounting,
    EngineArgs,
    PassCompletion,
    PassPlan,
    WorkerType,
    ids_array,
)
from dmocker.engines.outbox import Outbox
from dmocker.engines.timing import PassTiming
from dmocker.engines.vllm_queues import VllmQueues
from dmocker.engines.vllm_request import VllmRequest, VllmStatus

__all__ = ["ExactScheduler", "begin_pass"]

I64 = npt.NDArray[np.int64]


class _Outcome(enum.Enum):
    SCHEDULED = 1
    BLOCKED = 2
    CURRENT_PREEMPTED = 3


def begin_pass(outbox: Outbox, now_ms: float, end: float, admissions: list[Admission], rejected: list[int],
               emitted: I64, finished: tuple[int, ...], prefill_tokens: int, n_ready: int,
               delta: BatchDelta | None = None) -> PassPlan:
    """Start a computed pass: its completion waits in ``outbox`` until ``end``, with the
    SourceHeld facts raised since the last pass; its cache changes are visible now (vLLM)."""
    completion = PassCompletion(
        end_ms=end, emitted=emitted, finished=finished, rejected=tuple(rejected),
        lifecycle=outbox.take_held(), delta=delta,
    )
    outbox.start(completion)
    return PassPlan(
        start_ms=now_ms, end_ms=end, admissions=tuple(admissions),
        pass_start_kv_events=outbox.drain_kv(), prefill_tokens=prefill_tokens,
        decode_tokens=n_ready,
    )


class ExactScheduler:
    """The reference's scheduler over explicit per-request state (module docstring)."""

    def __init__(self, args: EngineArgs, block_size: int, queues: VllmQueues, book: HandoffBook[VllmRequest],
                 pool: BlockPool, outbox: Outbox, timing: PassTiming) -> None:
        self._queues = queues
        self._book = book
        self._pool = pool
        self._outbox = outbox
        self._timing = timing
        self._bs = block_size  # args.page_tokens, resolved once by the worker
        self._caching = args.enable_prefix_caching
        self._chunked = args.enable_chunked_prefill
        self._mml = args.max_model_len
        self._max_seqs = args.max_num_seqs
        self._mbt = args.max_num_batched_tokens
        self._decode_worker = args.worker_type is WorkerType.DECODE
        self._is_prefill = args.worker_type is WorkerType.PREFILL
        self._aggregated = args.worker_type is WorkerType.AGGREGATED
        self._logical_kv = args.decode_kv_accounting is DecodeKvAccounting.LOGICAL
        self.passes = 0  # passes computed here (telemetry, tests)

    def run(  # noqa: C901 - one scheduler, kept in one place on purpose
        self,
        now_ms: float,
        k: int,
        resume: tuple[int, list[Admission], list[int]] | None = None,
    ) -> PassPlan | None:
        """Pass ``k`` by the reference scheduler, request by request (explicit state);
        ``resume``: the lockstep pass handed over after its running phase (budget left,
        admissions and rejections so far).  None: nothing changed."""
        self.passes += 1
        bs = self._bs
        decode_worker = self._decode_worker
        queues = self._queues
        pool = self._pool
        run = list(queues.run.values())
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
        while not preempted_any and queues.waiting and len(run) < self._max_seqs:
            pending_head = bool(self._book.pending)
            nxt = queues.next_waiting(pending_head)
            if nxt is None:
                break
            r = nxt
            if self._mml is not None and r.prompt >= self._mml:
                queues.drop(r)
                rejected.append(r.rid)
                changed = True
                continue
            if queues.materialized(r):
                queues.admit(r)
                run.append(r)
                admissions.append(Admission(r.rid, 0))
                changed = True
                if budget_box[0] == 0:
                    break
                continue
            if pending_head:
                break
            if r.status is VllmStatus.WAITING and ceil_div(r.seq, bs) > pool.total:
                queues.drop(r)
                rejected.append(r.rid)
                changed = True
                continue
            cached_tokens, active_tokens = self._prefix_cost(r)
            needed = ceil_div(r.seq, bs) - active_tokens // bs
            if needed > pool.total - pool.num_active_blocks:
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
        # An aggregated worker charges decode time for the requests that were decoding: one whose
        # prompt finished in this pass gets its first token with the prefill's time.
        decoding = [r for r in ready if scheduled[r.rid][1] == 0] if self._aggregated else ready
        n_ready = len(ready)
        n_decoding = len(decoding)
        if self._logical_kv:
            active_tokens = sum(r.seq for r in decoding)
        else:
            active_tokens = pool.num_active_blocks * bs
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
                queues.complete(r)
            run = [r for r in run if r.rid not in gone]
        queues.run = {r.rid: r for r in run}
        if n_decoding and not self._is_prefill:
            decode_ms = self._timing.decode_ms(n_decoding, active_tokens)
        else:
            decode_ms = 0.0
        if emitted_ids or finished_ids:
            changed = True
        if not changed:
            return None
        end = now_ms + prefill_ms + decode_ms
        return begin_pass(
            self._outbox, now_ms, end, admissions, rejected,
            ids_array(emitted_ids),
            tuple(finished_ids),
            stats[3], n_ready,
        )

    def _prefix_cost(self, r: VllmRequest) -> tuple[int, int]:
        """(cached_tokens, active_cached_tokens) of a waiting request, with vLLM's rule that a
        fully cached context still recomputes its last block (it needs logits)."""
        if not self._caching or not r.hashes:
            return 0, 0
        bs = self._bs
        hashes = self._known_hashes(r)
        n, active, _inactive = self._pool.match_prefix(hashes, len(hashes))
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
        if prompt_remaining > 0 and not self._chunked and prompt_remaining > budget:
            return _Outcome.BLOCKED, 0, 0, 0, None
        desired = min(remaining, budget)
        if desired == 0 and remaining > 0:
            return _Outcome.BLOCKED, 0, 0, 0, None
        target = before + desired
        actual = target
        undo = [0, 0, 0, 0]
        preempted = False
        pool = self._pool
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
            victim = self._queues.preempt_lifo(run)
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
            self._queues.admit(r)
            run.append(r)
        return _Outcome.SCHEDULED, used, prompt_tokens, prompt_before, u
