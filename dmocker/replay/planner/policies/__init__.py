"""Built-in planner policies: the reference planner's throughput and load scaling."""

from .capacity import EngineCapacity, decode_capacity, prefill_capacity
from .load import LoadPlanner
from .settings import PlannerSettings
from .throughput import ThroughputPlanner

__all__ = [
    "EngineCapacity",
    "LoadPlanner",
    "PlannerSettings",
    "ThroughputPlanner",
    "decode_capacity",
    "prefill_capacity",
]
