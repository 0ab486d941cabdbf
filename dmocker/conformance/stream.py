"""Drive the validator over a stream of lines: native event logs and Dynamo per-request records.

This is the thin layer between text and the pure validator: it parses line by line (never
holding the file), counts lines, and turns unreadable lines into :class:`LogError` values —
recorded and skipped with ``keep_going``, otherwise the run stops there (``aborted``).
"""

from __future__ import annotations

import enum
import json
import math
from collections import Counter
from typing import Final, Iterable

from dmocker.conformance.dynamo_records import RecordProblem, record_events
from dmocker.conformance.events import (
    COMPLETION_KIND,
    HEADER_KEY,
    SIMPLE_KINDS,
    SYMBOL_OF_COMPLETED,
    LogError,
    json_error_reason,
    parse_line,
)
from dmocker.conformance.results import ViolationKind
from dmocker.conformance.trie import OpenHandoff
from dmocker.conformance.validator import Validator
from dmocker.handoff import HandoffOrder, order_for_engine


class LogFormat(enum.Enum):
    NATIVE = "native"
    DYNAMO_RECORDS = "dynamo-records"


# The fast path's vocabulary: the format module's, read from the spec.
_COMPLETED_SYMBOLS: Final = SYMBOL_OF_COMPLETED
_SIMPLE_KINDS: Final = SIMPLE_KINDS
_COMPLETION_KIND: Final = COMPLETION_KIND


def check_native(lines: Iterable[str], validator: Validator, *, keep_going: bool) -> None:
    """Validate a native event log.

    The loop has a fast path for well-formed lines of handoffs already open (the common case
    by far): it decodes with the standard decoder's ``raw_decode`` (no whitespace regex), checks
    the same rules as :func:`events.event_from_mapping` inline and advances the handoff's trie
    node without a call.  Anything else — a new or finished handoff, a violation, an optional
    field, a problem to name precisely — goes through :meth:`Validator.feed_raw` or the full
    parser; both paths give the same verdicts (a test runs both on the same logs).
    """
    raw_decode = json.JSONDecoder().raw_decode
    feed = validator.feed_raw
    inf = math.inf
    simple = _SIMPLE_KINDS
    completed = _COMPLETED_SYMBOLS
    completion_kind = _COMPLETION_KIND
    # The hot loop takes legal steps itself through the validator's FastPath contract (the
    # same updates feed_raw makes, for the cases that need no decision;
    # test_fast_path_equals_slow_path).
    fast_path = validator.fast_path()
    open_ = fast_path.open
    open_get = open_.get
    finished = fast_path.finished
    conform_ends = fast_path.conform_ends
    trie_next = fast_path.next
    accepting = fast_path.accepting
    roots = fast_path.roots
    new_open = OpenHandoff
    fixed_order = validator.order is not None
    fixed_root = roots[validator.order] if validator.order is not None else -1
    engine_roots: dict[str | None, int] = {}
    new_handoffs = 0
    last_t = float("-inf")
    out_of_order = 0
    fast = 0
    count = 0
    for count, text in enumerate(lines, 1):
        try:
            obj, end = raw_decode(text)
            if end < len(text) - 1 and text[end:].strip():
                raise ValueError("trailing data")
            h = obj["handoff"]
            t = obj["t_ms"]
            ev = obj["event"]
            th = type(h)
            tt = type(t)
            if ((th is str and h) or th is int) and (tt is float or tt is int) and 0 <= t < inf:
                n = len(obj)
                engine = obj.get("engine")
                if engine is not None:
                    n -= 1
                    if type(engine) is not str:
                        raise TypeError
                if ev in simple:
                    symbol = ev
                    if n != 3 and not _optional_ok(obj):
                        raise TypeError
                elif ev == completion_kind:
                    symbol = completed[obj["detail"]]
                    if n != 4 and not _optional_ok(obj):
                        raise TypeError
                else:
                    raise KeyError
                if tt is int:
                    t = float(t)
                entry = open_get(h)
                if entry is not None:
                    if t >= entry.last_t and (fixed_order or engine is None or engine == entry.engine):
                        child = trie_next[entry.node].get(symbol)
                        if child is not None:
                            # Fast path: a legal step of an open handoff.
                            if t < last_t:
                                out_of_order += 1
                            else:
                                last_t = t
                            if accepting[child]:
                                del open_[h]
                                finished[h] = child
                                conform_ends[child] += 1
                            else:
                                entry.node = child
                                entry.last_t = t
                                entry.last_line = count
                            fast += 1
                            continue
                elif h not in finished:
                    root = fixed_root
                    if root < 0:
                        root = engine_roots.get(engine, -1)
                        if root < 0 and engine is not None:
                            root = _engine_root(roots, engine_roots, engine)
                    if root >= 0:
                        child = trie_next[root].get(symbol)
                        if child is not None:
                            # Fast path: the legal first event of a new handoff.
                            if t < last_t:
                                out_of_order += 1
                            else:
                                last_t = t
                            if accepting[child]:
                                finished[h] = child
                                conform_ends[child] += 1
                            else:
                                open_[h] = new_open(child, t, count, engine)
                            fast += 1
                            new_handoffs += 1
                            continue
                validator.note_time(last_t, out_of_order)
                out_of_order = 0
                problem = feed(count, h, float(t), symbol, engine)
                last_t = validator.last_t
                if problem is not None and not _error(validator, problem, keep_going):
                    break
                continue
        except (ValueError, KeyError, TypeError, RecursionError, AttributeError):
            pass
        # Slow path: blank line, header, or a line with a problem to name precisely.
        parsed = parse_line(text, count)
        if parsed is None:
            if count > 1 and text.strip() and _is_header(text):
                if not _error(validator, LogError(count, HEADER_KEY, "the version header must be the first line"), keep_going):
                    break
            continue
        if isinstance(parsed, LogError):
            if not _error(validator, parsed, keep_going):
                break
            continue
        validator.note_time(last_t, out_of_order)
        out_of_order = 0
        problem = feed(count, parsed.handoff, parsed.t_ms, parsed.symbol, parsed.engine)
        last_t = validator.last_t
        if problem is not None and not _error(validator, problem, keep_going):
            break
    validator.note_time(last_t, out_of_order)
    validator.count_fast(fast, new_handoffs)
    validator.count_lines(count)


