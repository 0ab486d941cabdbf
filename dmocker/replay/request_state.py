"""A request's state while it is in the cluster, and the two enums it is keyed by (shared by
the parts of :mod:`dmocker.replay.runtime` and the per-request records)."""

from __future__ import annotations

import enum
from collections.abc import Callable

from dmocker.engines.interface import EngineRequest
from dmocker.handoff import HandoffCoordinator, IssuedAction

from .workload import Turn

__all__ = ["Stage", "Phase", "RequestState", "Queued"]


class Stage(enum.IntEnum):
    PREFILL = 0
    DECODE = 1


class Phase(enum.Enum):
    """The reference's DisaggPhase."""

    AWAITING_DESTINATION = "awaiting_destination"
    QUEUED_PREFILL = "queued_prefill"
    RUNNING_PREFILL = "running_prefill"
    TRANSFER_PENDING = "transfer_pending"
    READY_DECODE = "ready_decode"
    RUNNING_DECODE = "running_decode"
    CLEANUP_PENDING = "cleanup_pending"
    DONE = "done"


class RequestState:
    """Mutable per-request runtime state; exists only while the request is in flight."""

    __slots__ = (
        "rid",
        "turn",
        "coord",
        "phase",
        "counted",
        "prefill_worker",
        "decode_worker",
        "queued",
        "engine_request",
        "arrival_ms",
        "first_admit_ms",
        "prefill_admit_ms",
        "source_held_ms",
        "destination_reserved_ms",
        "destination_activated_ms",
        "decode_admit_ms",
        "source_released_ms",
        "prefill_reused",
        "decode_reused",
        "terminal_ms",
        "held_tokens",
        "routed",
        "acquire_hook",
        "transfer_done_ms",
        "transfer_gen",
    )

    def __init__(self, turn: Turn, arrival_ms: float, coord: HandoffCoordinator, request: EngineRequest) -> None:
        self.rid = turn.request_id
        self.turn = turn
        self.coord = coord
        self.phase = Phase.QUEUED_PREFILL
        self.counted = True
        self.prefill_worker = -1
        self.decode_worker = -1
        self.queued = 0
        self.engine_request = request
        self.arrival_ms = arrival_ms
        self.first_admit_ms: float | None = None
        self.prefill_admit_ms: float | None = None
        self.source_held_ms: float | None = None
        self.destination_reserved_ms: float | None = None
        self.destination_activated_ms: float | None = None
        self.decode_admit_ms: float | None = None
        self.source_released_ms: float | None = None
        self.prefill_reused: int | None = None
        self.decode_reused: int | None = None
        self.terminal_ms: float | None = None
        self.held_tokens: int | None = None
        self.routed = 0  # bit 1: the prefill router holds it, bit 2: the decode router does
        # fault injection: asked before each acquiring command; True fails that command
        self.acquire_hook: Callable[[], bool] | None = None
        self.transfer_done_ms: float | None = None  # when the destination had the KV (TransferCompleted)
        # the generation of the transfer's completion event: a recomputation supersedes a stalled one
        self.transfer_gen = 0


Queued = tuple[RequestState, IssuedAction]
"""An issued action waiting to run, with its request."""
