"""Deterministic disaggregated replay driven by the handoff coordinator.

``dmocker.replay.run(...)`` replays a Mooncake trace or a seeded synthetic workload on mock
vLLM / SGLang prefill and decode pools and returns a :class:`Report`.
"""

from .api import DEFAULT_SYNTHETIC, run
from .collector import TerminalStatus
from .events import DeadEndError, ReplayInvariantError
from .planner import PlannerError, PlannerMetrics, ScalingDecision
from .report import Report, SlaThresholds
from .routing import BaseRouter, QueuePolicy, Router, RouterConfig, RouterContext, RouterError
from .workload import MooncakeTrace, SyntheticSpec, SyntheticWorkload, WorkloadError

__all__ = [
    "DEFAULT_SYNTHETIC",
    "DeadEndError",
    "MooncakeTrace",
    "PlannerError",
    "PlannerMetrics",
    "ReplayInvariantError",
    "BaseRouter",
    "QueuePolicy",
    "Router",
    "RouterConfig",
    "RouterContext",
    "RouterError",
    "Report",
    "ScalingDecision",
    "SlaThresholds",
    "SyntheticSpec",
    "SyntheticWorkload",
    "TerminalStatus",
    "WorkloadError",
    "run",
]
