"""The built-in policies on hand-made metrics (capacity from the fixed timing model)."""

from __future__ import annotations

import math

import pytest

from dmocker.engines.interface import EngineArgs, WorkerType
from dmocker.replay.planner import PlannerMetrics, PoolMetrics, TrafficStats, WorkerSnapshot, WorkerState
from dmocker.replay.planner.policies import (
    LoadPlanner,
    PlannerSettings,
    ThroughputPlanner,
    decode_capacity,
    prefill_capacity,
)

P = EngineArgs(worker_type=WorkerType.PREFILL, fixed_prefill_ms=100.0, fixed_decode_ms=10.0)
D = EngineArgs(worker_type=WorkerType.DECODE, fixed_prefill_ms=100.0, fixed_decode_ms=10.0)
POLY_P = EngineArgs(worker_type=WorkerType.PREFILL)
POLY_D = EngineArgs(worker_type=WorkerType.DECODE)


def _worker(i: int, *, queued: int = 0, kv_used: int = 0, state: WorkerState = WorkerState.ACTIVE) -> WorkerSnapshot:
    return WorkerSnapshot(i, state, 0, 0, kv_used, 16384, kv_used / 16384, queued, None, None, 0, 0)


def _pool(workers: list[WorkerSnapshot], starting: int = 0) -> PoolMetrics:
    active = sum(w.state is WorkerState.ACTIVE for w in workers)
    return PoolMetrics(active, starting, len(workers) - active, tuple(workers), 0)


def _traffic(*, n: int = 0, dur: float = 180.0, isl: float = 1000.0, osl: float = 100.0, ttft: float = 0.0,
             hit: float = 0.0) -> TrafficStats:
    return TrafficStats(dur, n, isl if n else 0.0, osl if n else 0.0, ttft, 0.0, hit, n if ttft else 0, 0, n)


def _metrics(p: PoolMetrics, d: PoolMetrics, t: TrafficStats, now: float = 180_000.0) -> PlannerMetrics:
    return PlannerMetrics(now, 0, p, d, t)


def test_prefill_capacity_on_the_fixed_model_is_batch_over_pass_time() -> None:
    # 1000-token prompts: 8 fit a 8192-token pass, each pass 100 ms -> 80 req/s.
    cap = prefill_capacity(P, 1000.0, 0.0, 500.0)
    assert cap is not None and (cap.batch, cap.rps, cap.latency_ms, cap.eligible) == (8, 80.0, 100.0, True)
    # A 20000-token prompt takes three chunked passes.
    cap = prefill_capacity(P, 20000.0, 0.0, 500.0)
    assert cap is not None and (cap.batch, cap.latency_ms) == (1, 300.0)
    assert prefill_capacity(P, 0.0, 0.0, 500.0) is None


def test_prefill_capacity_grows_with_kv_hits_and_prefers_batches_meeting_the_target() -> None:
    cold = prefill_capacity(POLY_P, 4000.0, 0.0, 500.0)
    warm = prefill_capacity(POLY_P, 4000.0, 0.5, 500.0)
    assert cold is not None and warm is not None and warm.rps > cold.rps
    tight = prefill_capacity(POLY_P, 4000.0, 0.0, 1.0)  # nothing meets 1 ms: best rate overall
    assert tight is not None and not tight.eligible
    strict = prefill_capacity(POLY_P, 1000.0, 0.0, 40.0)
    assert strict is not None and strict.eligible and strict.latency_ms <= 40.0


