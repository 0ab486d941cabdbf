"""From the configuration's ``planner`` table to a :class:`PlannerLoop` (the api's one call).

Why a module: ``dmocker.replay.api.run`` stays a straight line; everything the planner adds to
it (resolving the planner, checking its settings, building new workers) lives here.
"""

from __future__ import annotations

from dataclasses import dataclass

from dmocker.engines.interface import EngineArgs, EngineWorker
from dmocker.engines.registry import make_worker

from .loop import PlannerLoop, check_initial_tick
from .policies import PlannerSettings
from .resolve import BUILTIN_PLANNERS, builtin_planner, load_planner

__all__ = ["PlannerOptions", "build_planner_loop"]


@dataclass(frozen=True, slots=True)
class PlannerOptions:
    """The validated planner arguments of one run (the planner is resolved later)."""

    planner: object  # an object, a built-in name or "MODULE:CLASS"
    label: str
    startup_time_s: float
    settings: PlannerSettings

    @staticmethod
    def check(
        planner: object,
        *,
        startup_time_s: float,
        throughput_interval_s: float,
        load_interval_s: float,
        min_endpoint: int,
        max_gpu_budget: int,
        sla_ttft_ms: float | None,
        sla_itl_ms: float | None,
    ) -> PlannerOptions:
        """The options of a run with ``planner``; ``ValueError`` naming the argument on bad
        input (``startup_time_s`` is checked by the caller, with or without a planner)."""
        defaults = PlannerSettings()
        settings = PlannerSettings(
            sla_ttft_ms=sla_ttft_ms if sla_ttft_ms is not None else defaults.sla_ttft_ms,
            sla_itl_ms=sla_itl_ms if sla_itl_ms is not None else defaults.sla_itl_ms,
            throughput_interval_s=throughput_interval_s,
            load_interval_s=load_interval_s,
            min_endpoint=min_endpoint,
            max_gpu_budget=max_gpu_budget,
        ).validate()
        if isinstance(planner, str):
            label = planner.strip()
            if label not in BUILTIN_PLANNERS:
                planner = load_planner(label)
        else:
            label = f"{type(planner).__module__}:{type(planner).__qualname__}"
        return PlannerOptions(planner, label, float(startup_time_s), settings)


def build_planner_loop(
    opts: PlannerOptions, prefill_args: EngineArgs, decode_args: EngineArgs, initial: tuple[int, int]
) -> PlannerLoop:
    """Resolve a built-in planner against the engine args, check its first tick, build the loop."""
    planner = opts.planner
    if isinstance(planner, str):
        planner = builtin_planner(planner, opts.settings, prefill_args, decode_args)
    first = check_initial_tick(planner)
    pool_args = (prefill_args, decode_args)

    def new_worker(stage: int, idx: int) -> EngineWorker:
        return make_worker(pool_args[stage], idx)

    return PlannerLoop(
        planner,
        first_tick_ms=first,
        initial_workers=initial,
        make_worker=new_worker,
        startup_time_s=opts.startup_time_s,
    )
