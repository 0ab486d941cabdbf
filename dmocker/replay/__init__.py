"""Deterministic disaggregated replay driven by the handoff coordinator.

``dmocker.replay.run(...)`` replays a Mooncake trace or a seeded synthetic workload on mock
vLLM / SGLang prefill and decode pools and returns a :class:`Report`.
"""

# First: decides whether the compiled (mypyc) hot path or its sources load (see _accel.py).
from .._accel import accelerated
from .api import DEFAULT_SYNTHETIC, run
from .collector import TerminalStatus
from .events import DeadEndError, ReplayInvariantError
from .report import Report, SlaThresholds
from .routing import BaseRouter, QueuePolicy, Router, RouterConfig, RouterContext, RouterError
from .workload import MooncakeTrace, SyntheticSpec, SyntheticWorkload, WorkloadError

__all__ = [
    "DEFAULT_SYNTHETIC",
    "DeadEndError",
    "MooncakeTrace",
    "ReplayInvariantError",
    "BaseRouter",
    "QueuePolicy",
    "Router",
    "RouterConfig",
    "RouterContext",
    "RouterError",
    "Report",
    "SlaThresholds",
    "SyntheticSpec",
    "SyntheticWorkload",
    "TerminalStatus",
    "WorkloadError",
    "accelerated",
    "run",
]
