"""Readers for the public CSV traces that give arrival times and token counts, but no prompt
content: the Azure LLM inference traces and BurstGPT.

* **Azure LLM inference traces**, 2023 (Splitwise) and 2024 (DynamoLLM), in
  `Azure/AzurePublicDataset` (`data/AzureLLMInferenceTrace_{code,conv}.csv` and the
  `*_1week.csv` files): columns ``TIMESTAMP,ContextTokens,GeneratedTokens``; ``TIMESTAMP`` is
  a wall-clock time such as ``2023-11-16 18:15:46.6805900`` (up to 100 ns ticks, optionally a
  ``Z`` or ``+HH:MM`` offset).
* **BurstGPT** (`HPMLL/BurstGPT`, ``BurstGPT_*.csv``): columns include ``Timestamp`` (seconds
  from the trace's start), ``Request tokens`` and ``Response tokens`` (and ``Model``, ``Total
  tokens``, ``Log Type``, which are not read).

Each row is one single-turn request arriving at its timestamp, rebased so the first row arrives
at 0 and divided by ``arrival_speedup_ratio``. The file must be in time order, as the
published traces are: a row earlier than the one before it is an error. Without prompt
content there is no prefix to share: each request's blocks get hash ids of their own, so
nothing is reused from the prefix cache (docs/replay.md, inputs). A row with 0 output tokens
(BurstGPT lists failed requests so) produced nothing to decode and is not replayed.

Memory stays flat in the trace's length. One pass over the file checks every row before the
run, so bad input fails before any simulation and no report is written. A second pass during
the run yields the arrivals and keeps only the rows the admission queue has looked ahead to.
"""

from __future__ import annotations

import csv
import datetime
import os
import re
from collections.abc import Iterator, Sequence
from typing import Final, TextIO

from .formats import CSV_FORMATS, TraceFormat
from .mooncake import MAX_LENGTH
from .types import NO_NEXT, SessionStart, Turn, WorkloadError

__all__ = ["CsvTrace"]

_TICKS_PER_S: Final = 10_000_000  # Azure's timestamps resolve 100 ns
_WALL_CLOCK = re.compile(
    r"(\d{4}-\d{2}-\d{2})[ T](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:?\d{2})?")
_HASH_STRIDE: Final = 1 << 32  # hash ids of request r: r * stride + block index (all distinct)


