"""Settings of the built-in policies, with the reference planner's defaults.

Defaults are those of ``ai-dynamo/dynamo`` ``components/src/dynamo/planner/config/defaults.py``
(Dynamo 1.6.1): TTFT target 500 ms, ITL target 50 ms, throughput adjustment interval 180 s,
load adjustment interval 5 s, ``min_endpoint`` 1, GPU budget 8, at most 8 replicas added or
removed per throughput observation, one GPU per worker.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["PlannerSettings"]


@dataclass(frozen=True, slots=True)
class PlannerSettings:
    """What the ``throughput`` and ``load`` policies read (validated by :meth:`validate`).

    ``load_target``: ``"throughput"`` (the reference default: prefill scales up at queued
    prompt tokens >= 1.0 x context length, down below 0.1 x; decode KV utilisation up above
    1.0, down below 0.6) or ``"latency"`` (prefill up at >= 0.1 x, down at an empty queue;
    decode up above 0.4, down below 0.1).  ``max_gpu_budget`` < 0 disables the cap.
    """

    sla_ttft_ms: float = 500.0
    sla_itl_ms: float = 50.0
    throughput_interval_s: float = 180.0
    load_interval_s: float = 5.0
    min_endpoint: int = 1
    max_gpu_budget: int = 8
    max_replica_delta: int = 8
    prefill_gpus_per_worker: int = 1
    decode_gpus_per_worker: int = 1
    load_target: str = "throughput"

    def validate(self) -> PlannerSettings:
        for name in ("sla_ttft_ms", "sla_itl_ms", "throughput_interval_s", "load_interval_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"{name} must be a finite number > 0, got {v!r}")
        for name, lo in (("min_endpoint", 0), ("max_replica_delta", 1), ("prefill_gpus_per_worker", 1),
                         ("decode_gpus_per_worker", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
        if isinstance(self.max_gpu_budget, bool) or not isinstance(self.max_gpu_budget, int):
            raise ValueError(f"max_gpu_budget must be an integer (< 0: no cap), got {self.max_gpu_budget!r}")
        floor = self.min_endpoint * (self.prefill_gpus_per_worker + self.decode_gpus_per_worker)
        if self.max_gpu_budget >= 0 and self.max_gpu_budget < floor:
            raise ValueError(
                f"max_gpu_budget {self.max_gpu_budget} is below the min_endpoint footprint ({floor} GPUs)"
            )
        if self.load_target not in ("throughput", "latency"):
            raise ValueError(f"load_target must be 'throughput' or 'latency', got {self.load_target!r}")
        return self

    def clamp_to_budget(self, num_p: int, num_d: int) -> tuple[int, int]:
        """The reference's ceiling clamp (``core/budget.py`` ``proportional_clamp_pair``).

        Over the budget, both pools shrink proportionally, each kept at ``min_endpoint``.
        """
        gp, gd = self.prefill_gpus_per_worker, self.decode_gpus_per_worker
        cap = self.max_gpu_budget
        total = num_p * gp + num_d * gd
        if cap < 0 or total <= cap:
            return num_p, num_d
        m = self.min_endpoint
        scale = cap / total
        max_p = math.floor((cap - m * gd) / gp)
        new_p = max(m, min(max_p, math.floor(num_p * scale)))
        new_d = max(m, math.floor((cap - new_p * gp) / gd))
        return new_p, new_d
