"""The mock engines, by name: where a worker is built from its :class:`EngineArgs`.

Adding an engine touches its own module, which declares ``ENGINE = EngineSpec(name, worker
class)``, its line in :data:`ENGINES`, and its entry in the handoff spec's ``engines`` table
(``spec/handoff.json``: its handoff order and default block size); nothing else names it.
"""

from __future__ import annotations

from typing import Final

from . import sglang, vllm
from .engine_args import EngineArgs
from .engine_spec import EngineSpec
from .interface import EngineWorker

__all__ = ["ENGINES", "engine_names", "engine_spec", "make_worker"]

#: Every mock engine, in the order listings show them.
ENGINES: Final[tuple[EngineSpec, ...]] = (vllm.ENGINE, sglang.ENGINE)


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
