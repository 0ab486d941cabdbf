"""Deterministic disaggregated replay driven by the handoff coordinator.

``dmocker.replay.run(config)`` replays a Mooncake trace or a seeded synthetic workload on mock
vLLM / SGLang prefill and decode pools, as a :class:`ReplayConfig` describes (docs/config.md),
and returns a :class:`Report`.
"""

import gc as _gc

# The cyclic collector is kept off while the replay and numpy are imported: the import makes
# some hundred thousand objects (modules, classes, functions, the spec) that live as long as the
# process and form no garbage, so young passes over them find nothing.  Afterwards they join the
# oldest generation directly (freeze then unfreeze: a move without a pass; a full collection
# still examines them), or the first allocation after the import would run one young pass over
# all of them.  A caller's disabled collector stays disabled, and a caller's frozen objects frozen.
_collecting = _gc.isenabled()
_gc.disable()
try:
    from typing import TYPE_CHECKING

    from .api import DEFAULT_SYNTHETIC, run, run_pass_by_pass
    from .collector import TerminalStatus
    from .config import (
        ClusterConfig,
        ConfigError,
        LimitsConfig,
        ModelConfig,
        OutputsConfig,
        PlannerConfig,
        PoolConfig,
        ReplayConfig,
        RoutingConfig,
        SlaConfig,
        TraceFile,
        TransferConfig,
        WorkloadConfig,
    )
    from .config_file import load_config
    from .faults import FaultPlan
    from .errors import DeadEndError, PlannerError, ReplayInvariantError
    from .report import Report, SlaThresholds
    from .routing import BaseRouter, QueuePolicy, Router, RouterConfig, RouterContext, RouterError
    from .workload import MooncakeTrace, SyntheticSpec, SyntheticWorkload, WorkloadError
finally:
    if _collecting:
        _gc.enable()
    if _gc.get_freeze_count() == 0:
        _gc.freeze()
        _gc.unfreeze()

if TYPE_CHECKING:
    from .planner import PlannerMetrics, ScalingDecision

_PLANNER_NAMES = ("PlannerMetrics", "ScalingDecision")


def __getattr__(name: str) -> object:
    """The planner's public names, imported on first use: a replay without a planner never
    loads the planner's modules (a tenth of the package's import time)."""
    if name in _PLANNER_NAMES:
        from . import planner

        return getattr(planner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "ClusterConfig",
    "ConfigError",
    "DEFAULT_SYNTHETIC",
    "DeadEndError",
    "FaultPlan",
    "LimitsConfig",
    "OutputsConfig",
    "PlannerConfig",
    "PoolConfig",
    "ReplayConfig",
    "RoutingConfig",
    "SlaConfig",
    "TraceFile",
    "ModelConfig",
    "TransferConfig",
    "WorkloadConfig",
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
    "load_config",
    "run",
    "run_pass_by_pass",
]
