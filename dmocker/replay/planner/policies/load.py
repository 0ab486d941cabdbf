"""``--planner load``: the reference planner's load-based scaling, one step per tick.

Every ``load_interval_s`` (default 5 s) it looks at each active worker's latest snapshot
(``ai-dynamo/dynamo`` ``components/src/dynamo/planner/core/load_scaling.py``, the static
thresholds of its default ``throughput`` target, or ``latency``):

* prefill: ``queued / context_length`` per worker, with ``queued`` the prompt tokens routed to
  it and not yet admitted; up one worker if any is >= the up threshold (1.0; latency 0.1), down
  one if all are below the down threshold (0.1; latency: all queues empty);
* decode: KV utilisation ``(blocks in use x block + prompt tokens awaiting a reservation) /
  KV tokens`` per worker; up if any is above 1.0 (latency 0.4), down if all are below 0.6
  (latency 0.1).

A scale-down is skipped when the remaining workers would cross the up threshold at once
(the reference's consolidation guard), never goes below ``min_endpoint``, and a scale-up
waits while a worker of that pool is still starting.  The context length is
``max_model_len``; when it is unset (dmocker's default) the reference skips prefill load
scaling, dmocker uses ``max_num_batched_tokens`` (one pass's prompt budget) instead.
"""

from __future__ import annotations

from collections.abc import Callable

from dmocker.engines.interface import EngineArgs

from ..protocol import PlannerMetrics, PoolMetrics, ScalingDecision, WorkerSnapshot, WorkerState
from .settings import PlannerSettings

__all__ = ["LoadPlanner"]

_THRESHOLDS = {  # target -> (prefill up, prefill down, decode up, decode down)
    "throughput": (1.0, 0.1, 1.0, 0.6),
    "latency": (0.1, 0.0, 0.4, 0.1),
}


class LoadPlanner:
    """Load thresholds on queued prefill tokens and decode KV utilisation."""

    def __init__(self, settings: PlannerSettings, prefill_args: EngineArgs, decode_args: EngineArgs) -> None:
        self.settings = settings.validate()
        self._context = prefill_args.max_model_len or prefill_args.max_num_batched_tokens
        self._kv_tokens = decode_args.total_kv_tokens
        self._block = decode_args.page_tokens

    def initial_tick_ms(self) -> float:
        return self.settings.load_interval_s * 1000.0

    def on_tick(self, metrics: PlannerMetrics) -> ScalingDecision:
        s = self.settings
        p_up, p_down, d_up, d_down = _THRESHOLDS[s.load_target]
        latency = s.load_target == "latency"
        pv = [w.queued_tokens / self._context for w in _active(metrics.prefill)]
        dv = [
            (w.kv_used_blocks * self._block + w.queued_tokens) / self._kv_tokens
            for w in _active(metrics.decode)
        ]
        num_p = self._step(metrics.prefill, pv, p_up, p_down, up_inclusive=True,
                           down=lambda v: v <= p_down if latency else v < p_down)
        num_d = self._step(metrics.decode, dv, d_up, d_down, up_inclusive=False, down=lambda v: v < d_down)
        if num_p is not None or num_d is not None:
            p = num_p if num_p is not None else metrics.prefill.target
            d = num_d if num_d is not None else metrics.decode.target
            cp, cd = s.clamp_to_budget(p, d)
            num_p = cp if num_p is not None or cp != p else None
            num_d = cd if num_d is not None or cd != d else None
        return ScalingDecision(num_p, num_d, metrics.now_ms + s.load_interval_s * 1000.0)

    def _step(self, pool: PoolMetrics, values: list[float], up: float, down_thr: float, *,
              up_inclusive: bool, down: Callable[[float], bool]) -> int | None:
        n = pool.active
        if n == 0 or not values:
            return None
        over = any(v >= up if up_inclusive else v > up for v in values)
        if over:
            return None if pool.starting else n + 1
        if (n > 1 or pool.starting) and all(down(v) for v in values):
            desired = max(n - 1, self.settings.min_endpoint)
            if 0 < desired < n and max(values) * n / desired >= up:
                return None  # consolidation would trip the scale-up threshold at once
            return desired if desired != pool.target else None
        return None


def _active(pool: PoolMetrics) -> list[WorkerSnapshot]:
    return [w for w in pool.workers if w.state is WorkerState.ACTIVE]
