"""Planner in the loop: a Python hook that scales the prefill and decode pools during a replay.

Implement :class:`Planner` (``initial_tick_ms`` and ``on_tick``) and pass it as
``ReplayConfig(planner=PlannerConfig(policy=obj))`` or ``dmocker replay --planner MODULE:CLASS``; or use
a built-in policy (``throughput``, ``load``; :func:`builtin_planner`).
"""

from .loop import PlannerLoop, check_initial_tick
from .pools import PoolLifecycle, ScaleDelta, WorkerRecord
from .protocol import (
    Planner,
    PlannerError,
    PlannerMetrics,
    PoolMetrics,
    ScalingDecision,
    TrafficStats,
    WorkerSnapshot,
    WorkerState,
)
from .resolve import BUILTIN_PLANNERS, PlannerSettings, builtin_planner, load_planner

__all__ = [
    "BUILTIN_PLANNERS",
    "Planner",
    "PlannerError",
    "PlannerLoop",
    "PlannerMetrics",
    "PlannerSettings",
    "PoolLifecycle",
    "PoolMetrics",
    "ScaleDelta",
    "ScalingDecision",
    "TrafficStats",
    "WorkerRecord",
    "WorkerSnapshot",
    "WorkerState",
    "builtin_planner",
    "check_initial_tick",
    "load_planner",
]
