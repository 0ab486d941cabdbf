"""One worker's sustainable request rate, derived from dmocker's own pass-timing model.

The reference planner reads a profiled engine model (``ai-dynamo/dynamo``
``components/src/dynamo/planner/core/perf_model/engine_query.py``,
``find_engine_capacity_rps``): for a request shape it tries batch sizes and keeps the best
rate, preferring batches whose latency meets the target.  dmocker has no profile; it asks the
same question of the timing model its mock engines run (:class:`dmocker.engines.timing.PassTiming`,
the reference mocker's polynomial or the fixed model, with the speed-up ratios):

* **prefill** at effective prompt ``p = ceil(isl x (1 - min(kv_hit, 0.95)))``: a batch of ``b``
  prompts (``b`` up to ``min(max_num_seqs, max_num_batched_tokens // p)``, 1 if the prompt is
  longer than a pass budget) takes the passes that compute ``b x p`` tokens, chunked by
  ``max_num_batched_tokens``; TTFT = that time, rate = ``b / TTFT``; eligible if TTFT <= target.
* **decode** at context ``c = isl + osl // 2``: a batch of ``b`` requests
  (``b <= min(max_num_seqs, kv_tokens // c)``) holds ``b x c`` KV tokens; ITL = one decode pass
  at that KV load; rate = ``b / (osl x ITL)``; eligible if ITL <= target.

Batch sizes are all of 1..max when max <= 128, else 128 evenly spread (as the reference).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dmocker.engines.interface import EngineArgs
from dmocker.engines.timing import PassTiming

__all__ = ["EngineCapacity", "prefill_capacity", "decode_capacity"]

_MAX_CANDIDATES = 128
_MAX_KV_HIT = 0.95


@dataclass(frozen=True, slots=True)
class EngineCapacity:
    """Best sustainable rate of one worker for a request shape, and its latency there."""

    rps: float
    latency_ms: float  # TTFT for prefill, ITL for decode
    batch: int
    eligible: bool  # the latency meets the target


def _batch_sizes(max_batch: int) -> list[int]:
    if max_batch <= 0:
        return []
    if max_batch <= _MAX_CANDIDATES:
        return list(range(1, max_batch + 1))
    span = max_batch - 1
    return [1 + i * span // (_MAX_CANDIDATES - 1) for i in range(_MAX_CANDIDATES)]


def _better(best: EngineCapacity | None, cand: EngineCapacity) -> EngineCapacity:
    if best is None or (cand.eligible and not best.eligible):
        return cand
    if best.eligible and not cand.eligible:
        return best
    return cand if cand.rps > best.rps else best


def prefill_capacity(args: EngineArgs, isl: float, kv_hit_rate: float, ttft_target_ms: float) -> EngineCapacity | None:
    """None when the shape is empty (no observed prompts) or the model gives no time."""
    if not (isl > 0) or not math.isfinite(isl):
        return None
    hit = min(_MAX_KV_HIT, max(0.0, kv_hit_rate if math.isfinite(kv_hit_rate) else 0.0))
    p = max(1, math.ceil(isl * (1.0 - hit)))
    budget = args.max_num_batched_tokens
    max_batch = 1 if p > budget else min(args.max_num_seqs, budget // p)
    timing = PassTiming(args)
    best: EngineCapacity | None = None
    for b in _batch_sizes(max_batch):
        tokens = b * p
        ms = 0.0
        while tokens > 0:  # chunked by the pass budget, one chunk per pass
            chunk = min(tokens, budget)
            ms += timing.prefill_ms(1, chunk, 0)
            tokens -= chunk
        if ms <= 0.0:
            continue
        best = _better(best, EngineCapacity(b / (ms / 1000.0), ms, b, ms <= ttft_target_ms))
    return best


def decode_capacity(args: EngineArgs, isl: float, osl: float, itl_target_ms: float) -> EngineCapacity | None:
    """None when the shape is empty or not even one request's context fits the KV pool."""
    if not (isl > 0) or not (osl > 0) or not math.isfinite(isl) or not math.isfinite(osl):
        return None
    o = max(1, math.ceil(osl))
    c = max(1, math.ceil(isl) + o // 2)
    kv_tokens = args.total_kv_tokens
    max_batch = min(args.max_num_seqs, kv_tokens // c)
    timing = PassTiming(args)
    best: EngineCapacity | None = None
    for b in _batch_sizes(max_batch):
        itl = timing.decode_ms(b, b * c)
        if itl <= 0.0:
            continue
        best = _better(best, EngineCapacity(b / (o * itl / 1000.0), itl, b, itl <= itl_target_ms))
    return best
