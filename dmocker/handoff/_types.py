"""Value types of the handoff protocol: orders, timing, facts, actions, outcomes, errors.

These are the words the coordinator and its drivers speak.  They are plain frozen values with
no behaviour beyond the transfer-delay formula, so that a driver (the replay, the checker, a
user's harness) can build, compare and store them freely.

They are compiled with the replay's core (``setup.py``), which builds several per simulated
request: ``@final`` dataclasses with ``Final`` fields and an explicit ``__init__`` (equality,
hashing and ``repr`` are the dataclass's own, field by field; the constructor compiles to C);
interpreted (``DMOCKER_PURE``) they behave the same.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final, Hashable, TypeAlias, TypeVar, Union, final


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


class TransferTimingMode(enum.Enum):
    """Which token count a KV transfer is charged for."""

    FULL_PROMPT = "full-prompt"
    DESTINATION_MISSING = "destination-missing"


_V = TypeVar("_V", bound="_Value")


class _Value:
    """Base of the protocol's values.  They are immutable (``Final`` fields: the compiled build
    raises AttributeError on assignment), so a copy is the value itself; and they pickle by
    their fields (a compiled class has no field-less constructor for the default protocol)."""

    def __copy__(self: _V) -> _V:
        return self

    def __deepcopy__(self: _V, memo: dict[int, object]) -> _V:
        return self

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        names: dict[str, object] = getattr(type(self), "__dataclass_fields__")
        return type(self), tuple(getattr(self, name) for name in names)


@final
@dataclass(init=False, slots=True, unsafe_hash=True)
class TransferTiming(_Value):
    """What the source knows about the transfer cost when its KV is held.

    ``delay_ms`` is None when there is no model (bytes per token or bandwidth missing, or the
    bandwidth is not positive); the coordinator then uses its fallback delay.
    """

    mode: Final[TransferTimingMode]
    full_prompt_tokens: Final[int]
    kv_bytes_per_token: Final[int | None]
    bandwidth_gb_s: Final[float | None]
    state_bytes: Final[int]

    def __init__(
        self,
        mode: TransferTimingMode,
        full_prompt_tokens: int,
        kv_bytes_per_token: int | None = None,
        bandwidth_gb_s: float | None = None,
        state_bytes: int = 0,
    ) -> None:
        self.mode = mode
        self.full_prompt_tokens = full_prompt_tokens
        self.kv_bytes_per_token = kv_bytes_per_token
        self.bandwidth_gb_s = bandwidth_gb_s
        self.state_bytes = state_bytes

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


@final
@dataclass(init=False, slots=True, unsafe_hash=True)
class SourceHeld(_Value):
    """The prefill finished and the source keeps its KV for the transfer."""

    handoff_id: Final[HandoffId]
    transfer_timing: Final[TransferTiming]

    def __init__(self, handoff_id: HandoffId, transfer_timing: TransferTiming) -> None:
        self.handoff_id = handoff_id
        self.transfer_timing = transfer_timing


@final
@dataclass(init=False, slots=True, unsafe_hash=True)
class DestinationReserved(_Value):
    """The destination reserved room; it misses ``transferable_prompt_tokens`` tokens."""

    handoff_id: Final[HandoffId]
    transferable_prompt_tokens: Final[int]

    def __init__(self, handoff_id: HandoffId, transferable_prompt_tokens: int) -> None:
        self.handoff_id = handoff_id
        self.transferable_prompt_tokens = transferable_prompt_tokens


@final
@dataclass(init=False, slots=True, unsafe_hash=True)
class TransferCompleted(_Value):
    handoff_id: Final[HandoffId]

    def __init__(self, handoff_id: HandoffId) -> None:
        self.handoff_id = handoff_id


@final
@dataclass(init=False, slots=True, unsafe_hash=True)
class Failed(_Value):
    handoff_id: Final[HandoffId]

    def __init__(self, handoff_id: HandoffId) -> None:
        self.handoff_id = handoff_id


@final
@dataclass(init=False, slots=True, unsafe_hash=True)
class TimedOut(_Value):
    handoff_id: Final[HandoffId]

    def __init__(self, handoff_id: HandoffId) -> None:
        self.handoff_id = handoff_id


@final
@dataclass(init=False, slots=True, unsafe_hash=True)
class Canceled(_Value):
    handoff_id: Final[HandoffId]

    def __init__(self, handoff_id: HandoffId) -> None:
        self.handoff_id = handoff_id


Fact: TypeAlias = Union[SourceHeld, DestinationReserved, TransferCompleted, Failed, TimedOut, Canceled]
#: The facts that end a handoff (the spec's ``terminal: true`` facts; the registry checks the two agree).
TerminalFact: TypeAlias = Union[Failed, TimedOut, Canceled]

# --- actions ---------------------------------------------------------------------------------


@final
@dataclass(init=False, slots=True, unsafe_hash=True)
class SubmitPrefill(_Value):
    handoff_id: Final[HandoffId]

    def __init__(self, handoff_id: HandoffId) -> None:
        self.handoff_id = handoff_id


@final
@dataclass(init=False, slots=True, unsafe_hash=True)
class ReserveDestination(_Value):
    handoff_id: Final[HandoffId]

    def __init__(self, handoff_id: HandoffId) -> None:
        self.handoff_id = handoff_id


@final
@dataclass(init=False, slots=True, unsafe_hash=True)
class StartTransfer(_Value):
    handoff_id: Final[HandoffId]
    delay_ms: Final[float]

    def __init__(self, handoff_id: HandoffId, delay_ms: float) -> None:
        self.handoff_id = handoff_id
        self.delay_ms = delay_ms


@final
@dataclass(init=False, slots=True, unsafe_hash=True)
class ActivateDestination(_Value):
    handoff_id: Final[HandoffId]

    def __init__(self, handoff_id: HandoffId) -> None:
        self.handoff_id = handoff_id


@final
@dataclass(init=False, slots=True, unsafe_hash=True)
class ReleaseSource(_Value):
    handoff_id: Final[HandoffId]

    def __init__(self, handoff_id: HandoffId) -> None:
        self.handoff_id = handoff_id


@final
@dataclass(init=False, slots=True, unsafe_hash=True)
class CancelSource(_Value):
    handoff_id: Final[HandoffId]

    def __init__(self, handoff_id: HandoffId) -> None:
        self.handoff_id = handoff_id


@final
@dataclass(init=False, slots=True, unsafe_hash=True)
class CancelDestination(_Value):
    handoff_id: Final[HandoffId]

    def __init__(self, handoff_id: HandoffId) -> None:
        self.handoff_id = handoff_id


@final
@dataclass(init=False, slots=True, unsafe_hash=True)
class Complete(_Value):
    """The handoff is over; the result is the coordinator's ``completion``."""

    handoff_id: Final[HandoffId]

    def __init__(self, handoff_id: HandoffId) -> None:
        self.handoff_id = handoff_id


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


@final
@dataclass(init=False, slots=True, unsafe_hash=True)
class IssuedAction(_Value):
    """An action together with the id its outcome must be reported under."""

    id: Final[int]
    action: Final[Action]

    def __init__(self, id: int, action: Action) -> None:
        self.id = id
        self.action = action


class OutcomeKind(enum.Enum):
    SUBMITTED = "Submitted"
    ACCEPTED = "Accepted"
    SCHEDULED = "Scheduled"
    APPLIED = "Applied"
    NOOP = "Noop"
    FAILED = "Failed"


@final
@dataclass(init=False, slots=True, unsafe_hash=True)
class Outcome(_Value):
    """What executing an action did. Equal when kind and message are equal."""

    kind: Final[OutcomeKind]
    message: Final[str]

    def __init__(self, kind: OutcomeKind, message: str = "") -> None:
        self.kind = kind
        self.message = message


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
