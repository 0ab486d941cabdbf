"""Per-request metrics in flat numpy arrays, and a streaming log-bucket sketch for ITL.

Why arrays: the reference keeps a hash-map entry (and, while recording, a Vec of token
times) per request -- about 10 KB each.  Here every request owns one slot (its ``request_id``)
in a handful of typed arrays, 45 bytes in all, and each decode pass updates its emitted
requests in place (scalar operations for a small batch, fancy indexing for a large one); nothing
is allocated per token or per finished request.  When the engine says how its batch changed
(a :class:`~dmocker.engines.interface.BatchDelta`), the batch's counts are kept per batch
instead and only its joiners and leavers are touched (:mod:`dmocker.replay.batch_epochs`).
Inter-token gaps go into the sketches of
:mod:`dmocker.replay.sketch` (DDSketch-style buckets, 0.1 % relative error, as the reference)
together with exact count, sum, min and max.

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
from typing import Final, SupportsIndex, cast

import numpy as np
import numpy.typing as npt

from dmocker.engines.interface import BatchDelta

from .batch_epochs import BatchEpochs
from .sketch import PERCENTILES, DistributionStats, GapSketches, LogSketch, nearest_rank

__all__ = [
    "TerminalStatus", "LogSketch", "GapSketches", "Collector", "DistributionStats", "nearest_rank", "PERCENTILES",
]

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


_fmin = np.fmin.reduce
_fmax = np.fmax.reduce
# A pass adds one token per emitted request: an int32 scalar, so the in-place add of a batch's
# counts needs no conversion of a Python int.
_ONE_TOKEN: Final = np.int32(1)


def _count(a: npt.NDArray[np.bool_]) -> int:
    """Non-zero entries, as a Python int."""
    return int(np.count_nonzero(a))


class Collector:
    """Per-request slots for every request of the workload (indexed by ``request_id``).

    First and second token times are found by watching "young" requests (admitted to decode,
    fewer than two tokens) per decode worker: a pass looks only at its own worker's young
    requests, so its cost does not grow with the cluster.
    """

    __slots__ = (
        "_last",
        "_tokens",
        "_last_a",
        "_tokens_a",
        "_arrival_a",
        "_first_a",
        "_second_a",
        "_status_a",
        "_input_a",
        "_reused_a",
        "_admitted_a",
        "gaps",
        "_young",
        "_young_at",
        "_prev",
        "max_terminal_ms",
        "prefill_worker_seconds",
        "decode_worker_seconds",
        "_epochs",
        "_use_epochs",
    )

    def __init__(self, num_requests: int, *, batch_epochs: bool = True) -> None:
        n = num_requests
        # Every per-request slot lives in a stdlib array: the per-request events (arrival,
        # admissions, first and second token, terminal) and the passes of a small batch update
        # it with scalar Python operations, several times cheaper than numpy's scalar indexing
        # or fancy indexing on a handful of ids.  Readers see numpy views of the same memory
        # (the properties below); ``_tokens`` / ``_last`` are kept as views for large batches.
        nans = array.array("d", [math.nan]) * n
        self._arrival_a = array.array("d", nans)
        self._first_a = array.array("d", nans)
        self._second_a = array.array("d", nans)
        self._last_a = nans
        self._tokens_a = array.array("i", bytes(4 * n))
        self._status_a = array.array("b", bytes(n))
        self._input_a = array.array("i", bytes(4 * n))
        self._reused_a = array.array("i", bytes(4 * n))
        self._admitted_a = array.array("b", bytes(n))
        self._last: F64 = np.frombuffer(self._last_a, dtype=np.float64)
        self._tokens: npt.NDArray[np.int32] = np.frombuffer(self._tokens_a, dtype=np.int32)
        self.gaps = GapSketches()
        # source -> {young request: its token count when last looked at}; request -> source.
        # Request ids are keys as objects: the id objects in hand are used as they are.
        self._young: dict[int, dict[object, int]] = {}
        self._young_at: dict[object, int] = {}
        # source -> (ids array of its last emission, time): see on_tokens
        self._prev: dict[int, tuple[npt.NDArray[np.int64], float]] = {}
        self.max_terminal_ms = 0.0
        self.prefill_worker_seconds = 0.0
        self.decode_worker_seconds = 0.0
        # decode batches with a known delta: counts and last times per batch (batch_epochs.py);
        # False: every pass updates every member (the plain twin, for tests)
        self._epochs = BatchEpochs(self._tokens_a, self._last_a, self.gaps)
        self._use_epochs = batch_epochs

    # (Per-request updates convert the id once, ``rid``, for all their array indexes and dict keys.)

    def on_arrival(self, request_id: int, arrival_ms: float, input_length: int) -> None:
        rid = cast(SupportsIndex, request_id)
        self._arrival_a[rid] = arrival_ms
        self._input_a[rid] = input_length

    def on_admit(self, request_id: int, reused_tokens: int) -> None:
        rid = cast(SupportsIndex, request_id)
        self._admitted_a[rid] = 1
        if reused_tokens > self._reused_a[rid]:
            self._reused_a[rid] = reused_tokens

    @property
    def arrival(self) -> F64:
        """Arrival time per request, NaN before it arrives."""
        return np.frombuffer(self._arrival_a, dtype=np.float64)

    @property
    def first_token(self) -> F64:
        """First token time per request, NaN before it."""
        return np.frombuffer(self._first_a, dtype=np.float64)

    @property
    def second_token(self) -> F64:
        """Second token time per request, NaN before it."""
        return np.frombuffer(self._second_a, dtype=np.float64)

    @property
    def status(self) -> npt.NDArray[np.int8]:
        """Terminal status per request (:class:`TerminalStatus` values; INCOMPLETE until one)."""
        return np.frombuffer(self._status_a, dtype=np.int8)

    @property
    def input_length(self) -> npt.NDArray[np.int32]:
        """Prompt tokens per request."""
        return np.frombuffer(self._input_a, dtype=np.int32)

    @property
    def reused(self) -> npt.NDArray[np.int32]:
        """Prompt tokens served from a prefix cache per request (the largest admission's)."""
        return np.frombuffer(self._reused_a, dtype=np.int32)

    @property
    def first_admitted(self) -> npt.NDArray[np.bool_]:
        """Whether each request was admitted to a pass at least once."""
        return np.frombuffer(self._admitted_a, dtype=np.bool_)

    def status_of(self, request_id: int) -> TerminalStatus:
        """One request's terminal status."""
        return TerminalStatus(self._status_a[request_id])

    def reused_of(self, request_id: int) -> int:
        """One request's prompt tokens served from a prefix cache."""
        return self._reused_a[request_id]

    @property
    def tokens(self) -> npt.NDArray[np.int32]:
        """Output tokens per request."""
        self._epochs.settle_all()
        return self._tokens

    @property
    def last_token(self) -> F64:
        """Last token time per request, NaN before the first."""
        self._epochs.settle_all()
        return self._last

    @property
    def epoch_passes(self) -> int:
        """Decode passes applied per batch (from the engines' batch deltas), not per member."""
        return self._epochs.applied

    @property
    def young(self) -> dict[int, int]:
        """Watched requests (admitted to decode, fewer than two tokens) -> token count when last
        looked at, in request-id order (tests, telemetry)."""
        merged = {cast(int, rid): seen for by in self._young.values() for rid, seen in by.items()}
        return dict(sorted(merged.items()))

    def output_of(self, request_id: int) -> tuple[int, float, float, float]:
        """(tokens, first, second, last token time) of one request (per-request records)."""
        epochs = self._epochs
        return (
            epochs.tokens_of(request_id),
            self._first_a[request_id],
            self._second_a[request_id],
            epochs.last_of(request_id),
        )

    def on_decode_admit(self, request_id: int, source: int = -1) -> None:
        """A request entered the decode batch of worker ``source``: watch it until its second
        token.  Only ``source``'s passes (``on_tokens(..., source)``) look at it, so a request
        must be admitted again by any other worker before that worker emits it (it is: every
        decode batch entry is an admission).  A re-admission (after a preemption) of a request
        that already has its second token is not watched: its first and second token times
        stay those of the tokens it streamed first."""
        rid: object = request_id
        tokens = self._epochs.tokens_of(rid)
        if tokens >= 2:
            return
        at = self._young_at
        old = at.get(rid)
        if old is not None and old != source:
            del self._young[old][rid]
        at[rid] = source
        by = self._young.get(source)
        if by is None:
            by = self._young[source] = {}
        by[rid] = tokens

    def on_tokens(
        self,
        ids: npt.NDArray[np.int64],
        t_ms: float,
        source: int = -1,
        run_times: F64 | None = None,
        delta: BatchDelta | None = None,
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

        ``delta`` (the batch's change since that array, when the engine knows it) lets the pass
        update the joiners and leavers only (:mod:`dmocker.replay.batch_epochs`); same result.
        """
        n = len(ids)  # (len: a size slot; ``.shape`` is a generic attribute read and a tuple)
        if n == 0:
            return
        if run_times is None:
            first = end = t_ms
            more = 0
        else:
            first = run_times.item(0)
            end = run_times.item(-1)
            more = len(run_times) - 1
        gaps = self.gaps
        seen = None
        epochs = self._epochs
        if source >= 0:
            prev_of = self._prev
            seen = prev_of.get(source)
            prev_of[source] = (ids, end)
            if seen is not None and self._use_epochs and epochs.on_pass(source, ids, seen, delta, first, end, more):
                self._later_passes_and_young(n, first, more, run_times, source)
                return
        if epochs.active():  # members of a batch elsewhere (moved) are read from the arrays below
            epochs.settle(ids.tolist())
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
                nn = n if c == n else n - _count(np.isnan(prev))  # members with a previous token
                if c == nn:
                    if c:
                        gaps.add_same(first - t0, c)
                else:
                    lo_ = _fmin(prev)
                    if lo_ == _fmax(prev):
                        # Every continuing request last emitted at the same time (lockstep
                        # decoding): one weighted sample instead of one per request.
                        gaps.add_same(first - float(lo_), nn)
                    elif lo_ == lo_:
                        gaps.add_many(first - prev)  # NaNs are dropped at fold time
            last[ids] = end
            self._tokens[ids] += _ONE_TOKEN if not more else np.int32(more + 1)
        self._later_passes_and_young(n, first, more, run_times, source)

    def _later_passes_and_young(self, n: int, first: float, more: int, run_times: F64 | None, source: int) -> None:
        """The rest of a pass (or run) of ``n`` ids, however its counts were kept: the gaps of a
        run's later passes, and the young requests' first and second token times."""
        if more:
            assert run_times is not None
            self.gaps.add_run(run_times, n)
        young = self._young.get(source)
        if young:
            self._young_tokens(young, first, more, run_times)

    def _young_tokens(self, young: dict[object, int], first: float, more: int, run_times: F64 | None) -> None:
        """First and second token times of one source's watched requests (after its pass or run
        incremented their counts; a count that moved is that of an emitted request).

        The ids are the int objects the dict holds, array indexes through a ``SupportsIndex``
        cast."""
        done: list[object] = []
        epochs = self._epochs
        in_epochs = epochs.active()
        tokens_a = self._tokens_a
        first_a = self._first_a
        second_a = self._second_a
        for key, seen in young.items():
            rid = cast(SupportsIndex, key)
            now = epochs.tokens_of(key) if in_epochs else tokens_a[rid]
            if now == seen:
                continue
            if more:  # a run of 1 + more passes: the first at `first`, the second at run_times[1]
                assert run_times is not None
                if seen == 0:
                    first_a[rid] = first
                    second_a[rid] = run_times.item(1)
                else:
                    second_a[rid] = first
                done.append(key)
            elif now == 1:
                first_a[rid] = first
                young[key] = 1
            else:
                if seen == 0:  # two tokens since the last look cannot happen in one pass
                    first_a[rid] = first
                second_a[rid] = first
                done.append(key)
        if done:
            at = self._young_at
            for key in done:
                del young[key]
                del at[key]

    def on_terminal(self, request_id: int, status: TerminalStatus, t_ms: float) -> bool:
        """Record a terminal; the first one wins. Returns True if this one was recorded."""
        rid = cast(SupportsIndex, request_id)
        if status is TerminalStatus.COMPLETED:
            # it finished in the pass just counted and emits no more: stop watching it
            source = self._young_at.pop(rid, None)
            if source is not None:
                del self._young[source][rid]
        status_a = self._status_a
        if status_a[rid] != 0:  # INCOMPLETE
            return False
        status_a[rid] = int(status)
        if t_ms > self.max_terminal_ms:
            self.max_terminal_ms = t_ms
        return True

    def add_worker_seconds(self, prefill: float, decode: float) -> None:
        self.prefill_worker_seconds += prefill
        self.decode_worker_seconds += decode
