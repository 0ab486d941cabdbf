"""Reader for Mooncake JSONL traces: one validating pass into flat arrays.

Why flat arrays instead of the parsed rows: the reference parses the whole trace into memory
before replaying it (about 10 KB a request).  We validate every line up front -- so bad input
fails before any simulation work and no report is written -- and keep per row only a few
numbers (lengths, timestamp, delay, next turn, where its hash ids start) plus its hash ids, 8
bytes each, in one ``array('q')``.  A turn is built from those when it is admitted; the file is
read once.  (Re-reading each admitted line from its byte offset kept the ids out of memory, but
cost a seek, a read and a parse per request.)

Rules, after the reference loader (``ai-dynamo/dynamo`` ``lib/mocker/src/loadgen/trace.rs``):

* ``timestamp`` (ms) is rebased so the earliest first turn arrives at 0, then divided by
  ``arrival_speedup_ratio``; so are inter-turn delays.
* ``session_id`` groups turns; a later turn is gated on the previous turn's terminal plus its
  ``delay`` (explicit, or the timestamp difference to the previous turn).  A first turn may not
  carry a non-zero delay.
* ``input_length`` may not exceed ``len(hash_ids) * trace_block_size``.  The reference clamps
  silently; a length the hash ids cannot hold is most likely a broken trace, so here it is an
  error and clamping is opt-in (``clamp_input_length``).
"""

from __future__ import annotations

import json
import math
import os
from array import array
from collections.abc import Iterator
from typing import Any, Final, SupportsIndex

import numpy as np
import numpy.typing as npt
import orjson

from .types import NO_NEXT, SessionStart, Turn, WorkloadError

__all__ = ["MooncakeTrace", "MAX_LENGTH", "MAX_HASH_ID"]

MAX_LENGTH: Final = 1 << 32
"""Largest accepted token length; beyond it the numbers are surely a unit mistake."""
MAX_HASH_ID: Final = (1 << 63) - 1
_SHORT_MAX: Final = (1 << 62) - 1
_ABSENT: Final = object()  # a row field that is not there (null is a value: checked apart)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return (isinstance(value, (int, float))) and not isinstance(value, bool)


def _finite(value: object) -> float | None:
    """``float(value)`` for a finite number that is not a bool, else None.  ``f - f`` is 0
    exactly when ``f`` is finite."""
    if type(value) is float:
        f: float = value
        return f if f - f == 0.0 else None
    if type(value) is int:
        return float(value)
    if not _is_number(value) or not math.isfinite(value):  # type: ignore[arg-type]
        return None
    return float(value)  # type: ignore[arg-type]


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return f"the string {value!r}" if len(value) <= 20 else "a string"
    if isinstance(value, float):
        return f"the float {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return repr(value)


_FLUSH_ROWS = 4096  # rows buffered in lists before they move into the index's arrays

_IntColumns = tuple[tuple["array[int]", list[int]], ...]
_FloatColumns = tuple[tuple["array[float]", list[float]], ...]
_loads: Final = orjson.loads


def _flush(int_columns: _IntColumns, float_columns: _FloatColumns) -> None:
    """Move the buffered rows into the index's arrays (see MooncakeTrace._index)."""
    for col, buf in int_columns:
        col.fromlist(buf)
        buf.clear()
    for fcol, fbuf in float_columns:
        fcol.fromlist(fbuf)
        fbuf.clear()


