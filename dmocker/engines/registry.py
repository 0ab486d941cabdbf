"""The mock engines, by name: where a worker is built from its :class:`EngineArgs`.

Adding an engine touches two places: its entry in the handoff spec's ``engines`` table
(``spec/handoff.json``: its handoff order and default block size, which marks it as mocked) and
its module ``dmocker/engines/<name>.py``, which declares ``ENGINE = EngineSpec(name, worker
class)``.  The registry finds the module by the spec's name; nothing else names an engine.
"""

from __future__ import annotations

import importlib
from typing import Final

from .engine_args import EngineArgs, mock_engines
from .engine_spec import EngineSpec
from .interface import EngineWorker

__all__ = ["ENGINES", "engine_names", "engine_spec", "make_worker"]


def _load(name: str) -> EngineSpec:
    """The ``ENGINE`` declared by the module of the spec's engine ``name``."""
    module_name = f"{__package__}.{name.replace('-', '_')}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        raise ImportError(f"the handoff spec gives engine {name!r} a default block size (a mock), "
                          f"but there is no module {module_name}") from None
    spec = getattr(module, "ENGINE", None)
    if not isinstance(spec, EngineSpec) or spec.name != name:
        raise ImportError(f"{module_name} must declare ENGINE = EngineSpec({name!r}, <worker class>)")
    return spec


#: Every mock engine, in the spec's order (the order listings show them).
ENGINES: Final[tuple[EngineSpec, ...]] = tuple(_load(entry.name) for entry in mock_engines())


def engine_names() -> tuple[str, ...]:
    """The mock engines' names, in :data:`ENGINES` order."""
    return tuple(spec.name for spec in ENGINES)


def engine_spec(name: str) -> EngineSpec:
    """The mock engine called ``name`` (case and surrounding blanks ignored); a ValueError
    naming the known ones for any other name."""
    key = name.strip().lower() if isinstance(name, str) else None
    for spec in ENGINES:
        if spec.name == key:
            return spec
    raise ValueError(f"unknown engine {name!r}: expected one of " + ", ".join(repr(n) for n in engine_names()))


def make_worker(args: EngineArgs, worker_idx: int = 0, *, record_kv_events: bool = False) -> EngineWorker:
    """Build a worker of ``args.engine`` after validating the args.

    ``record_kv_events`` turns on KV Stored/Removed capture (prefix-router feed, conformance);
    off, the hot path skips building event tuples.
    """
    args.validate()
    return engine_spec(args.engine).worker(args, worker_idx, record_kv_events=record_kv_events)
