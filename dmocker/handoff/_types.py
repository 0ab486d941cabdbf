"""Value types of the handoff protocol: orders, timing, facts, actions, outcomes, errors.

These are the words the coordinator and its drivers speak.  They are plain frozen values with
no behaviour beyond the transfer-delay formula, so that a driver (the replay, the checker, a
user's harness) can build, compare and store them freely.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Hashable, TypeAlias, Union

from dmocker._frozen import fast_frozen_init


class HandoffOrder(enum.Enum):
    """Which side of the handoff is acquired first.

    SOURCE_FIRST (vLLM, TRT-LLM): prefill, hold the source KV, then reserve the destination.
    DESTINATION_FIRST (SGLang): reserve the destination, then prefill.
    """

    SOURCE_FIRST = "source-first"
    DESTINATION_FIRST = "destination-first"

    @property
    def cli_name(self) -> str:
        return self.value

    @classmethod
    def parse(cls, text: str) -> HandoffOrder:
        """Parse the CLI spelling (``source-first`` / ``destination-first``)."""
        for order in cls:
            if text == order.value or text.upper().replace("-", "_") == order.name:
                return order
        raise ValueError(
            f"unknown handoff order {text!r}: expected 'source-first' or 'destination-first'"
        )


_ENGINE_ORDERS = {
    "vllm": HandoffOrder.SOURCE_FIRST,
    "trtllm": HandoffOrder.SOURCE_FIRST,
    "trt-llm": HandoffOrder.SOURCE_FIRST,
    "sglang": HandoffOrder.DESTINATION_FIRST,
}


def order_for_engine(name: str) -> HandoffOrder:
    """The handoff order an engine uses; case-insensitive; unknown engines are a ValueError."""
    try:
        return _ENGINE_ORDERS[name.strip().lower()]
    except (KeyError, AttributeError):
        raise ValueError(
            f"unknown engine {name!r}: expected one of vllm, trtllm, trt-llm, sglang"
        ) from None


class TransferTimingMode(enum.Enum):
    """Which token count a KV transfer is charged for."""

    FULL_PROMPT = "full-prompt"
    DESTINATION_MISSING = "destination-missing"


@fast_frozen_init  # built per request on the replay's hot path
@dataclass(frozen=True, slots=True)
class TransferTiming:
    """What the source knows about the transfer cost when its KV is held.

    ``delay_ms`` is None when there is no model (bytes per token or bandwidth missing, or the
    bandwidth is not positive); the coordinator then uses its fallback delay.
    """

    mode: TransferTimingMode
    full_prompt_tokens: int
    kv_bytes_per_token: int | None = None
    bandwidth_gb_s: float | None = None
    state_bytes: int = 0

    def delay_ms(self, destination_missing_tokens: int) -> float | None:
        tokens = (
            self.full_prompt_tokens
            if self.mode is TransferTimingMode.FULL_PROMPT
            else destination_missing_tokens
        )
        return _delay_ms(tokens, self.kv_bytes_per_token, self.bandwidth_gb_s, self.state_bytes)

    def full_prompt_delay_ms(self) -> float | None:
        """The delay for the whole prompt whatever the mode: what SourceHeld validates."""
        return _delay_ms(
            self.full_prompt_tokens, self.kv_bytes_per_token, self.bandwidth_gb_s, self.state_bytes
        )


def _delay_ms(
    tokens: int, kv_bytes_per_token: int | None, bandwidth_gb_s: float | None, state_bytes: int
) -> float | None:
    # Same float arithmetic, in the same order, as the reference, so delays agree to the bit.
    # A NaN bandwidth is not "<= 0", so it yields NaN (and validation rejects it).
    if kv_bytes_per_token is None or bandwidth_gb_s is None or bandwidth_gb_s <= 0.0:
        return None
    return (float(tokens) * float(kv_bytes_per_token) + float(state_bytes)) / (
        bandwidth_gb_s * 1e9
    ) * 1000.0


HandoffId: TypeAlias = Hashable


# --- facts -----------------------------------------------------------------------------------


@fast_frozen_init  # built per request on the replay's hot path
@dataclass(frozen=True, slots=True)
class SourceHeld:
    """The prefill finished and the source keeps its KV for the transfer."""

    handoff_id: HandoffId
    transfer_timing: TransferTiming


@fast_frozen_init  # built per request on the replay's hot path
@dataclass(frozen=True, slots=True)
class DestinationReserved:
    """The destination reserved room; it misses ``transferable_prompt_tokens`` tokens."""

    handoff_id: HandoffId
    transferable_prompt_tokens: int


@fast_frozen_init  # built per request on the replay's hot path
@dataclass(frozen=True, slots=True)
class TransferCompleted:
    handoff_id: HandoffId


@dataclass(frozen=True, slots=True)
class Failed:
    handoff_id: HandoffId


@dataclass(frozen=True, slots=True)
class TimedOut:
    handoff_id: HandoffId


@dataclass(frozen=True, slots=True)
class Canceled:
    handoff_id: HandoffId


Fact: TypeAlias = Union[SourceHeld, DestinationReserved, TransferCompleted, Failed, TimedOut, Canceled]

# --- actions ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SubmitPrefill:
    handoff_id: HandoffId


@dataclass(frozen=True, slots=True)
class ReserveDestination:
    handoff_id: HandoffId


@dataclass(frozen=True, slots=True)
class StartTransfer:
    handoff_id: HandoffId
    delay_ms: float


@dataclass(frozen=True, slots=True)
class ActivateDestination:
    handoff_id: HandoffId


@dataclass(frozen=True, slots=True)
class ReleaseSource:
    handoff_id: HandoffId


@dataclass(frozen=True, slots=True)
class CancelSource:
    handoff_id: HandoffId


@dataclass(frozen=True, slots=True)
class CancelDestination:
    handoff_id: HandoffId


@dataclass(frozen=True, slots=True)
class Complete:
    """The handoff is over; the result is the coordinator's ``completion``."""

    handoff_id: HandoffId


