"""``--planner throughput``: the reference planner's throughput-based scaling.

Every ``throughput_interval_s`` (default 180 s) it sizes both pools from the traffic of the
window that just ended (``ai-dynamo/dynamo``
``components/src/dynamo/planner/core/throughput_scaling.py``):

* prefill = ``ceil(rate / prefill_rps)``, with ``prefill_rps`` one worker's capacity at the
  observed ISL minus the KV hit rate (:func:`prefill_capacity`), and at least
  ``ceil(current x observed_ttft / ttft_target)`` (the window's mean TTFT): raised when TTFT
  missed the target, and never dropped below the count that keeps it proportionally within
  target (the model alone sees no queueing, so bursty traffic would make it oscillate);
* decode = ``ceil(rate / decode_rps)`` at the observed context ``isl + osl / 2``
  (:func:`decode_capacity`);
* each bounded to +-``max_replica_delta`` of the current count, floored at ``min_endpoint``,
  then fitted under the GPU budget (proportional shrink).

The rate is the window's completed requests per second: the reference feeds its load
predictor (ARIMA by default) with these observations; dmocker uses the last observation
as is (a constant predictor).  A window without completed requests sizes nothing: the
capacity model has no shape, so the counts hold (only the ``min_endpoint`` floor applies),
as the reference holds when its model is not ready.
"""

from __future__ import annotations

import math

from dmocker.engines.interface import EngineArgs

from ..protocol import PlannerMetrics, ScalingDecision
from .capacity import EngineCapacity, decode_capacity, prefill_capacity
from .settings import PlannerSettings

__all__ = ["ThroughputPlanner"]


class ThroughputPlanner:
    """Throughput scaling on the engines' own timing model (see the module docstring)."""

    def __init__(self, settings: PlannerSettings, prefill_args: EngineArgs, decode_args: EngineArgs) -> None:
        self.settings = settings.validate()
        self._prefill_args = prefill_args
        self._decode_args = decode_args
        self.last_capacity: tuple[EngineCapacity | None, EngineCapacity | None] = (None, None)

    def initial_tick_ms(self) -> float:
        return self.settings.throughput_interval_s * 1000.0

    def on_tick(self, metrics: PlannerMetrics) -> ScalingDecision:
        s = self.settings
        nxt = metrics.now_ms + s.throughput_interval_s * 1000.0
        cur_p, cur_d = metrics.prefill.target, metrics.decode.target
        t = metrics.traffic
        cap_p = prefill_capacity(self._prefill_args, t.avg_isl, t.avg_kv_hit_rate, s.sla_ttft_ms)
        cap_d = decode_capacity(self._decode_args, t.avg_isl, t.avg_osl, s.sla_itl_ms)
        self.last_capacity = (cap_p, cap_d)
        if cap_p is None or cap_d is None or t.duration_s <= 0:
            num_p, num_d = cur_p, cur_d  # model not ready: hold
        else:
            rate = t.request_rate
            num_p = math.ceil(rate / cap_p.rps)
            if t.ttft_samples and cur_p > 0:
                # TTFT feedback: scale the current count by observed / target TTFT (round up).
                # Over target this raises prefill; under it, it bounds how far prefill may
                # drop, so a pool that just met the target is not halved at once.
                num_p = max(num_p, math.ceil(cur_p * t.avg_ttft_ms / s.sla_ttft_ms - 1e-9))
            num_d = math.ceil(rate / cap_d.rps)
            num_p = min(max(num_p, cur_p - s.max_replica_delta), cur_p + s.max_replica_delta)
            num_d = min(max(num_d, cur_d - s.max_replica_delta), cur_d + s.max_replica_delta)
        num_p = max(num_p, s.min_endpoint)
        num_d = max(num_d, s.min_endpoint)
        num_p, num_d = s.clamp_to_budget(num_p, num_d)
        return ScalingDecision(prefill_workers=num_p, decode_workers=num_d, next_tick_ms=nxt)