class CsvTrace:
    """An Azure or BurstGPT CSV trace as a :class:`~dmocker.replay.workload.types.Workload`."""

    def __init__(self, path: str | os.PathLike[str], fmt: TraceFormat, *, trace_block_size: int = 512,
                 arrival_speedup_ratio: float = 1.0) -> None:
        if fmt not in CSV_FORMATS:
            raise ValueError(f"CsvTrace reads {', '.join(f.value for f in CSV_FORMATS)}, not {fmt.value}")
        self._path = os.fspath(path)
        self._format = CSV_FORMATS[fmt]
        self._block = trace_block_size
        self._speedup = float(arrival_speedup_ratio)
        self._pending: dict[int, tuple[int, int]] = {}  # looked-ahead rows: id -> (input, output)
        self._file: TextIO | None = None
        self._start: float = 0
        self._count = 0
        for _ in self._rows():  # the checking pass: counts the requests, finds the first time
            self._count += 1
        if not self._count:
            raise WorkloadError("no requests to replay (a header only, or no row with output tokens)",
                                path=self._path)

    @property
    def trace_block_size(self) -> int:
        return self._block

    @property
    def num_requests(self) -> int:
        return self._count

    def session_starts(self) -> Iterator[SessionStart]:
        pending = self._pending
        scale = self._speedup * (_TICKS_PER_S / 1000.0 if self._format.wall_clock else 1e-3)
        for rid, (t, inp, out) in enumerate(self._rows()):
            pending[rid] = (inp, out)
            yield SessionStart((t - self._start) / scale, rid)

    def load(self, request_id: int) -> Turn:
        inp, out = self._pending.pop(request_id)
        n_ids = -(-inp // self._block)
        base = request_id * _HASH_STRIDE
        return Turn(request_id, inp, out, tuple(range(base, base + n_ids)), 0.0, NO_NEXT, request_id, 0)

    def delay_of(self, request_id: int) -> float:
        return 0.0  # every request is a session of one turn

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    # ------------------------------------------------------------------ reading

    def _rows(self) -> Iterator[tuple[float, int, int]]:
        """(time, input tokens, output tokens) of each request, checked, in file order; the time
        in 100 ns ticks (Azure) or seconds (BurstGPT).  Rows with no output tokens are left out."""
        fmt = self._format
        self.close()
        try:
            fh = open(self._path, encoding="utf-8", newline="")
        except OSError as exc:
            raise WorkloadError(f"cannot read the trace: {exc.strerror or exc}", path=self._path) from None
        self._file = fh
        reader = csv.reader(fh)
        try:
            header = next(reader, None)
            if header is None:
                raise WorkloadError("the trace is empty", path=self._path)
            cols = self._columns(header)
            width = max(cols) + 1
            prev: float | None = None
            kept = 0
            for row in reader:
                line = reader.line_num
                if not row or (len(row) == 1 and not row[0].strip()):
                    continue
                if len(row) < width:
                    raise WorkloadError(f"{len(row)} columns, the header names {len(header)}", path=self._path,
                                        line=line)
                t = self._time(row[cols[0]], line)
                if prev is not None and t < prev:
                    raise WorkloadError(f"{row[cols[0]].strip()!r} is earlier than the row before: the trace "
                                        "must be in time order", path=self._path, line=line, field=fmt.timestamp)
                prev = t
                out = self._count_of(row[cols[2]], line, fmt.output_tokens, 0)
                if not out:
                    continue
                inp = self._count_of(row[cols[1]], line, fmt.input_tokens, 1)
                if not kept:
                    self._start = t  # the first request replayed arrives at 0
                kept += 1
                yield t, inp, out
        except UnicodeDecodeError:
            raise WorkloadError("not a UTF-8 text file", path=self._path) from None
        except csv.Error as exc:
            raise WorkloadError(f"not CSV: {exc}", path=self._path, line=reader.line_num) from None
        finally:
            self.close()

    def _columns(self, header: Sequence[str]) -> tuple[int, int, int]:
        names = [h.strip().lstrip("\ufeff") for h in header]
        fmt = self._format
        out = []
        for col in (fmt.timestamp, fmt.input_tokens, fmt.output_tokens):
            if col not in names:
                raise WorkloadError(f"the header has no column {col!r} (a {fmt.name} trace has "
                                    f"{fmt.timestamp}, {fmt.input_tokens}, {fmt.output_tokens})",
                                    path=self._path, line=1)
            out.append(names.index(col))
        return out[0], out[1], out[2]

    def _time(self, text: str, line: int) -> float:
        fmt = self._format
        text = text.strip()
        if not fmt.wall_clock:
            try:
                value = float(text)
            except ValueError:
                value = float("nan")
            if not value - value == 0.0 or value < 0:
                raise WorkloadError(f"must be a non-negative number of seconds, got {text!r}", path=self._path,
                                    line=line, field=fmt.timestamp)
            return value
        m = _WALL_CLOCK.fullmatch(text)
        if m is None:
            raise WorkloadError(f"must be a date and time like 2023-11-16 18:15:46.6805900, got {text!r}",
                                path=self._path, line=line, field=fmt.timestamp)
        date, hh, mm, ss, frac, zone = m.groups()
        try:
            day = datetime.date.fromisoformat(date).toordinal()
        except ValueError:
            raise WorkloadError(f"no such date: {text!r}", path=self._path, line=line, field=fmt.timestamp) from None
        seconds = ((day * 24 + int(hh)) * 60 + int(mm)) * 60 + int(ss)
        if zone and zone != "Z":
            sign = -1 if zone[0] == "-" else 1
            digits = zone[1:].replace(":", "")
            seconds -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
        ticks = int((frac or "")[:7].ljust(7, "0"))  # beyond 100 ns: cut (the traces stop there)
        # an exact integer (ticks since year 1 need more than a double's 53 bits)
        return seconds * _TICKS_PER_S + ticks

    def _count_of(self, text: str, line: int, field: str, minimum: int) -> int:
        text = text.strip()
        if text.isascii() and text.isdigit():  # (isdigit alone takes "²", which int() refuses)
            value = int(text)
            if minimum <= value <= MAX_LENGTH:
                return value
            if value > MAX_LENGTH:
                raise WorkloadError(f"{value} is implausibly large (limit {MAX_LENGTH})", path=self._path,
                                    line=line, field=field)
        raise WorkloadError(f"must be an integer >= {minimum}, got {text!r}", path=self._path, line=line, field=field)