def _engine_root(roots: dict[HandoffOrder, int], cache: dict[str | None, int], engine: str) -> int:
    """The trie root of ``engine``'s order, or -1 if the engine is unknown (the slow path says why)."""
    try:
        root = roots[order_for_engine(engine)]
    except ValueError:
        return -1
    cache[engine] = root
    return root


def _optional_ok(obj: dict[str, object]) -> bool:
    """The optional fields present have the schema's types (unknown keys are allowed)."""
    worker = obj.get("worker")
    if worker is not None and type(worker) is not str and type(worker) is not int:
        return False
    tokens = obj.get("tokens")
    if tokens is not None and (type(tokens) is not int or tokens < 0):
        return False
    return True


def _is_header(text: str) -> bool:
    try:
        obj = json.loads(text)
    except ValueError:
        return False
    return isinstance(obj, dict) and HEADER_KEY in obj and "event" not in obj


def _error(validator: Validator, error: LogError, keep_going: bool) -> bool:
    """Record ``error``; True to continue."""
    validator.error(error, abort=not keep_going)
    return keep_going


def check_dynamo_records(lines: Iterable[str], validator: Validator, order: HandoffOrder, *, keep_going: bool) -> None:
    """Validate the reference's per-request records (one handoff per line) under ``order``."""
    validator.track_global_time = False  # records are per request, not in time order
    records: Counter[str] = Counter()  # handed to the validator at the end, not one call per record
    count = 0
    for count, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            if not _error(validator, LogError(count, None, json_error_reason(exc, text)), keep_going):
                break
            continue
        if not isinstance(obj, dict):
            if not _error(validator, LogError(count, None, "expected a JSON object (one record per line)"), keep_going):
                break
            continue
        converted = record_events(obj, count, order)
        if isinstance(converted, LogError):
            if not _error(validator, converted, keep_going):
                break
            continue
        handoff = converted.handoff
        records["records"] += 1
        records[f"records_{converted.status or 'unfinished'}"] += 1
        if not converted.events:
            validator.begin(handoff, count, order)  # e.g. rejected before admission: no timestamps
        for event in converted.events:
            validator.feed_raw(count, handoff, event.t_ms, event.symbol, None)
        for problem in converted.problems:
            _record_problem(validator, handoff, count, problem)
        if converted.status is not None and converted.status != "completed":
            validator.truncate(handoff, converted.status)
    for key, n in records.items():
        validator.count(key, n)
    validator.count_lines(count)


def _record_problem(validator: Validator, handoff: str | int, line: int, problem: RecordProblem) -> None:
    validator.violate(handoff, ViolationKind.DECODE_BEFORE_ACTIVATION, line, problem.t_ms, problem.event, problem.message)


def check_lines(
    lines: Iterable[str], validator: Validator, fmt: LogFormat, *, order: HandoffOrder | None, keep_going: bool
) -> None:
    """Dispatch on the log format (records need an order: they carry no engine)."""
    if fmt is LogFormat.NATIVE:
        check_native(lines, validator, keep_going=keep_going)
        return
    if order is None:
        raise ValueError("dynamo records carry no engine: give --order or --engine")
    check_dynamo_records(lines, validator, order, keep_going=keep_going)


__all__ = ["LogFormat", "check_native", "check_dynamo_records", "check_lines"]
