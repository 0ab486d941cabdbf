"""What a conformance run finds: verdicts, violations, lifecycles, coverage (plain values).

The validator (:mod:`dmocker.conformance.validator`) builds a :class:`ConformanceResult`; the
report writers (:mod:`dmocker.conformance.report`) render it.  Nothing here refers back to
either, so both can depend on these types.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from dmocker.conformance.events import HandoffKey, LogError
from dmocker.handoff import HandoffOrder


class Verdict(enum.Enum):
    CONFORMS = "conforms"
    VIOLATES = "violates"
    INCOMPLETE = "incomplete"
    #: a dynamo record that ended failed/rejected/canceled: its present events are a legal
    #: prefix, but the records carry no cleanup events, so it is counted apart (not a leak)
    TRUNCATED = "truncated"


class ViolationKind(enum.Enum):
    """Why a handoff violates the spec (one JUnit testcase per order x kind)."""

    UNEXPECTED_EVENT = "unexpected_event"
    EVENT_AFTER_COMPLETION = "event_after_completion"
    TIME_BACKWARDS = "time_backwards"
    ENGINE_MISMATCH = "engine_mismatch"
    DECODE_BEFORE_ACTIVATION = "decode_before_activation"


@dataclass(frozen=True, slots=True)
class Violation:
    """The first violation of one handoff: where, in which state, and what was allowed there."""

    handoff: HandoffKey
    order: HandoffOrder
    kind: ViolationKind
    line: int
    t_ms: float
    event: str
    state: tuple[str, ...]
    allowed: tuple[str, ...]
    seen: tuple[str, ...]
    message: str


@dataclass(frozen=True, slots=True)
class Unfinished:
    """A handoff still open at the end of the log (incomplete: a leak) or truncated."""

    handoff: HandoffKey
    order: HandoffOrder
    verdict: Verdict
    first_line: int
    last_line: int
    seen: tuple[str, ...]
    state: tuple[str, ...]
    allowed: tuple[str, ...]
    status: str | None = None


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """A distinct sequence of events and how many handoffs followed it."""

    order: HandoffOrder
    verdict: Verdict
    events: tuple[str, ...]
    count: int


@dataclass(frozen=True, slots=True)
class Coverage:
    """Which spec transitions/rules the log exercised for one order.

    ``observable`` are the ids that can fire on some logged path (the rest only ignore or reject
    inputs, which leaves no trace in a log); ``exercised`` fired on every path explaining some
    handoff; ``possibly`` fired only on some explanation (ambiguous ``failed``).
    """

    order: HandoffOrder
    spec_total: int
    observable: tuple[str, ...]
    exercised: tuple[str, ...]
    possibly: tuple[str, ...]

    @property
    def percent_of_observable(self) -> float:
        return 100.0 * len(self.exercised) / len(self.observable) if self.observable else 0.0

    @property
    def percent_of_spec(self) -> float:
        return 100.0 * len(self.exercised) / self.spec_total if self.spec_total else 0.0

    @property
    def unexercised(self) -> tuple[str, ...]:
        done = set(self.exercised)
        return tuple(t for t in self.observable if t not in done)


@dataclass(frozen=True, slots=True)
class TimeAnomalies:
    backwards_within_handoff: int
    lines_out_of_global_order: int
    max_backwards_ms: float


@dataclass(frozen=True, slots=True)
class ConformanceResult:
    """Everything a report needs; plain values, deterministic order."""

    order: HandoffOrder | None
    lines: int
    events: int
    handoffs: int
    verdicts: dict[str, int]
    by_order: dict[str, dict[str, int]]
    violation_counts: tuple[tuple[HandoffOrder, ViolationKind, int], ...]
    violations: tuple[Violation, ...]
    unfinished: tuple[Unfinished, ...]
    lifecycles: tuple[Lifecycle, ...]
    coverage: tuple[Coverage, ...]
    time: TimeAnomalies
    input_errors: tuple[LogError, ...]
    input_error_count: int
    aborted: bool
    events_after_violation: int
    truncated_by_status: dict[str, int] = field(default_factory=dict)
    extra: dict[str, int] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """2 unreadable input, 1 a violation or a leak, 0 everything conforms."""
        if self.input_error_count:
            return 2
        if self.verdicts.get(Verdict.VIOLATES.value, 0) or self.verdicts.get(Verdict.INCOMPLETE.value, 0):
            return 1
        return 0
