"""Deterministic disaggregated replay driven by the handoff coordinator.

``dmocker.replay.run(...)`` replays a Mooncake trace or a seeded synthetic workload on mock
vLLM / SGLang prefill and decode pools and returns a :class:`Report`.
"""

from typing import TYPE_CHECKING

from .api import DEFAULT_SYNTHETIC, run
from .collector import TerminalStatus
from .events import DeadEndError, ReplayInvariantError
from .report import Report, SlaThresholds
from .routing import BaseRouter, QueuePolicy, Router, RouterConfig, RouterContext, RouterError
from .workload import MooncakeTrace, SyntheticSpec, SyntheticWorkload, WorkloadError

if TYPE_CHECKING:
    from .planner import PlannerError, PlannerMetrics, ScalingDecision

_PLANNER_NAMES = ("PlannerError", "PlannerMetrics", "ScalingDecision")


def __getattr__(name: str) -> object:
    """The planner's public names, imported on first use: a replay without a planner never
    loads the planner's modules (a tenth of the package's import time)."""
    if name in _PLANNER_NAMES:
        from . import planner

        return getattr(planner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

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
