"""Per-request metrics in flat numpy arrays, and a streaming log-bucket sketch for ITL.

Why arrays: the reference keeps a hash-map entry (and, while recording, a Vec of token
times) per request -- about 10 KB each.  Here every request owns one slot (its ``request_id``)
in a handful of typed arrays, 45 bytes in all, and each decode pass updates its emitted
requests in place (scalar operations for a small batch, fancy indexing for a large one); nothing
is allocated per token or per finished request.  Inter-token gaps go into :class:`LogSketch` (DDSketch-style buckets, 0.1 % relative
error, as the reference) together with exact count, sum, min and max.

Bulk decode runs: a completion may cover a run of passes of one batch
(``PassCompletion.run_times``); it is applied at once (token counts, last token time, first and
second token times, the first pass's gaps and one weighted gap per later pass).  Weighted
gaps are staged with their weights and folded in bulk; the sketches' sums are exact
(:class:`~dmocker.replay.exact_sum.ExactSum`), so neither the folding nor the order in which
workers' runs arrive changes a digit.
"""

from __future__ import annotations

import array
import enum
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .exact_sum import ExactSum

__all__ = ["TerminalStatus", "LogSketch", "Collector", "DistributionStats", "nearest_rank"]

F64 = npt.NDArray[np.float64]

_SMALL_BATCH = 16  # up to this many ids a pass takes the scalar path (see Collector.on_tokens)


class TerminalStatus(enum.IntEnum):
    """How a request ended; INCOMPLETE while none is recorded. The first terminal wins."""

    INCOMPLETE = 0
    COMPLETED = 1
    REJECTED = 2
    CANCELED = 3
    FAILED = 4

    @property
    def label(self) -> str:
        return self.name.lower()


def nearest_rank(n: int, p: float) -> int:
    """Index of percentile ``p`` among ``n`` sorted samples: round half up of (n-1)p/100."""
    return int(math.floor((n - 1) * p / 100.0 + 0.5))


_fmin = np.fmin.reduce
_fmax = np.fmax.reduce


def _count(a: npt.NDArray[np.bool_]) -> int:
    """Non-zero entries, as a Python int (compiled code checks the declared ``int``)."""
    return int(np.count_nonzero(a))


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
        positive = values > 0.0
        pos = values[positive]
        if pos.shape[0] < n:
            self.zeros += int(w_arr[~positive].sum())
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
            np.clip(buckets, 0, self._counts.shape[0] - 1, out=buckets)
            np.add.at(self._counts, buckets, w_arr[positive] if pos.shape[0] < n else w_arr)

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

    __slots__ = ("itl", "per_user", "_buf", "_fill", "_wbuf", "_wts", "_wfill")

    _BUFFER = 1 << 16
    _WBUFFER = 1 << 14

    def __init__(self) -> None:
        self.itl = LogSketch()
        self.per_user = LogSketch()
        self._buf = np.empty(self._BUFFER, dtype=np.float64)
        self._fill = 0
        # weighted gaps (a batch sharing one gap), staged with their weights
        self._wbuf = np.empty(self._WBUFFER, dtype=np.float64)
        self._wts = np.empty(self._WBUFFER, dtype=np.int64)
        self._wfill = 0

    def add_many(self, gaps: F64) -> None:
        n = int(gaps.shape[0])
        fill = self._fill
        if fill + n > self._BUFFER:
            self.flush()
            fill = 0
            if n > self._BUFFER:
                self._fold(gaps)
                return
        self._buf[fill:fill + n] = gaps
        self._fill = fill + n

    def flush(self) -> None:
        if self._fill:
            self._fold(self._buf[: self._fill])
            self._fill = 0
        if self._wfill:
            f = self._wfill
            self._fold_weighted(self._wbuf[:f], self._wts[:f])
            self._wfill = 0

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
        f = self._wfill
        if f == self._WBUFFER:
            self.flush()
            f = 0
        self._wbuf[f] = gap
        self._wts[f] = weight
        self._wfill = f + 1

    def add_same_many(self, gaps: F64, weight: int) -> None:
        """:meth:`add_same` of each gap with the same weight (the passes of a bulk decode run)."""
        n = int(gaps.shape[0])
        f = self._wfill
        if f + n > self._WBUFFER:
            self.flush()
            f = 0
            if n > self._WBUFFER:
                self._fold_weighted(gaps, np.full(n, weight, dtype=np.int64))
                return
        self._wbuf[f:f + n] = gaps
        self._wts[f:f + n] = weight
        self._wfill = f + n

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


