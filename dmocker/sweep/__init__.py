"""Capacity planning: sweeps of replay configurations, capacity search, ranking and pictures.

``plan_sweep`` validates a sweep (axes from :mod:`.grid`, base replay arguments, SLA) before
anything runs; ``run_sweep`` runs each configuration as an independent deterministic
``dmocker.replay.run`` -- in this process, a local process pool or on Ray (:mod:`.runners`) --
and ranks the results (:mod:`.rank`); :mod:`.plot` draws the Pareto frontier.
"""

from .core import SweepOutcome, SweepPlan, plan_sweep, run_sweep
from .grid import AXES, Axis, AxisKind, ConfigValue, GridError, config_label, expand, parse_axis
from .rank import Row, cheapest, rank, render_table
from .runners import Backend, BackendUnavailable
from .task import SearchSpec, SweepTask, TaskResult, attainment, execute

__all__ = [
    "AXES",
    "Axis",
    "AxisKind",
    "Backend",
    "BackendUnavailable",
    "ConfigValue",
    "GridError",
    "Row",
    "SearchSpec",
    "SweepOutcome",
    "SweepPlan",
    "SweepTask",
    "TaskResult",
    "attainment",
    "cheapest",
    "config_label",
    "execute",
    "expand",
    "parse_axis",
    "plan_sweep",
    "rank",
    "render_table",
    "run_sweep",
]
