"""Turn ``--planner`` text (a built-in name or ``MODULE:CLASS``) into a planner object.

Why separate: this is the edge where user input is checked (import errors, missing class,
constructor failures all become one ``ValueError`` naming the spec), so the loop itself only
ever sees objects.
"""

from __future__ import annotations

import importlib

from dmocker.engines.interface import EngineArgs

from .policies import LoadPlanner, PlannerSettings, ThroughputPlanner

__all__ = ["BUILTIN_PLANNERS", "PlannerSettings", "builtin_planner", "load_planner"]

BUILTIN_PLANNERS = ("throughput", "load")


def builtin_planner(name: str, settings: PlannerSettings, prefill_args: EngineArgs,
                    decode_args: EngineArgs) -> ThroughputPlanner | LoadPlanner:
    if name == "throughput":
        return ThroughputPlanner(settings, prefill_args, decode_args)
    if name == "load":
        return LoadPlanner(settings, prefill_args, decode_args)
    raise ValueError(f"unknown built-in planner {name!r}: expected one of {', '.join(BUILTIN_PLANNERS)}")


def load_planner(spec: str) -> object:
    """Import ``MODULE:CLASS`` and construct it with no arguments."""
    module_name, sep, class_name = spec.partition(":")
    if not sep or not module_name or not class_name:
        raise ValueError(
            f"planner {spec!r}: expected MODULE:CLASS or one of {', '.join(BUILTIN_PLANNERS)}"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ValueError(f"planner {spec!r}: cannot import {module_name}: {type(exc).__name__}: {exc}") from exc
    cls = getattr(module, class_name, None)
    if cls is None or not callable(cls):
        raise ValueError(f"planner {spec!r}: module {module_name} has no class {class_name}")
    try:
        return cls()
    except Exception as exc:
        raise ValueError(f"planner {spec!r}: constructing {class_name}() raised {type(exc).__name__}: {exc}") from exc