class Collector:
    """Per-request slots for every request of the workload (indexed by ``request_id``).

    First and second token times are found by watching "young" requests (admitted to decode,
    fewer than two tokens) per decode worker: a pass looks only at its own worker's young
    requests, so its cost does not grow with the cluster.
    """

    __slots__ = (
        "arrival",
        "first_token",
        "second_token",
        "_last",
        "_tokens",
        "_last_a",
        "_tokens_a",
        "status",
        "input_length",
        "reused",
        "first_admitted",
        "gaps",
        "_young",
        "_young_at",
        "_prev",
        "max_terminal_ms",
        "prefill_worker_seconds",
        "decode_worker_seconds",
    )

    def __init__(self, num_requests: int) -> None:
        n = num_requests
        self.arrival = np.full(n, np.nan, dtype=np.float64)
        self.first_token = np.full(n, np.nan, dtype=np.float64)
        self.second_token = np.full(n, np.nan, dtype=np.float64)
        # Token counts and last token times live in stdlib arrays (the passes of a small
        # batch update them with scalar Python operations, several times cheaper than numpy
        # fancy indexing on a handful of ids); ``_tokens`` / ``_last`` are numpy views of the
        # same memory for large batches and readers.
        self._last_a = array.array("d", [math.nan]) * n
        self._tokens_a = array.array("i", bytes(4 * n))
        self._last: F64 = np.frombuffer(self._last_a, dtype=np.float64)
        self._tokens: npt.NDArray[np.int32] = np.frombuffer(self._tokens_a, dtype=np.int32)
        self.status = np.zeros(n, dtype=np.int8)
        self.input_length = np.zeros(n, dtype=np.int32)
        self.reused = np.zeros(n, dtype=np.int32)
        self.first_admitted = np.zeros(n, dtype=np.bool_)
        self.gaps = GapSketches()
        # source -> {young request: its token count when last looked at}; request -> source
        self._young: dict[int, dict[int, int]] = {}
        self._young_at: dict[int, int] = {}
        # source -> (ids array of its last emission, time): see on_tokens
        self._prev: dict[int, tuple[npt.NDArray[np.int64], float]] = {}
        self.max_terminal_ms = 0.0
        self.prefill_worker_seconds = 0.0
        self.decode_worker_seconds = 0.0

    def on_arrival(self, request_id: int, arrival_ms: float, input_length: int) -> None:
        self.arrival[request_id] = arrival_ms
        self.input_length[request_id] = input_length

    def on_admit(self, request_id: int, reused_tokens: int) -> None:
        self.first_admitted[request_id] = True
        if reused_tokens > self.reused.item(request_id):
            self.reused[request_id] = reused_tokens

    @property
    def tokens(self) -> npt.NDArray[np.int32]:
        """Output tokens per request."""
        return self._tokens

    @property
    def last_token(self) -> F64:
        """Last token time per request, NaN before the first."""
        return self._last

    @property
    def young(self) -> dict[int, int]:
        """Watched requests (admitted to decode, fewer than two tokens) -> token count when last
        looked at, in request-id order (tests, telemetry)."""
        merged = {rid: seen for by in self._young.values() for rid, seen in by.items()}
        return dict(sorted(merged.items()))

    def output_of(self, request_id: int) -> tuple[int, float, float, float]:
        """(tokens, first, second, last token time) of one request (per-request records)."""
        return (
            self._tokens_a[request_id],
            self.first_token.item(request_id),
            self.second_token.item(request_id),
            self._last_a[request_id],
        )

    def on_decode_admit(self, request_id: int, source: int = -1) -> None:
        """A request entered the decode batch of worker ``source``: watch it until its second
        token.  Only ``source``'s passes (``on_tokens(..., source)``) look at it, so a request
        must be admitted again by any other worker before that worker emits it (it is: every
        decode batch entry is an admission).  A re-admission (after a preemption) of a request
        that already has its second token is not watched: its first and second token times
        stay those of the tokens it streamed first."""
        if self._tokens_a[request_id] >= 2:
            return
        at = self._young_at
        old = at.get(request_id)
        if old is not None and old != source:
            del self._young[old][request_id]
        at[request_id] = source
        by = self._young.get(source)
        if by is None:
            by = self._young[source] = {}
        by[request_id] = self._tokens_a[request_id]

    def on_tokens(
        self,
        ids: npt.NDArray[np.int64],
        t_ms: float,
        source: int = -1,
        run_times: F64 | None = None,
    ) -> None:
        """A decode pass of worker ``source`` emitted one token for each of ``ids`` (unique) at
        ``t_ms``.

        ``run_times`` (a bulk decode run): every id emitted one token at each of these times
        (ascending, the last is ``t_ms``), with the same result as pass by pass: the first pass
        adds each id's gap since its previous token, each later pass one gap (between two pass
        times) weighted by the batch size; a request young before the run gets its first /
        second token time at the run's first / second pass.

        A batch of up to ``_SMALL_BATCH`` ids is updated with scalar operations on the stdlib
        arrays, a larger one with a few numpy operations on their views; first and second
        token times are handled only for ``source``'s young requests, with scalar updates.

        ``source`` (a decode worker's index, >= 0) enables a shortcut: engines hand out the
        very same (never mutated) ids array while a batch keeps its members, so when ``ids``
        *is* the array this source emitted last, every member last emitted at that pass's time
        and the gap is known without reading ``last_token``.  The result is the same (one
        weighted gap).
        """
        n = int(ids.shape[0])
        if n == 0:
            return
        if run_times is None:
            first = end = t_ms
            more = 0
        else:
            first = run_times.item(0)
            end = run_times.item(-1)
            more = int(run_times.shape[0]) - 1
        gaps = self.gaps
        seen = None
        if source >= 0:
            prev_of = self._prev
            seen = prev_of.get(source)
            prev_of[source] = (ids, end)
        if n <= _SMALL_BATCH:
            # scalar updates on the stdlib arrays (same arithmetic as the numpy path below)
            rids = ids.tolist()
            last_a = self._last_a
            if seen is not None and seen[0] is ids:
                gaps.add_same(first - seen[1], n)
            else:
                cont = [p for p in [last_a[r] for r in rids] if p == p]  # not NaN: a gap
                if cont:
                    lo = min(cont)
                    if lo == max(cont):
                        gaps.add_same(first - lo, len(cont))
                    else:
                        gaps.add_many(first - np.array(cont))
            tokens_a = self._tokens_a
            k = more + 1
            for r in rids:
                last_a[r] = end
                tokens_a[r] += k
        else:
            last = self._last
            if seen is not None and seen[0] is ids:
                gaps.add_same(first - seen[1], n)
            else:
                prev = last[ids]  # NaN for a request's first token
                # The common case first, with one comparison instead of a NaN-aware min and
                # max: the batch changed, but every member with a previous token last emitted
                # at this source's previous pass (NaN, equal to nothing, without one).  The
                # samples are the same as the general test's below.
                t0 = seen[1] if seen is not None else math.nan
                c = _count(prev == t0)
                if c == n or c == _count(prev == prev):
                    if c:
                        gaps.add_same(first - t0, c)
                else:
                    lo_ = _fmin(prev)
                    if lo_ == _fmax(prev):
                        # Every continuing request last emitted at the same time (lockstep
                        # decoding): one weighted sample instead of one per request.
                        gaps.add_same(first - float(lo_), int(_count(prev == prev)))
                    elif lo_ == lo_:
                        gaps.add_many(first - prev)  # NaNs are dropped at fold time
            last[ids] = end
            self._tokens[ids] += more + 1
        if more:
            assert run_times is not None
            gaps.add_same_many(run_times[1:] - run_times[:-1], n)
        young = self._young.get(source)
        if young:
            self._young_tokens(young, first, more, run_times)

    def _young_tokens(self, young: dict[int, int], first: float, more: int, run_times: F64 | None) -> None:
        """First and second token times of one source's watched requests (after its pass or run
        incremented their counts; a count that moved is that of an emitted request)."""
        done: list[int] = []
        item = self._tokens_a.__getitem__
        for rid, seen in young.items():
            now = item(rid)
            if now == seen:
                continue
            if more:  # a run of 1 + more passes: the first at `first`, the second at run_times[1]
                assert run_times is not None
                if seen == 0:
                    self.first_token[rid] = first
                    self.second_token[rid] = run_times.item(1)
                else:
                    self.second_token[rid] = first
                done.append(rid)
            elif now == 1:
                self.first_token[rid] = first
                young[rid] = 1
            else:
                if seen == 0:  # two tokens since the last look cannot happen in one pass
                    self.first_token[rid] = first
                self.second_token[rid] = first
                done.append(rid)
        if done:
            at = self._young_at
            for rid in done:
                del young[rid]
                del at[rid]

    def on_terminal(self, request_id: int, status: TerminalStatus, t_ms: float) -> bool:
        """Record a terminal; the first one wins. Returns True if this one was recorded."""
        if status is TerminalStatus.COMPLETED:
            # it finished in the pass just counted and emits no more: stop watching it
            source = self._young_at.pop(request_id, None)
            if source is not None:
                del self._young[source][request_id]
        if self.status.item(request_id) != 0:  # INCOMPLETE
            return False
        self.status[request_id] = int(status)
        if t_ms > self.max_terminal_ms:
            self.max_terminal_ms = t_ms
        return True

    def add_worker_seconds(self, prefill: float, decode: float) -> None:
        self.prefill_worker_seconds += prefill
        self.decode_worker_seconds += decode
