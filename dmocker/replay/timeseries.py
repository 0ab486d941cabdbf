"""Time series of one replay, recorded only when asked (the configuration's ``outputs.timeseries``).

Why this shape:

* **Zero cost when off.** The runtime holds ``None`` and tests it once per distinct timestamp,
  in its clock loop -- nothing in the per-event paths.
* **Bounded memory.** Values live in fixed virtual-time buckets of ``bucket_ms``; when a series
  would exceed ``max_points`` buckets the width doubles and neighbouring buckets merge (gauges
  keep the even samples, counters add), so a 1M-request run holds at most ``max_points`` rows
  per series whatever its length.  The final width depends only on the run's duration, so the
  output stays deterministic.
* **Open for more series.** Two kinds, each a named series with labelled columns:

  - *gauges* (:meth:`TimeSeriesRecorder.add_gauge`): a probe returning ``(label, value)`` pairs,
    sampled at every bucket boundary (the state holding at that instant).  Labels may appear
    later (e.g. workers added by a planner); earlier rows read NaN for them.
  - *counters* (:meth:`TimeSeriesRecorder.count`): events added into the bucket of their time
    (e.g. failures by cause).

  The HTML report renders the series it knows by name (:data:`KNOWN_SERIES`) in their own
  sections -- ``workers`` (a planner's worker counts per pool) and ``failures`` (counts by
  cause) appear only when recorded -- and any other series in a generic section.

Per-request series (TTFT / ITL / E2E distributions, completions per second) come from the
collector's arrays after the run (:func:`finish`), not from sampling.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from .collector import Collector, TerminalStatus

__all__ = ["TimeSeriesRecorder", "TimeSeries", "Series", "KNOWN_SERIES", "finish", "CDF_POINTS", "add_standard_gauges"]

F64 = npt.NDArray[np.float64]

#: Series names the HTML report places in their own sections (title, y label).
KNOWN_SERIES: dict[str, tuple[str, str]] = {
    "in_flight": ("Requests in flight", "requests"),
    "queue_depth": ("Queue depth per pool", "queued requests"),
    "kv_usage": ("KV usage per worker", "share of KV blocks in use"),
    "workers": ("Worker counts", "workers"),
    "failures": ("Failures by cause", "failures per bucket"),
}

CDF_POINTS = 1001  # quantiles kept per latency distribution (0.1 % steps)

Probe = Callable[[], Sequence[tuple[str, float]]]


class _Table:
    """One named series: ``rows x labels`` float64, rows = buckets; grows by doubling."""

    __slots__ = ("name", "counter", "labels", "index", "data", "rows")

    def __init__(self, name: str, counter: bool) -> None:
        self.name = name
        self.counter = counter
        self.labels: list[str] = []
        self.index: dict[str, int] = {}
        self.data = np.full((64, 0), np.nan if not counter else 0.0, dtype=np.float64)
        self.rows = 0

    def column(self, label: str) -> int:
        col = self.index.get(label)
        if col is None:
            col = len(self.labels)
            self.labels.append(label)
            self.index[label] = col
            fill = 0.0 if self.counter else np.nan
            self.data = np.concatenate([self.data, np.full((self.data.shape[0], 1), fill)], axis=1)
        return col

    def ensure_rows(self, n: int) -> None:
        if n > self.data.shape[0]:
            cap = max(n, self.data.shape[0] * 2)
            fill = 0.0 if self.counter else np.nan
            grown = np.full((cap, self.data.shape[1]), fill, dtype=np.float64)
            grown[: self.data.shape[0]] = self.data
            self.data = grown
        self.rows = max(self.rows, n)

    def halve(self) -> None:
        """Merge bucket pairs: gauges keep the sample at the even boundary, counters add."""
        n = self.rows
        if self.counter:
            pad = n + (n % 2)
            self.ensure_rows(pad)
            merged = self.data[0:pad:2] + self.data[1:pad:2]
        else:
            merged = self.data[0:n:2].copy()
        fill = 0.0 if self.counter else np.nan
        self.data = np.full_like(self.data, fill)
        self.data[: merged.shape[0]] = merged
        self.rows = merged.shape[0]


class TimeSeriesRecorder:
    """Collects gauges and counters in fixed virtual-time buckets (see the module docstring)."""

    def __init__(self, *, bucket_ms: float = 100.0, max_points: int = 1024) -> None:
        if not (bucket_ms > 0 and math.isfinite(bucket_ms)):
            raise ValueError(f"bucket_ms must be > 0, got {bucket_ms!r}")
        if max_points < 4:
            raise ValueError(f"max_points must be >= 4, got {max_points!r}")
        self.bucket_ms = float(bucket_ms)
        self.max_points = max_points
        self.next_ms = 0.0  # the next bucket boundary not sampled yet (the runtime tests this)
        self._next_row = 0
        self._gauges: list[tuple[_Table, Probe]] = []
        self._tables: dict[str, _Table] = {}

    # --- registration (before the run) ---------------------------------------------------------

    def add_gauge(self, name: str, probe: Probe) -> None:
        """Sample ``probe`` (``(label, value)`` pairs) at every bucket boundary under ``name``."""
        if name in self._tables:
            raise ValueError(f"series {name!r} is already recorded")
        table = _Table(name, counter=False)
        self._tables[name] = table
        self._gauges.append((table, probe))

    def count(self, name: str, label: str, t_ms: float, n: float = 1.0) -> None:
        """Add ``n`` events of ``label`` at virtual time ``t_ms`` to counter ``name``."""
        table = self._tables.get(name)
        if table is None:
            table = self._tables[name] = _Table(name, counter=True)
        elif not table.counter:
            raise ValueError(f"series {name!r} is a gauge")
        row = int(t_ms // self.bucket_ms) if t_ms > 0 else 0
        while row >= self.max_points:
            self._coarsen()
            row = int(t_ms // self.bucket_ms) if t_ms > 0 else 0
        col = table.column(label)  # may widen table.data: index after it
        table.ensure_rows(row + 1)
        table.data[row, col] += n

    # --- sampling (called by the runtime) ------------------------------------------------------

    def sample_until(self, t_ms: float) -> None:
        """The clock is about to jump to ``t_ms``: sample every boundary before it.

        The state seen now holds on ``[previous time, t_ms)``, so it is the state at each of
        those boundaries.
        """
        while self.next_ms < t_ms:
            row = self._next_row
            if row >= self.max_points:
                self._coarsen()
                continue
            for table, probe in self._gauges:
                table.ensure_rows(row + 1)
                for label, value in probe():
                    col = table.column(label)  # may widen table.data: index after it
                    table.data[row, col] = value
            self._next_row = row + 1
            self.next_ms = self._next_row * self.bucket_ms

    def close(self, end_ms: float) -> None:
        """The run ended at ``end_ms``: the final state holds from then on, so it is the sample
        of every remaining boundary up to and including the first one at or after ``end_ms``."""
        self.sample_until(end_ms + self.bucket_ms)

    def _coarsen(self) -> None:
        self.bucket_ms *= 2.0
        for table in self._tables.values():
            table.halve()
        self._next_row = (self._next_row + 1) // 2
        self.next_ms = self._next_row * self.bucket_ms

    # --- result ----------------------------------------------------------------------------------

    def series(self) -> dict[str, Series]:
        out: dict[str, Series] = {}
        for name, table in self._tables.items():
            out[name] = Series(name, tuple(table.labels), table.data[: table.rows].copy(), table.counter)
        return out


@dataclass(frozen=True)
class Series:
    """A finished series: ``values[row, column]`` for bucket ``row`` and label ``labels[column]``."""

    name: str
    labels: tuple[str, ...]
    values: F64
    counter: bool


@dataclass(frozen=True)
class TimeSeries:
    """What the HTML report draws: bucketed series plus per-request distributions."""

    bucket_ms: float
    duration_ms: float
    series: dict[str, Series]
    completions_per_s: F64  # completed requests per second, per bucket
    output_tokens_per_s: F64  # tokens of completed requests per second, by completion bucket
    cdfs: dict[str, F64] = field(default_factory=dict)  # metric -> CDF_POINTS quantiles (ms)

    def times_s(self, rows: int) -> F64:
        """Bucket start times in seconds for ``rows`` buckets."""
        return np.arange(rows, dtype=np.float64) * (self.bucket_ms / 1000.0)


def _quantiles(samples: F64) -> F64:
    if samples.shape[0] == 0:
        return np.zeros(0, dtype=np.float64)
    s = np.sort(samples, kind="stable")
    idx = np.floor((s.shape[0] - 1) * np.linspace(0.0, 1.0, CDF_POINTS) + 0.5).astype(np.int64)
    out: F64 = s[idx]
    return out


def finish(recorder: TimeSeriesRecorder, collector: Collector, end_ms: float) -> TimeSeries:
    """Close the recorder and add the per-request series computed from the collector."""
    recorder.close(end_ms)
    bucket = recorder.bucket_ms
    rows = max(1, int(math.ceil(end_ms / bucket)) if end_ms > 0 else 1)
    while rows > recorder.max_points:  # keep the throughput series on the gauges' grid
        recorder._coarsen()
        bucket = recorder.bucket_ms
        rows = max(1, int(math.ceil(end_ms / bucket)))
    tokens = collector.tokens.astype(np.int64)
    last = collector.last_token
    arrived = ~np.isnan(collector.arrival)
    completed = arrived & (collector.status == TerminalStatus.COMPLETED) & collector.first_admitted
    done_at = last[completed & (tokens > 0)]
    edges = np.arange(rows + 1, dtype=np.float64) * bucket
    edges[-1] = max(edges[-1], end_ms) + 1e-9
    per_s = 1000.0 / bucket
    completions = np.histogram(done_at, bins=edges)[0].astype(np.float64) * per_s
    out_tokens = np.histogram(done_at, bins=edges, weights=tokens[completed & (tokens > 0)])[0] * per_s
    with_tok = completed & (tokens > 0)
    cdfs: dict[str, F64] = {
        "ttft": _quantiles((collector.first_token - collector.arrival)[with_tok]),
        "e2e": _quantiles((last - collector.arrival)[with_tok]),
    }
    collector.gaps.itl_stats()  # folds staged gaps into the sketch
    itl = collector.gaps.itl
    n = int(itl.count)
    if n > 0:
        ranks = np.floor((n - 1) * np.linspace(0.0, 1.0, CDF_POINTS) + 0.5).astype(np.int64)
        cdfs["itl"] = np.array([itl.quantile_at_rank(int(r)) for r in ranks], dtype=np.float64)
    else:
        cdfs["itl"] = np.zeros(0, dtype=np.float64)
    return TimeSeries(bucket, end_ms, recorder.series(), completions, out_tokens.astype(np.float64), cdfs)


def add_standard_gauges(
    recorder: TimeSeriesRecorder,
    in_flight: Callable[[], int],
    prefill: Sequence[object],
    decode: Sequence[object],
) -> None:
    """Requests in flight, queue depth per pool and KV usage per worker.

    ``prefill`` / ``decode`` are the runtime's worker lists (read at every sample, so workers
    added later appear as new columns); workers without the probes are skipped.
    """
    from dmocker.engines.interface import WorkerProbes

    def depth(workers: Sequence[object]) -> float:
        return float(sum(w.queue_depth() for w in workers if isinstance(w, WorkerProbes)))

    recorder.add_gauge("in_flight", lambda: (("requests", float(in_flight())),))
    recorder.add_gauge("queue_depth", lambda: (("prefill", depth(prefill)), ("decode", depth(decode))))

    def kv() -> list[tuple[str, float]]:
        # Sampled at boundary ``recorder.next_ms``, ahead of the runtime's clock: a bulk decode
        # run in flight then holds blocks of passes the per-pass simulation has not started yet,
        # which kv_usage(at) leaves out (queue depth and in-flight counts do not change inside
        # a run: nothing joins, waits or finishes in one).
        at = recorder.next_ms
        out: list[tuple[str, float]] = []
        for role, workers in (("prefill", prefill), ("decode", decode)):
            for i, w in enumerate(workers):
                if isinstance(w, WorkerProbes):
                    out.append((f"{role}-{i}", w.kv_usage(at)))
        return out

    recorder.add_gauge("kv_usage", kv)
