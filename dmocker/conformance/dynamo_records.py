"""Adapter: the reference's per-request records (Dynamo replay ``capture_per_request``) as events.

A record has one timestamp per lifecycle milestone and no event sequence, so the mapping is
(docs/conformance.md explains it):

* ``prefill_admit_ms`` -> ``prefill_submitted`` (admission follows submission, so this is a
  conservative stand-in);
* ``source_held_ms`` -> ``source_held``;
* ``destination_reserved_ms`` -> ``destination_accepted`` then ``destination_reserved`` (the
  records have no acceptance time);
* ``destination_activated_ms`` -> ``transfer_started``, ``transfer_completed`` (implied just
  before) then ``destination_activated``;
* ``source_released_ms`` -> ``source_released``;
* ``terminal_status`` ``completed`` -> ``completed(success)`` at the latest of those times.

Events with equal timestamps happened in one drain of the simulator, so they are ordered as the
spec's clean lifecycle of the order orders them (``projection.success_lifecycle``), never by
field order.  ``decode_admit_ms`` is an engine event: it must not precede the activation.
Records ending ``failed``, ``rejected`` or ``canceled`` carry no cleanup events: what is present
is checked as a prefix and the handoff is counted apart (truncated).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from dmocker.conformance.events import LogError
from dmocker.conformance.projection import completed_symbol, projection_for, success_lifecycle
from dmocker.handoff import Completion, HandoffOrder

#: (record field, the symbols it stands for, in order).
MAPPING: Final[tuple[tuple[str, tuple[str, ...]], ...]] = (
    ("prefill_admit_ms", ("prefill_submitted",)),
    ("source_held_ms", ("source_held",)),
    ("destination_reserved_ms", ("destination_accepted", "destination_reserved")),
    ("destination_activated_ms", ("transfer_started", "transfer_completed", "destination_activated")),
    ("source_released_ms", ("source_released",)),
)
TERMINAL_STATUSES: Final = ("completed", "failed", "rejected", "canceled")


@dataclass(frozen=True, slots=True)
class RecordEvent:
    t_ms: float
    symbol: str


@dataclass(frozen=True, slots=True)
class RecordProblem:
    """A check on the record itself (not on the lifecycle sequence)."""

    t_ms: float
    event: str
    message: str


@dataclass(frozen=True, slots=True)
class ConvertedRecord:
    handoff: str | int
    status: str | None
    events: tuple[RecordEvent, ...]
    problems: tuple[RecordProblem, ...]


_RANKS: dict[HandoffOrder, dict[str, int]] = {}


def _ranks(order: HandoffOrder) -> dict[str, int]:
    ranks = _RANKS.get(order)
    if ranks is None:
        ranks = {symbol: i for i, symbol in enumerate(success_lifecycle(projection_for(order)))}
        _RANKS[order] = ranks
    return ranks


def record_events(obj: dict[str, object], line: int, order: HandoffOrder) -> ConvertedRecord | LogError:
    """The events one record stands for, in log order, or the error that makes it unreadable."""
    handoff = obj.get("uuid")
    if handoff is None:
        handoff = obj.get("request_id")
    if handoff is None:
        return LogError(line, "uuid", "missing field (neither uuid nor request_id)")
    if not isinstance(handoff, (str, int)) or isinstance(handoff, bool):
        return LogError(line, "uuid", "must be a string (or request_id an integer)")
    status = obj.get("terminal_status")
    if status is not None:
        if not isinstance(status, str) or status.lower() not in TERMINAL_STATUSES:
            return LogError(line, "terminal_status", f"expected one of {', '.join(TERMINAL_STATUSES)} or null, got {status!r}")
        status = status.lower()
    times: dict[str, float] = {}
    for name in (*(f for f, _ in MAPPING), "decode_admit_ms"):
        value = obj.get(name)
        if value is None:
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
            return LogError(line, name, f"must be a finite number >= 0 or null, got {value!r}")
        times[name] = float(value)
    ranks = _ranks(order)
    events: list[tuple[float, int, str]] = []
    for name, symbols in MAPPING:
        if name in times:
            for symbol in symbols:
                events.append((times[name], ranks[symbol], symbol))
    if status == "completed":
        latest = max((t for t, _, _ in events), default=0.0)
        done = completed_symbol(Completion.SUCCESS.value)
        events.append((latest, ranks[done], done))
    events.sort()
    problems: list[RecordProblem] = []
    admit = times.get("decode_admit_ms")
    activated = times.get("destination_activated_ms")
    if admit is not None and activated is not None and admit < activated:
        problems.append(RecordProblem(
            admit, "decode_admit",
            f"decode admitted at {admit:g} ms, before the destination was activated at {activated:g} ms",
        ))
    return ConvertedRecord(handoff, status, tuple(RecordEvent(t, s) for t, _, s in events), tuple(problems))
