"""The event-log format: one observable handoff event per JSONL line (spec/event-log.schema.json).

A line is ``{"handoff": ID, "t_ms": NUMBER, "event": KIND, ...}`` with optional ``engine``,
``worker``, ``tokens`` and ``detail``; ``completed`` needs ``detail`` ``success`` or ``canceled``.
The vocabulary (kinds, the completion kind and its details) is read from the spec's
``observable`` section; lines are written by :class:`dmocker.handoff.EventLogWriter`.
An optional first line ``{"dmocker_event_log": "1.0"}`` names the format version.  Parsing is
strict (the point of the log is to be checked) and every problem is a :class:`LogError` naming
the line and the field, so the CLI can print ``FILE:LINE: field: reason``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Final, TypeAlias, Union

from dmocker.handoff import load_spec

#: The format version this module reads and writes; a header with another major is refused.
FORMAT_VERSION: Final = "1.0"
HEADER_KEY: Final = "dmocker_event_log"

_SPEC = load_spec()
#: The event vocabulary: the spec's observable kinds, then its worker kinds (spec ``observable``),
#: read at import.
EVENT_KINDS: Final = _SPEC.log_kinds
#: The kind that carries the completion in ``detail`` (``completed``) and its details.
COMPLETION_KIND: Final = _SPEC.completion_kind
COMPLETED_DETAILS: Final = _SPEC.completed_details
#: The kinds that are their own symbol (all but the completion kind).
SIMPLE_KINDS: Final = frozenset(k for k in EVENT_KINDS if k != COMPLETION_KIND)


def completed_symbol(detail: str) -> str:
    """The symbol of a completion event with this detail (``completed:success``)."""
    return f"{COMPLETION_KIND}:{detail}"


#: detail -> the symbol of a completion event with it
SYMBOL_OF_COMPLETED: Final = {d: completed_symbol(d) for d in COMPLETED_DETAILS}
_DETAILS_TEXT: Final = " or ".join(repr(d) for d in COMPLETED_DETAILS)

HandoffKey: TypeAlias = Union[str, int]


@dataclass(frozen=True, slots=True)
class LogEvent:
    """One parsed line; ``symbol`` is the event, or ``completed:<detail>`` for completions."""

    line: int
    handoff: HandoffKey
    t_ms: float
    event: str
    symbol: str
    engine: str | None = None
    worker: str | int | None = None
    tokens: int | None = None
    detail: str | None = None

    def to_json(self) -> dict[str, object]:
        """The line as it is written (fields in schema order, absent optionals left out)."""
        out: dict[str, object] = {"handoff": self.handoff, "t_ms": self.t_ms, "event": self.event}
        if self.engine is not None:
            out["engine"] = self.engine
        if self.worker is not None:
            out["worker"] = self.worker
        if self.tokens is not None:
            out["tokens"] = self.tokens
        if self.detail is not None:
            out["detail"] = self.detail
        return out


@dataclass(frozen=True, slots=True)
class LogError:
    """A line that cannot be read: ``field`` is None when the line itself is the problem."""

    line: int
    field: str | None
    reason: str

    def render(self, source: str) -> str:
        where = f"{source}:{self.line}"
        return f"{where}: {self.field}: {self.reason}" if self.field else f"{where}: {self.reason}"


_KINDS = frozenset(EVENT_KINDS)


def parse_line(text: str, line: int) -> LogEvent | LogError | None:
    """Parse one line: an event, an error, or None for a blank line or the version header."""
    if not text.strip():
        return None
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        return LogError(line, None, json_error_reason(exc, text))
    if type(obj) is not dict:
        return LogError(line, None, f"expected a JSON object, got {_json_type(obj)}")
    if HEADER_KEY in obj and "event" not in obj:
        return check_header(obj, line)
    return event_from_mapping(obj, line)


def json_error_reason(exc: ValueError | RecursionError, text: str) -> str:
    """``malformed JSON: <what> at column N`` (column 1-based, within the line)."""
    if isinstance(exc, json.JSONDecodeError):
        body = text.rstrip("\r\n")
        where = "at the end of the line" if exc.pos >= len(body) else f"at column {exc.pos + 1}"
        return f"malformed JSON: {exc.msg} {where}"
    return "malformed JSON: nested too deeply"


def check_header(obj: dict[str, object], line: int) -> LogError | None:
    """A version header is fine when its major version is ours."""
    version = obj.get(HEADER_KEY)
    if not isinstance(version, str) or version.split(".")[0] != FORMAT_VERSION.split(".")[0]:
        return LogError(line, HEADER_KEY, f"unsupported event-log version {version!r}: this dmocker reads {FORMAT_VERSION}")
    return None


def event_from_mapping(obj: dict[str, object], line: int) -> LogEvent | LogError:
    """Validate one decoded line against the schema (same rules as spec/event-log.schema.json)."""
    handoff = obj.get("handoff")
    if handoff is None:
        return LogError(line, "handoff", "missing field")
    if not isinstance(handoff, (str, int)) or isinstance(handoff, bool):
        return LogError(line, "handoff", f"must be a string or an integer, got {_json_type(handoff)}")
    if isinstance(handoff, str) and not handoff:
        return LogError(line, "handoff", "must not be empty")
    t = obj.get("t_ms")
    if t is None:
        return LogError(line, "t_ms", "missing field")
    if not isinstance(t, (int, float)) or isinstance(t, bool):
        return LogError(line, "t_ms", f"must be a number, got {_json_type(t)}")
    t = float(t)
    if not math.isfinite(t) or t < 0.0:
        return LogError(line, "t_ms", f"must be finite and >= 0, got {t!r}")
    event = obj.get("event")
    if event is None:
        return LogError(line, "event", "missing field")
    if not isinstance(event, str):
        return LogError(line, "event", f"must be a string, got {_json_type(event)}")
    if event not in _KINDS:
        return LogError(line, "event", f"unknown event kind {event!r}")
    detail = obj.get("detail")
    if detail is not None and not isinstance(detail, str):
        return LogError(line, "detail", f"must be a string, got {_json_type(detail)}")
    if event == COMPLETION_KIND:
        if detail is None:
            return LogError(line, "detail", f"missing field: {COMPLETION_KIND} needs detail {_DETAILS_TEXT}")
        symbol = SYMBOL_OF_COMPLETED.get(detail)
        if symbol is None:
            return LogError(line, "detail", f"{COMPLETION_KIND} needs detail {_DETAILS_TEXT}, got {detail!r}")
    else:
        symbol = event
    engine = obj.get("engine")
    if engine is not None and not isinstance(engine, str):
        return LogError(line, "engine", f"must be a string, got {_json_type(engine)}")
    worker = obj.get("worker")
    if worker is not None and (not isinstance(worker, (str, int)) or isinstance(worker, bool)):
        return LogError(line, "worker", f"must be a string or an integer, got {_json_type(worker)}")
    tokens = obj.get("tokens")
    if tokens is not None and (not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0):
        return LogError(line, "tokens", f"must be an integer >= 0, got {tokens!r}")
    return LogEvent(line, handoff, t, event, symbol, engine, worker, tokens, detail)


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def dump_line(event: LogEvent) -> str:
    """One JSONL line (no trailing newline), compact and key-ordered like the schema."""
    return json.dumps(event.to_json(), separators=(",", ":"))
