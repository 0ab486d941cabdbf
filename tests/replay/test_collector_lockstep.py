"""Lazy lockstep cohorts in the collector give exactly the general path's numbers.

The vLLM decode worker reports each lockstep pass as a change of its previous batch
(``PassCompletion.lockstep``); the collector then keeps the batch lazily.  These tests replay
random workloads through the real vLLM mock with the deltas honoured and ignored
(``Collector(lockstep_deltas=False)``) and compare summaries, per-request records and event
logs byte for byte, including injected cancels and failures mid-decode and a time cap that
leaves requests in flight; and they drive the collector directly with engine-shaped deltas,
reading settled values between passes.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmocker.handoff import Canceled, Failed, HandoffOrder, TimedOut
from dmocker.replay.collector import Collector
from dmocker.replay.events import DeadEndError
from dmocker.engines.interface import Backend, EngineArgs, LockstepDelta, WorkerType, make_worker
from dmocker.replay.report import SlaThresholds, build_summary, stable_json
from dmocker.replay.runtime import DisaggRuntime
from dmocker.replay.workload import AdmissionQueue
from dmocker.replay.workload.types import NO_NEXT, SessionStart, Turn

BLOCK = 16
_KINDS: tuple[type[Canceled] | type[Failed] | type[TimedOut], ...] = (Canceled, Failed, TimedOut)


@dataclass
class _Rows:
    """A tiny in-memory workload: (arrival_ms, input_length, output_length) per request."""

    rows: list[tuple[float, int, int]]

    @property
    def trace_block_size(self) -> int:
        return BLOCK

    @property
    def num_requests(self) -> int:
        return len(self.rows)

    def session_starts(self) -> Iterator[SessionStart]:
        return iter(sorted(SessionStart(t, rid) for rid, (t, _, _) in enumerate(self.rows)))

    def load(self, request_id: int) -> Turn:
        _, isl, osl = self.rows[request_id]
        # two prefix groups so that prefix caching and shared blocks take part
        hashes = tuple(range(request_id % 2 * 1000, request_id % 2 * 1000 + isl // BLOCK))
        return Turn(request_id, isl, osl, hashes, 0.0, NO_NEXT, request_id, 0)

    def delay_of(self, request_id: int) -> float:
        return 0.0


@dataclass(frozen=True)
class _Out:
    summary: str
    records: str
    events: str
    itl_total: float
    lazy_passes: int


def _replay(
    rows: list[tuple[float, int, int]],
    *,
    deltas: bool,
    blocks: int = 400,
    seqs: int = 8,
    budget: int = 512,
    n_decode: int = 1,
    injects: Sequence[tuple[float, int, int]] = (),
    cap: float | None = None,
) -> _Out:
    pargs = EngineArgs(backend=Backend.VLLM, worker_type=WorkerType.PREFILL, block_size=BLOCK,
                       num_gpu_blocks=400, max_num_batched_tokens=256)
    dargs = EngineArgs(backend=Backend.VLLM, worker_type=WorkerType.DECODE, block_size=BLOCK,
                       num_gpu_blocks=blocks, max_num_seqs=seqs, max_num_batched_tokens=budget)
    workload = _Rows(rows)
    collector = Collector(workload.num_requests, lockstep_deltas=deltas)
    records, events = io.StringIO(), io.StringIO()
    rt = DisaggRuntime(
        admission=AdmissionQueue(workload),
        prefill_args=pargs,
        decode_args=dargs,
        prefill_workers=[make_worker(pargs, 0)],
        decode_workers=[make_worker(dargs, i) for i in range(n_decode)],
        order=HandoffOrder.SOURCE_FIRST,
        collector=collector,
        max_sim_time_ms=cap,
        records=records,
        events=events,
        bulk=False,  # the lazy cohorts serve the per-pass simulation (bulk runs bypass them)
    )
    for t, rid, kind in injects:
        rt.inject(t, rid % len(rows), _KINDS[kind])
    rt.run()
    rt.write_incomplete_records()
    sla = SlaThresholds(ttft_ms=40.0, itl_ms=12.0, e2e_ms=300.0)
    summary = stable_json(build_summary(collector, handoff_order="source-first", sla=sla))
    return _Out(summary, records.getvalue(), events.getvalue(), collector.gaps.itl.total,
                collector.lazy_passes)


def _assert_same(rows: list[tuple[float, int, int]], **kw: object) -> _Out | None:
    """Both runs give the same bytes, or both stop at the same dead end (tiny pools can
    starve the mock; that is engine behaviour, independent of the collector)."""
    try:
        lazy = _replay(rows, deltas=True, **kw)  # type: ignore[arg-type]
    except DeadEndError as exc:
        with pytest.raises(DeadEndError) as again:
            _replay(rows, deltas=False, **kw)  # type: ignore[arg-type]
        assert str(again.value) == str(exc)
        return None
    general = _replay(rows, deltas=False, **kw)  # type: ignore[arg-type]
    assert general.lazy_passes == 0
    assert lazy.summary == general.summary
    assert lazy.records == general.records
    assert lazy.events == general.events
    assert lazy.itl_total == general.itl_total  # same float summation order
    return lazy


_row = st.tuples(st.floats(0.0, 30.0), st.integers(1, 120), st.integers(0, 40))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(_row, min_size=1, max_size=30),
    st.integers(16, 200),
    st.integers(1, 8),
    st.integers(4, 300),
    st.integers(1, 2),
    st.lists(st.tuples(st.floats(0.0, 800.0), st.integers(0, 29), st.integers(0, 2)), max_size=4),
    st.one_of(st.none(), st.floats(50.0, 600.0)),
)
def test_lazy_cohorts_match_the_general_path(
    gaps: list[tuple[float, int, int]], blocks: int, seqs: int, budget: int, n_decode: int,
    injects: list[tuple[float, int, int]], cap: float | None,
) -> None:
    """Random workloads (small pools: preemption and exact passes; zero-token requests;
    injected terminals; a time cap) give byte-identical outputs with and without deltas."""
    rows: list[tuple[float, int, int]] = []
    t = 0.0
    for gap, isl, osl in gaps:
        t += gap
        rows.append((t, isl, osl))
    _assert_same(rows, blocks=blocks, seqs=seqs, budget=budget, n_decode=n_decode,
                 injects=injects, cap=cap)


def test_lazy_path_carries_a_steady_workload() -> None:
    """A steady stream decodes almost entirely through the lazy cohort."""
    rows = [(i * 3.0, 40 + i % 50, 20 + i % 17) for i in range(60)]
    out = _assert_same(rows, n_decode=2, seqs=16)
    assert out is not None and out.lazy_passes > 100


def test_cancel_mid_decode_sees_settled_token_counts() -> None:
    """A request canceled while its batch is lazy reports the tokens it really produced."""
    rows = [(i * 2.0, 40, 200) for i in range(4)]
    for deltas in (True, False):
        out = _replay(rows, deltas=deltas, injects=[(500.0, 1, 0), (700.0, 2, 1)])
        recs = {r["request_id"]: r for r in map(json.loads, out.records.splitlines())}
        for rid, status in ((1, "canceled"), (2, "failed")):
            n = recs[rid]["output_length"]
            assert 0 < n < 200, (deltas, rid, n)
            assert recs[rid]["terminal_status"] == status
            assert recs[rid]["last_token_ms"] > recs[rid]["first_token_ms"]
        assert recs[0]["output_length"] == 200
        if deltas:
            assert out.lazy_passes > 100
    _assert_same(rows, injects=[(500.0, 1, 0), (700.0, 2, 1)])


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.integers(0, 3), st.integers(0, 3), st.integers(0, 9),
                          st.integers(1, 4)), min_size=1, max_size=60))
def test_collector_deltas_match_explicit_ids(steps: list[tuple[int, int, int, int, int]]) -> None:
    """Engine-shaped deltas (continuing runs, new runs, plain passes, a stale serial) and
    reads between passes (one request, all arrays) never change a number."""
    n = 400
    lazy, plain = Collector(n), Collector(n, lockstep_deltas=False)
    members: dict[int, list[int]] = {0: [], 1: []}
    serial = {0: 0, 1: 0}
    chained = {0: False, 1: False}
    next_rid = 0
    t = 0.0
    for worker, n_join, n_leave, mode, dt in steps:
        t += float(dt)
        joined = list(range(next_rid, next_rid + n_join))
        next_rid += n_join
        for c in (lazy, plain):
            for rid in joined:
                c.on_decode_admit(rid)
        emitted = members[worker] + joined
        leaving = emitted[len(emitted) - n_leave:] if n_leave <= len(emitted) else list(emitted)
        serial[worker] += 1
        delta: LockstepDelta | None
        if mode == 0:  # a plain (exact) pass: no delta, and the next lockstep pass starts a run
            delta = None
            chained[worker] = False
        else:
            follows = serial[worker] - 1 if chained[worker] else -1
            if mode == 1:
                follows = serial[worker] + 5  # a serial that does not line up: general path
            delta = LockstepDelta(serial[worker], follows, tuple(joined), tuple(leaving))
            chained[worker] = True
        ids = np.array(emitted, dtype=np.int64)
        lazy.on_tokens(ids, t, worker, delta)
        plain.on_tokens(ids, t, worker, delta)
        members[worker] = [r for r in emitted if r not in leaving]
        if mode == 2 and emitted:  # one request read mid-cohort (a record being written)
            rid = emitted[0]
            got, want = lazy.output_of(rid), plain.output_of(rid)
            assert got[0] == want[0] and np.array_equal(np.array(got), np.array(want), equal_nan=True)
        if mode == 3:  # everything read mid-run (the properties settle; cohorts stay valid)
            assert np.array_equal(lazy.tokens, plain.tokens)
            assert np.array_equal(lazy.last_token, plain.last_token, equal_nan=True)
    for name in ("tokens", "first_token", "second_token", "last_token"):
        assert np.array_equal(getattr(lazy, name), getattr(plain, name), equal_nan=True), name
    assert lazy.young == plain.young
    assert lazy.gaps.itl_stats() == plain.gaps.itl_stats()
    assert lazy.gaps.per_user_stats() == plain.gaps.per_user_stats()
    assert lazy.gaps.itl.total == plain.gaps.itl.total
