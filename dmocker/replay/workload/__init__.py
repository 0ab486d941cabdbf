"""Workloads: the Mooncake trace reader, the synthetic generator and the admission queue."""

from .admission import AdmissionQueue, ReadyTurn
from .mooncake import MooncakeTrace
from .synthetic import SyntheticSpec, SyntheticWorkload
from .types import NO_NEXT, SessionStart, Turn, Workload, WorkloadError

__all__ = [
    "AdmissionQueue",
    "MooncakeTrace",
    "NO_NEXT",
    "ReadyTurn",
    "SessionStart",
    "SyntheticSpec",
    "SyntheticWorkload",
    "Turn",
    "Workload",
    "WorkloadError",
]
