"""Workload value types: one turn of a request, session starts (and the workload error,
re-exported from :mod:`.errors`).

Why: the runtime, the trace reader and the synthetic generator meet here, so the admission
queue can treat a Mooncake file and a generated workload alike.  A turn is only materialised
(hash ids and all) when it is about to be admitted, so memory stays flat in the trace length.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, Protocol, final

from .errors import WorkloadError

__all__ = ["Turn", "SessionStart", "Workload", "WorkloadError", "NO_NEXT"]

NO_NEXT = -1
"""``Turn.next_request_id`` when the turn is the last of its session."""


@final
@dataclass(init=False, slots=True, unsafe_hash=True)
class Turn:
    """One request as the workload describes it.

    ``request_id`` is the 0-based index of the request in trace-line or generator order, so it
    is stable across runs.  ``delay_ms`` is the think time after the previous turn's terminal
    (already divided by the arrival speed-up); 0 for a first turn.
    """

    request_id: Final[int]
    input_length: Final[int]
    output_length: Final[int]
    hash_ids: Final[tuple[int, ...]]
    delay_ms: Final[float]
    next_request_id: Final[int]
    session_index: Final[int]
    turn_index: Final[int]

    def __init__(self, request_id: int, input_length: int, output_length: int, hash_ids: tuple[int, ...],
                 delay_ms: float, next_request_id: int, session_index: int, turn_index: int) -> None:
        self.request_id = request_id
        self.input_length = input_length
        self.output_length = output_length
        self.hash_ids = hash_ids
        self.delay_ms = delay_ms
        self.next_request_id = next_request_id
        self.session_index = session_index
        self.turn_index = turn_index


@final
@dataclass(init=False, slots=True, unsafe_hash=True, order=True)
class SessionStart:
    """A session's first turn and its (rebased, sped-up) arrival time."""

    arrival_ms: Final[float]
    request_id: Final[int]

    def __init__(self, arrival_ms: float, request_id: int) -> None:
        self.arrival_ms = arrival_ms
        self.request_id = request_id


class Workload(Protocol):
    """What the admission queue needs from a workload source."""

    @property
    def trace_block_size(self) -> int: ...

    @property
    def num_requests(self) -> int: ...

    def session_starts(self) -> Iterator[SessionStart]:
        """First turns in ascending (arrival_ms, request_id); lazily produced."""
        ...

    def load(self, request_id: int) -> Turn:
        """Materialise one turn; called once, when the turn becomes ready."""
        ...

    def delay_of(self, request_id: int) -> float:
        """Think time (ms) of a later turn after its predecessor's terminal, before loading it."""
        ...
