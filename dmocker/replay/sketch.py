"""Streaming distribution sketches of the collector: inter-token gaps and their rates.

:class:`LogSketch` is a DDSketch-style log-bucket histogram (0.1 % relative error, as the
reference) with exact count, sum, sum of squares, min and max; :class:`GapSketches` stages the
gaps of decode passes (plain, or one gap shared by a whole batch with its weight) and folds them
into the ITL and per-user-rate sketches in bulk, so a pass costs O(1) numpy calls at most.
:class:`DistributionStats` is the summary both these and exact sample arrays report.
Split from :mod:`dmocker.replay.collector`, which re-exports these names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .exact_sum import ExactSum

__all__ = ["LogSketch", "GapSketches", "DistributionStats", "nearest_rank", "PERCENTILES"]

F64 = npt.NDArray[np.float64]

# Values well inside LogSketch's bucket range (1e-6 to 1e9): their buckets need no clipping.
_INSIDE_LO = 2e-6
_INSIDE_HI = 5e8


def nearest_rank(n: int, p: float) -> int:
    """Index of percentile ``p`` among ``n`` sorted samples: round half up of (n-1)p/100."""
    return int(math.floor((n - 1) * p / 100.0 + 0.5))


PERCENTILES = (("median", 50.0), ("p75", 75.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0))


@dataclass(frozen=True, slots=True)
class DistributionStats:
    """mean, min, max, median, p75, p90, p95, p99, std (population) of one metric."""

    count: int
    mean: float
    min: float
    max: float
    median: float
    p75: float
    p90: float
    p95: float
    p99: float
    std: float

    @staticmethod
    def empty() -> DistributionStats:
        return DistributionStats(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)

    @staticmethod
    def exact(samples: F64) -> DistributionStats:
        n = int(samples.shape[0])
        if n == 0:
            return DistributionStats.empty()
        s = np.sort(samples, kind="stable")
        q = [float(s[nearest_rank(n, p)]) for _, p in PERCENTILES]
        mean = float(np.mean(s))
        return DistributionStats(
            n, mean, float(s[0]), float(s[-1]), q[0], q[1], q[2], q[3], q[4], float(np.std(s))
        )

    def items(self, prefix: str, suffix: str) -> dict[str, float]:
        return {
            f"mean_{prefix}{suffix}": self.mean,
            f"min_{prefix}{suffix}": self.min,
            f"max_{prefix}{suffix}": self.max,
            f"median_{prefix}{suffix}": self.median,
            f"p75_{prefix}{suffix}": self.p75,
            f"p90_{prefix}{suffix}": self.p90,
            f"p95_{prefix}{suffix}": self.p95,
            f"p99_{prefix}{suffix}": self.p99,
            f"std_{prefix}{suffix}": self.std,
        }


class LogSketch:
    """A DDSketch-style histogram over positive values with bounded relative error.

    Bucket ``i`` holds values in ``(gamma^(i-1), gamma^i]`` with
    ``gamma = (1 + a) / (1 - a)``; its representative ``2 gamma^i / (gamma + 1)`` is within
    relative error ``a`` of every value in it.  Zeros are counted apart.  Buckets are a dense
    array over a fixed index range (1e-6 to 1e9; values outside are clamped to the ends,
    whose exact min and max are kept), so adding a batch is one
    ``bincount``.  Count, sum, sum of squares, min and max are exact; the sums are of the
    float products ``value * weight`` and ``value * value * weight``, accumulated exactly
    (:class:`ExactSum`), so they do not depend on the order of the additions.
    """

    __slots__ = (
        "_a", "_log_gamma", "_gamma", "_lo", "_counts", "_buf", "_fill", "_weighted",
        "count", "zeros", "_total", "_total_sq", "min", "max",
    )

    _BUFFER = 1 << 16

    def __init__(self, relative_accuracy: float = 0.001) -> None:
        self._a = relative_accuracy
        self._gamma = (1 + relative_accuracy) / (1 - relative_accuracy)
        self._log_gamma = math.log(self._gamma)
        self._lo = int(math.floor(math.log(1e-6) / self._log_gamma))
        hi = int(math.ceil(math.log(1e9) / self._log_gamma))
        self._counts = np.zeros(hi - self._lo + 1, dtype=np.int64)
        # Values are staged in a fixed buffer and folded in bulk: one bincount per 64k
        # values keeps the per-pass cost O(batch) instead of O(number of buckets).
        self._buf = np.empty(self._BUFFER, dtype=np.float64)
        self._fill = 0
        self._weighted: dict[int, int] = {}  # bucket -> count from add_weighted, folded lazily
        self.count = 0
        self.zeros = 0
        self._total = ExactSum()
        self._total_sq = ExactSum()
        self.min = math.inf
        self.max = -math.inf

    def add_many(self, values: F64) -> None:
        n = int(values.shape[0])
        if n == 0:
            return
        fill = self._fill
        if fill + n > self._BUFFER:
            self._flush()
            fill = 0
            if n > self._BUFFER:
                self._fold(values)
                return
        self._buf[fill:fill + n] = values
        self._fill = fill + n

    @property
    def total(self) -> float:
        """Sum of the values (correctly rounded)."""
        return self._total.value()

    @property
    def total_sq(self) -> float:
        """Sum of the squared values (each square rounded, the sum correctly rounded)."""
        return self._total_sq.value()

    def add_weighted_many(self, values: F64, weights: npt.NDArray[np.int64] | int) -> None:
        """:meth:`add_weighted` of each value with its weight (or one weight for all), at once."""
        n = int(values.shape[0])
        if n == 0:
            return
        w_arr = np.broadcast_to(np.asarray(weights, dtype=np.int64), values.shape)
        self.count += int(w_arr.sum())
        self._total.add_many(values * w_arr)
        self._total_sq.add_many(values * values * w_arr)
        vmin = float(values.min())
        vmax = float(values.max())
        if vmin < self.min:
            self.min = vmin
        if vmax > self.max:
            self.max = vmax
        if vmin > 0.0:  # the usual case: no zero to count apart, no mask to apply
            pos = values
            w_pos = w_arr
        else:
            positive = values > 0.0
            pos = values[positive]
            if pos.shape[0] < n:
                self.zeros += int(w_arr[~positive].sum())
            w_pos = w_arr[positive]
        if pos.shape[0]:
            # The bucket add_weighted computes, ceil(math.log(v) / log_gamma), vectorised:
            # numpy's log may differ from math.log in the last bit, which can move a quotient
            # across an integer only when it is within ~1e-12 of one; those few are recomputed
            # with math.log, so every value lands in the same bucket as one by one.
            x = np.log(pos) / self._log_gamma
            idx = np.ceil(x)
            near = np.flatnonzero(np.abs(x - np.rint(x)) < 1e-7)
            if near.shape[0]:
                lg = self._log_gamma
                for j, v in zip(near.tolist(), pos[near].tolist()):
                    idx[j] = math.ceil(math.log(v) / lg)
            buckets = idx.astype(np.int64) - self._lo
            if not (_INSIDE_LO <= vmin and vmax <= _INSIDE_HI):
                np.clip(buckets, 0, self._counts.shape[0] - 1, out=buckets)
            np.add.at(self._counts, buckets, w_pos)

    def add_weighted(self, value: float, weight: int) -> None:
        """Add ``weight`` copies of one value (a whole decode batch sharing one gap)."""
        self.count += weight
        self._total.add(value * weight)
        self._total_sq.add(value * value * weight)
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value
        if value > 0.0:
            i = math.ceil(math.log(value) / self._log_gamma) - self._lo
            w = self._weighted
            w[i] = w.get(i, 0) + weight
        else:
            self.zeros += weight

    def _flush(self) -> None:
        if self._fill:
            self._fold(self._buf[: self._fill])
            self._fill = 0
        if self._weighted:
            last = self._counts.shape[0] - 1
            for i in sorted(self._weighted):
                self._counts[min(max(i, 0), last)] += self._weighted[i]
            self._weighted.clear()

    def _fold(self, values: F64) -> None:
        n = int(values.shape[0])
        self.count += n
        self._total.add_many(values)
        self._total_sq.add_many(values * values)
        vmin = float(values.min())
        vmax = float(values.max())
        if vmin < self.min:
            self.min = vmin
        if vmax > self.max:
            self.max = vmax
        pos = values[values > 0.0]
        self.zeros += n - int(pos.shape[0])
        if pos.shape[0]:
            idx = np.ceil(np.log(pos) / self._log_gamma).astype(np.int64) - self._lo
            np.clip(idx, 0, self._counts.shape[0] - 1, out=idx)
            self._counts += np.bincount(idx, minlength=self._counts.shape[0])

    def quantile_at_rank(self, rank: int) -> float:
        """Approximate value of the ``rank``-th smallest sample (0-based)."""
        if rank < self.zeros:
            return 0.0
        rank -= self.zeros
        cum = np.cumsum(self._counts)
        i = int(np.searchsorted(cum, rank, side="right"))
        i = min(i, self._counts.shape[0] - 1)
        # the bucket's representative as is, even when it lies outside [min, max] (a bucket
        # holding the extreme values): the reference's sketch does not clamp it either
        return 2.0 * self._gamma ** (i + self._lo) / (self._gamma + 1.0)

    def stats(self) -> DistributionStats:
        self._flush()
        n = self.count
        if n == 0:
            return DistributionStats.empty()
        mean = self.total / n
        var = max(self.total_sq / n - mean * mean, 0.0)
        q = [self.quantile_at_rank(nearest_rank(n, p)) for _, p in PERCENTILES]
        return DistributionStats(n, mean, self.min, self.max, q[0], q[1], q[2], q[3], q[4], math.sqrt(var))


class GapSketches:
    """Inter-token gaps: the ITL sketch and the per-user rate sketch (1000 / gap, gap > 0).

    Gaps are staged once and folded into both sketches in bulk.
    """

    __slots__ = ("itl", "per_user", "_buf", "_fill", "_sgaps", "_sweights", "_runs", "_run_weights",
                 "_run_lengths", "_wfill")

    _BUFFER = 1 << 16
    _WBUFFER = 1 << 14

    def __init__(self) -> None:
        self.itl = LogSketch()
        self.per_user = LogSketch()
        self._buf = np.empty(self._BUFFER, dtype=np.float64)
        self._fill = 0
        # Weighted gaps (a batch sharing one gap), staged with their weights, _WBUFFER at most
        # of each kind: add_same's (one a pass) in lists, converted once per flush; add_run's
        # (thousands at once) as the runs' end times themselves, subtracted once per flush (a
        # run then costs two appends, not a few numpy calls).  The sketches' aggregates (exact
        # sums, counts, bucket counts, extremes) do not depend on the order samples are folded in.
        self._sgaps: list[float] = []
        self._sweights: list[int] = []
        self._runs: list[F64] = []  # the end times of each staged run (never written to)
        self._run_weights: list[int] = []
        self._run_lengths: list[int] = []  # len() of each run's times
        self._wfill = 0  # gaps staged in those runs

    def _room(self, n: int) -> int:
        """Where ``n`` gaps go in the staging buffer (flushed first if they do not fit), or -1
        when they are more than it holds (the caller folds them directly)."""
        fill = self._fill
        if fill + n > self._BUFFER:
            self.flush()
            fill = 0
            if n > self._BUFFER:
                return -1
        self._fill = fill + n
        return fill

    def add_many(self, gaps: F64) -> None:
        n = len(gaps)
        fill = self._room(n)
        if fill < 0:
            self._fold(gaps)
            return
        self._buf[fill:fill + n] = gaps

    def add_split(self, first: float, t0: float, c: int, prev: list[float]) -> None:
        """:meth:`add_many` of ``c`` gaps ``first - t0`` followed by ``first - p`` for each
        of ``prev``: the same values in the same order, written straight into the staging
        buffer (no array built and subtracted per call: a batch's pass with a joiner)."""
        fill = self._room(c + len(prev))
        if fill < 0:
            self._fold(first - np.array([t0] * c + prev, dtype=np.float64))
            return
        buf = self._buf
        if c:
            buf[fill:fill + c] = first - t0
        j = fill + c
        for p in prev:
            buf[j] = first - p
            j += 1

    def flush(self) -> None:
        if self._fill:
            self._fold(self._buf[: self._fill])
            self._fill = 0
        if self._sgaps:
            self._fold_weighted(np.array(self._sgaps, dtype=np.float64), np.array(self._sweights, dtype=np.int64))
            self._sgaps = []
            self._sweights = []
        if self._wfill:
            self._fold_runs()

    def _fold_weighted(self, gaps: F64, weights: npt.NDArray[np.int64]) -> None:
        gaps = np.maximum(gaps, 0.0)
        self.itl.add_weighted_many(gaps, weights)
        positive = gaps > 0.0
        if positive.all():
            self.per_user.add_weighted_many(1000.0 / gaps, weights)
        elif positive.any():
            self.per_user.add_weighted_many(1000.0 / gaps[positive], weights[positive])

    def add_same(self, gap: float, weight: int) -> None:
        """``weight`` identical gaps (the common case: a batch decoded in lockstep).

        Staged and folded in bulk; the sketches' sums are exact, so folding later changes
        nothing: the result is that of ``add_weighted`` on each sketch, one by one."""
        gaps = self._sgaps
        if len(gaps) == self._WBUFFER:
            self.flush()
            gaps = self._sgaps
        gaps.append(gap)
        self._sweights.append(weight)

    def add_run(self, times: F64, weight: int) -> None:
        """:meth:`add_same` of each gap between consecutive ``times`` (the passes of a bulk
        decode run after its first), subtracted straight into the staging buffer."""
        n = len(times) - 1
        if n <= 0:
            return
        f = self._wfill
        if f + n > self._WBUFFER:
            self.flush()
            f = 0
            if n > self._WBUFFER:
                self._fold_weighted(times[1:] - times[:-1], np.full(n, weight, dtype=np.int64))
                return
        self._runs.append(times)
        self._run_weights.append(weight)
        self._run_lengths.append(n + 1)
        self._wfill = f + n

    def _fold_runs(self) -> None:
        """Fold the staged runs' gaps: consecutive differences of their end times, joined, the
        differences across two runs' boundary left out."""
        runs = self._runs
        if len(runs) == 1:
            t = runs[0]
            gaps = t[1:] - t[:-1]
            weights = np.full(gaps.shape[0], self._run_weights[0], dtype=np.int64)
        else:
            joined = np.concatenate(runs)
            diffs = joined[1:] - joined[:-1]
            lengths = np.array(self._run_lengths, dtype=np.int64)
            gaps = np.delete(diffs, np.cumsum(lengths[:-1]) - 1)  # the boundaries
            weights = np.repeat(np.array(self._run_weights, dtype=np.int64), lengths - 1)
        self._runs = []
        self._run_weights = []
        self._run_lengths = []
        self._wfill = 0
        self._fold_weighted(gaps, weights)

    def _fold(self, gaps: F64) -> None:
        gaps = gaps[~np.isnan(gaps)]
        if gaps.shape[0] == 0:
            return
        gaps = np.maximum(gaps, 0.0)
        self.itl.add_many(gaps)
        pos = gaps[gaps > 0.0]
        if pos.shape[0]:
            self.per_user.add_many(1000.0 / pos)

    def itl_stats(self) -> DistributionStats:
        self.flush()
        return self.itl.stats()

    def per_user_stats(self) -> DistributionStats:
        self.flush()
        return self.per_user.stats()
