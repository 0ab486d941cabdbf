"""What the engine registry lists for each mock engine (:class:`EngineSpec`).

An engine's module declares one (``ENGINE = EngineSpec("vllm", VllmWorker)``): its name and the
class that builds its workers.  What the handoff needs to know about it -- the order it speaks
and its default block size -- is the handoff spec's ``engines`` entry of that name
(``spec/handoff.json``), which conformance logs read too; the spec is the one place that says it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, final

from dmocker.handoff import HandoffOrder, load_spec

from .engine_args import EngineArgs
from .interface import EngineWorker

__all__ = ["EngineSpec", "WorkerFactory"]


class WorkerFactory(Protocol):
    """Builds one worker of an engine (a worker class is one)."""

    def __call__(self, args: EngineArgs, worker_idx: int = ..., *,
                 record_kv_events: bool = ...) -> EngineWorker: ...


@final
@dataclass(frozen=True, slots=True)
class EngineSpec:
    """A mock engine: its name (lower case, an entry of the spec's ``engines`` table with a
    default block size) and the factory of its workers."""

    name: str
    worker: WorkerFactory

    @property
    def order(self) -> HandoffOrder:
        """The handoff order the engine speaks (the spec's entry)."""
        return load_spec().engine(self.name).order

    @property
    def default_block_size(self) -> int:
        """The block size of its workers when the engine arguments give none (the spec's entry)."""
        block = load_spec().engine(self.name).default_block_size
        if block is None:
            raise ValueError(f"engine {self.name!r}: the spec's engines table gives it no default_block_size")
        return block