Action: TypeAlias = Union[
    SubmitPrefill,
    ReserveDestination,
    StartTransfer,
    ActivateDestination,
    ReleaseSource,
    CancelSource,
    CancelDestination,
    Complete,
]


@dataclass(frozen=True, slots=True)
class IssuedAction:
    """An action together with the id its outcome must be reported under."""

    id: int
    action: Action


class OutcomeKind(enum.Enum):
    SUBMITTED = "Submitted"
    ACCEPTED = "Accepted"
    SCHEDULED = "Scheduled"
    APPLIED = "Applied"
    NOOP = "Noop"
    FAILED = "Failed"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What executing an action did. Equal when kind and message are equal."""

    kind: OutcomeKind
    message: str = ""


class Completion(enum.Enum):
    SUCCESS = "success"
    CANCELED = "canceled"


class HandoffErrorKind(enum.Enum):
    """Why the coordinator rejected an input (the input changed nothing)."""

    FOREIGN_HANDOFF = "foreign_handoff"
    HELD_BEFORE_SUBMITTED = "held_before_submitted"
    RESERVED_BEFORE_ACCEPTED = "reserved_before_accepted"
    COMPLETED_BEFORE_SCHEDULED = "completed_before_scheduled"
    UNKNOWN_ACTION = "unknown_action"
    CONFLICTING_OUTCOME = "conflicting_outcome"
    INVALID_OUTCOME = "invalid_outcome"
    CLEANUP_FAILED = "cleanup_failed"
    INVALID_DELAY = "invalid_delay"
    INVALID_BANDWIDTH = "invalid_bandwidth"


class HandoffError(ValueError):
    """An input the protocol forbids. ``kind`` says which rule; the coordinator is unchanged."""

    def __init__(self, kind: HandoffErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