class MooncakeTrace:
    """An indexed, validated Mooncake trace; implements the ``Workload`` protocol."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        trace_block_size: int = 512,
        arrival_speedup_ratio: float = 1.0,
        clamp_input_length: bool = False,
    ) -> None:
        self._path = os.fspath(path)
        if not _is_int(trace_block_size) or trace_block_size <= 0:
            raise WorkloadError(
                f"must be a positive integer, got {trace_block_size!r}", field="trace_block_size"
            )
        if (
            not _is_number(arrival_speedup_ratio)
            or not math.isfinite(arrival_speedup_ratio)
            or arrival_speedup_ratio <= 0
        ):
            raise WorkloadError(
                f"must be a finite number > 0, got {arrival_speedup_ratio!r}",
                field="arrival_speedup_ratio",
            )
        self._block = trace_block_size
        self._speedup = float(arrival_speedup_ratio)
        self._clamp = clamp_input_length
        self._index()

    # -- Workload protocol ------------------------------------------------------------------

    @property
    def trace_block_size(self) -> int:
        return self._block

    @property
    def num_requests(self) -> int:
        return len(self._input)

    @property
    def path(self) -> str:
        return self._path

    def session_starts(self) -> Iterator[SessionStart]:
        for t, row in zip(self._first_arrival.tolist(), self._first_rows.tolist()):
            yield SessionStart(t, row)

    def load(self, request_id: int) -> Turn:
        # The row index converted once for all its column reads.
        row: SupportsIndex = request_id
        input_length = self._input[row]
        lo = self._id_start[row]
        hi = self._id_start[request_id + 1]
        if self._clamp:
            hi = min(hi, lo - (-input_length // self._block))
        return Turn(
            request_id,
            input_length,
            self._output[row],
            tuple(self._ids[lo:hi]),  # validated when indexed: exact ints in [0, 2^63)
            self._delay[row],
            self._next[row],
            self._session[row],
            self._turn[row],
        )

    def delay_of(self, request_id: int) -> float:
        return self._delay[request_id]

    # -- validate and index -------------------------------------------------------

    def _err(self, line: int | None, field: str | None, message: str) -> WorkloadError:
        return WorkloadError(message, path=self._path, line=line, field=field)

    def _index(self) -> None:
        # Per-row columns.  Rows go to plain lists first, moved into the arrays every
        # _FLUSH_ROWS rows so the lists never hold more than that many Python ints.
        ids = array("q")  # every row's hash ids, row after row
        id_start = array("q")  # where each row's ids start in ``ids`` (one more at the end)
        inputs = array("q")
        outputs = array("q")
        delays = array("d")  # raw delay before speed-up
        sessions = array("q")
        turns = array("q")
        b_start: list[int] = []
        b_in: list[int] = []
        b_out: list[int] = []
        b_delay: list[float] = []
        b_session: list[int] = []
        b_turn: list[int] = []
        first_rows = array("q")  # the first turn of each session: its row and timestamp
        first_ts = array("d")
        b_first_rows: list[int] = []
        b_first_ts: list[float] = []
        int_columns: _IntColumns = (
            (id_start, b_start), (inputs, b_in), (outputs, b_out), (sessions, b_session), (turns, b_turn),
            (first_rows, b_first_rows),
        )
        float_columns: _FloatColumns = ((delays, b_delay), (first_ts, b_first_ts))
        # a later turn's row -> its predecessor's row (the ``next`` column is filled at the end)
        link_from: list[int] = []
        link_to: list[int] = []
        session_of: dict[object, int] = {}
        session_last_row: list[int] = []
        session_last_ts: list[float] = []
        session_turns: list[int] = []

        try:
            fh = open(self._path, "rb")
        except FileNotFoundError:
            raise self._err(None, None, "no such trace file") from None
        except IsADirectoryError:
            raise self._err(None, None, "is a directory, not a trace file") from None
        except OSError as exc:
            raise self._err(None, None, f"cannot open trace file: {exc.strerror}") from None

        with fh:
            lineno = 0
            for raw_line in fh:
                lineno += 1
                row = self._parse_line(raw_line, lineno)
                if row is None:  # a blank line
                    continue
                ts, delay, sid, input_length, output_length = self._check_row(row, lineno)
                row_idx = len(inputs) + len(b_in)
                if sid is None:
                    session = len(session_last_row)
                    session_last_row.append(row_idx)
                    session_last_ts.append(math.nan if ts is None else ts)
                    session_turns.append(1)
                    turn_index = 0
                else:
                    key = sid
                    found = session_of.get(key)
                    if found is None:
                        session = len(session_last_row)
                        session_of[key] = session
                        session_last_row.append(row_idx)
                        session_last_ts.append(math.nan if ts is None else ts)
                        session_turns.append(1)
                        turn_index = 0
                    else:
                        session = found
                        turn_index = session_turns[session]
                        session_turns[session] += 1
                        link_from.append(session_last_row[session])
                        link_to.append(row_idx)
                        session_last_row[session] = row_idx
                if turn_index == 0:
                    if delay is not None and delay != 0.0:
                        raise self._err(
                            lineno,
                            "delay",
                            f"the first turn of a session may not carry a delay (got {delay!r})",
                        )
                    if ts is None:
                        raise self._err(lineno, "timestamp", "missing (required on a first turn)")
                    delay_value = 0.0
                    b_first_rows.append(row_idx)
                    b_first_ts.append(ts)
                elif delay is not None:
                    delay_value = delay
                else:
                    prev_ts = session_last_ts[session]
                    if ts is None:
                        raise self._err(
                            lineno, "timestamp", "missing, and no 'delay' given for this later turn"
                        )
                    delay_value = ts - prev_ts
                    if delay_value < 0:
                        raise self._err(
                            lineno,
                            "timestamp",
                            f"{ts!r} is earlier than the previous turn of the session "
                            f"({prev_ts!r}); the inferred delay would be negative",
                        )
                if ts is not None:
                    session_last_ts[session] = ts
                b_start.append(len(ids))
                ids.fromlist(row["hash_ids"])  # straight into the array: no Python ints kept
                b_in.append(input_length)
                b_out.append(output_length)
                b_delay.append(delay_value)
                b_session.append(session)
                b_turn.append(turn_index)
                if len(b_in) >= _FLUSH_ROWS:
                    _flush(int_columns, float_columns)
            _flush(int_columns, float_columns)

        if len(inputs) == 0:
            raise self._err(
                None, None, "the trace is empty (no JSON lines)" if lineno == 0 else
                "the trace has no requests (only blank lines)"
            )

        # Per-row numbers stay in the stdlib arrays: indexing one gives a Python number at once
        # (a turn is loaded per request), a numpy array a numpy scalar to convert.
        id_start.append(len(ids))
        self._ids = ids
        self._id_start = id_start
        self._input = inputs
        self._output = outputs
        if self._speedup != 1.0:
            delays = array("d", (np.frombuffer(delays, dtype=np.float64) / self._speedup).tobytes())
        self._delay = delays
        nexts = array("q", [NO_NEXT]) * len(inputs)
        if link_from:
            np.frombuffer(nexts, dtype=np.int64)[np.array(link_from, dtype=np.int64)] = link_to
        self._next = nexts
        self._session = sessions
        self._turn = turns
        fr = np.frombuffer(first_rows, dtype=np.int64)
        ft = np.frombuffer(first_ts, dtype=np.float64)
        base = float(ft.min())
        arrival = (ft - base) / self._speedup
        order = np.lexsort((fr, arrival))
        self._first_rows: npt.NDArray[np.int64] = fr[order].copy()
        self._first_arrival: npt.NDArray[np.float64] = arrival[order].copy()

    def _parse_line(self, raw_line: bytes, lineno: int) -> dict[str, Any] | None:
        """The line's JSON object; None for a blank line (tested only when the parse fails, so
        a line costs no strip())."""
        try:
            # orjson for speed; what it refuses (malformed lines, but also NaN or integers beyond
            # 64 bits, which json reads and the checks below reject by field) goes to json, for
            # its messages.
            row = _loads(raw_line)
        except orjson.JSONDecodeError:
            if not raw_line.strip():
                return None
            row = self._parse_slow(raw_line, lineno)
        if not isinstance(row, dict):
            raise self._err(lineno, None, f"expected a JSON object, got {_kind(row)}")
        return row

    def _parse_slow(self, raw_line: bytes, lineno: int) -> Any:
        try:
            return json.loads(raw_line)
        except UnicodeDecodeError:
            raise self._err(lineno, None, "not UTF-8 text") from None
        except json.JSONDecodeError as exc:
            # The decoder stopping at the very end of the line means the record was cut short
            # (a partial last line of a file still being written, or a broken copy).
            truncated = exc.pos >= len(raw_line.rstrip())
            if truncated:
                raise self._err(
                    lineno, None, f"truncated JSON record ({exc.msg} at column {exc.colno})"
                ) from None
            raise self._err(lineno, None, f"malformed JSON: {exc.msg} at column {exc.colno}") from None

    def _length(self, row: dict[str, Any], lineno: int, field: str, minimum: int) -> int:
        value: Any = row.get(field, _ABSENT)
        if type(value) is int:  # what JSON gives
            length: int = value
            if minimum <= length <= MAX_LENGTH:
                return length
        if value is _ABSENT:
            raise self._err(lineno, field, "missing")
        if not _is_int(value):
            raise self._err(lineno, field, f"must be an integer, got {_kind(value)}")
        if value < minimum:
            raise self._err(lineno, field, f"must be >= {minimum}, got {value}")
        if value > MAX_LENGTH:
            raise self._err(lineno, field, f"{value} is implausibly large (limit {MAX_LENGTH})")
        return int(value)

    def _check_row(
        self, row: dict[str, Any], lineno: int
    ) -> tuple[float | None, float | None, object, int, int]:
        # (``row.get``: one lookup per field, a native dict call here; a field set to null counts
        # as absent)
        ts: float | None = None
        value = row.get("timestamp")
        if value is not None:
            ts = _finite(value)
            if ts is None:
                raise self._err(lineno, "timestamp", f"must be a finite number of ms, got {_kind(value)}")
        delay: float | None = None
        value = row.get("delay")
        if value is not None:
            delay = _finite(value)
            if delay is None or delay < 0:
                raise self._err(lineno, "delay", f"must be a finite number >= 0 ms, got {_kind(value) if not _is_number(value) else value!r}")
        sid: object = None
        value = row.get("session_id")
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, (str, int)):
                raise self._err(lineno, "session_id", f"must be a string or an integer, got {_kind(value)}")
            sid = ("s", value) if isinstance(value, str) else ("i", value)
        input_length = self._length(row, lineno, "input_length", 1)
        output_length = self._length(row, lineno, "output_length", 1)
        hash_ids: Any = row.get("hash_ids", _ABSENT)
        if hash_ids is _ABSENT:
            raise self._err(lineno, "hash_ids", "missing")
        if not isinstance(hash_ids, list):
            raise self._err(lineno, "hash_ids", f"must be a list of integers, got {_kind(hash_ids)}")
        for i, h in enumerate(hash_ids):
            # ``type(h) is int`` first (what JSON gives), then the range on a typed local
            if type(h) is int:
                hv: int = h
                # the short bound first: almost every id is below it
                if 0 <= hv <= _SHORT_MAX or 0 <= hv <= MAX_HASH_ID:
                    continue
            raise self._err(
                lineno, f"hash_ids[{i}]", f"must be an integer in [0, 2^63), got {_kind(h) if not _is_int(h) else h}"
            )
        capacity = len(hash_ids) * self._block
        if input_length > capacity:
            if self._clamp and capacity > 0:
                input_length = capacity
            else:
                raise self._err(
                    lineno,
                    "input_length",
                    f"{input_length} exceeds the hash_ids capacity {capacity} "
                    f"({len(hash_ids)} hash_ids x trace_block_size {self._block})",
                )
        return ts, delay, sid, input_length, output_length