def test_decode_capacity_is_batch_over_osl_times_itl() -> None:
    # Context 1000 + 100 // 2 = 1050 tokens a request; the batch is bounded by seqs and KV.
    cap = decode_capacity(D, 1000.0, 100.0, 50.0)
    kv = D.total_kv_tokens
    batch = min(D.max_num_seqs, kv // 1050)
    assert cap is not None and cap.batch == batch and cap.rps == pytest.approx(batch / (100 * 0.010))
    assert decode_capacity(D, 1000.0, 0.0, 50.0) is None


def test_throughput_sizes_both_pools_from_rate_and_capacity() -> None:
    tp = ThroughputPlanner(PlannerSettings(), P, D)
    assert tp.initial_tick_ms() == 180_000.0
    # 200 req/s over 180 s; prefill 80 req/s per worker -> 3; decode cap from the model.
    t = _traffic(n=36000, isl=1000.0, osl=100.0)
    dcap = decode_capacity(D, 1000.0, 100.0, 50.0)
    assert dcap is not None
    dec = tp.on_tick(_metrics(_pool([_worker(0)]), _pool([_worker(0)]), t))
    assert dec.prefill_workers == 3
    assert dec.decode_workers == max(1, math.ceil(200.0 / dcap.rps))
    assert dec.next_tick_ms == 360_000.0


def test_throughput_raises_prefill_when_ttft_missed_floors_caps_and_fits_the_budget() -> None:
    one = _pool([_worker(0)])
    two = _pool([_worker(0), _worker(1)])
    tp = ThroughputPlanner(PlannerSettings(), P, D)
    # Low rate (1 worker suffices) but TTFT 1500 ms vs 500: prefill 2 x 3 = 6.
    dec = tp.on_tick(_metrics(two, one, _traffic(n=18, ttft=1500.0)))
    assert dec.prefill_workers == 6 and dec.decode_workers == 1
    # Delta cap: at most +8 per observation.
    dec = ThroughputPlanner(PlannerSettings(max_gpu_budget=-1), P, D).on_tick(
        _metrics(one, one, _traffic(n=180 * 2000))
    )
    assert dec.prefill_workers == 9
    # Budget 8: proportional shrink, each pool >= min_endpoint.
    dec = tp.on_tick(_metrics(one, one, _traffic(n=180 * 2000)))
    assert dec.prefill_workers is not None and dec.decode_workers is not None
    assert dec.prefill_workers + dec.decode_workers <= 8 and dec.decode_workers >= 1
    # An empty window holds the counts (min_endpoint still applies).
    dec = tp.on_tick(_metrics(_pool([]), two, _traffic(n=0)))
    assert (dec.prefill_workers, dec.decode_workers) == (1, 2)


def test_load_steps_one_worker_per_tick() -> None:
    lp = LoadPlanner(PlannerSettings(), P, D)
    ctx = P.max_num_batched_tokens  # no max_model_len: the pass budget is the context length
    idle = _traffic()
    up = lp.on_tick(_metrics(_pool([_worker(0, queued=ctx), _worker(1)]), _pool([_worker(0)]), idle))
    assert (up.prefill_workers, up.decode_workers) == (3, None)
    assert up.next_tick_ms == 180_000.0 + 5000.0
    down = lp.on_tick(_metrics(_pool([_worker(0), _worker(1), _worker(2)]), _pool([_worker(0)]), idle))
    assert (down.prefill_workers, down.decode_workers) == (2, None)
    # A worker at or above the down threshold (0.6 x ctx >= 0.1 x ctx) keeps the count.
    hold = lp.on_tick(_metrics(_pool([_worker(0, queued=ctx * 6 // 10), _worker(1)]), _pool([_worker(0)]), idle))
    assert hold.prefill_workers is None
    # No scale-up while a worker of the pool is still starting.
    wait = lp.on_tick(_metrics(_pool([_worker(0, queued=ctx)], starting=1), _pool([_worker(0)]), idle))
    assert wait.prefill_workers is None
    # Decode: KV over capacity (blocks in use plus pending reservations) scales up.
    full = D.num_gpu_blocks
    dec = lp.on_tick(_metrics(_pool([_worker(0)]), _pool([_worker(0, kv_used=full, queued=64)]), idle))
    assert dec.decode_workers == 2
    calm = lp.on_tick(_metrics(_pool([_worker(0)]), _pool([_worker(0, kv_used=10), _worker(1)]), idle))
    assert calm.decode_workers == 1


def test_settings_validate_and_clamp() -> None:
    s = PlannerSettings(max_gpu_budget=8)
    assert s.clamp_to_budget(3, 3) == (3, 3)
    assert s.clamp_to_budget(12, 4) == (6, 2)
    with pytest.raises(ValueError, match="load_target"):
        PlannerSettings(load_target="x").validate()
