"""Collector arrays, the ITL sketch and the summary statistics."""

from __future__ import annotations

import math
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmocker.replay import collector as collector_module
from dmocker.replay.collector import Collector, DistributionStats, LogSketch, TerminalStatus, nearest_rank
from dmocker.replay.report import SlaThresholds, build_summary, request_uuid, stable_json
from dmocker.replay.sketch import GapSketches


def test_nearest_rank_rounds_half_up() -> None:
    assert nearest_rank(1, 99) == 0
    assert nearest_rank(101, 50) == 50
    assert nearest_rank(3, 75) == 2  # (2 * 0.75 = 1.5) rounds up, unlike Python's round()
    assert nearest_rank(5, 99) == 4


def test_exact_distribution() -> None:
    s = DistributionStats.exact(np.array([5.0, 1.0, 3.0, 2.0, 4.0]))
    assert (s.min, s.max, s.median, s.mean) == (1.0, 5.0, 3.0, 3.0)
    assert s.p99 == 5.0
    assert s.std == pytest.approx(math.sqrt(2.0))
    assert DistributionStats.exact(np.array([])).mean == 0.0


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.floats(0.01, 1e5, allow_nan=False, allow_infinity=False), min_size=1, max_size=400),
    st.sampled_from([50.0, 75.0, 90.0, 95.0, 99.0]),
)
def test_sketch_quantiles_within_relative_error(values: list[float], p: float) -> None:
    sk = LogSketch(0.001)
    arr = np.array(values)
    sk.add_many(arr[: len(arr) // 2])
    sk.add_many(arr[len(arr) // 2 :])
    exact = float(np.sort(arr)[nearest_rank(len(arr), p)])
    got = sk.stats()
    q = {50.0: got.median, 75.0: got.p75, 90.0: got.p90, 95.0: got.p95, 99.0: got.p99}[p]
    assert abs(q - exact) <= 0.001 * exact * 1.0000001 + 1e-12
    assert got.count == len(values)
    assert got.min == min(values) and got.max == max(values)
    assert got.mean == pytest.approx(float(np.mean(arr)))


def test_sketch_handles_zeros_and_large_batches() -> None:
    sk = LogSketch()
    sk.add_many(np.zeros(10))
    sk.add_many(np.full(200_000, 7.0))
    st_ = sk.stats()
    assert st_.count == 200_010 and st_.min == 0.0
    assert st_.median == pytest.approx(7.0, rel=1e-3)


def test_tokens_first_second_last_and_gaps() -> None:
    c = Collector(3)
    for rid in range(3):
        c.on_arrival(rid, 0.0, 100)
        c.on_admit(rid, 10)
        c.on_decode_admit(rid)
    c.on_tokens(np.array([0, 1], dtype=np.int64), 10.0)
    c.on_tokens(np.array([0, 1, 2], dtype=np.int64), 15.0)
    c.on_tokens(np.array([0, 2], dtype=np.int64), 22.0)
    assert list(c.tokens) == [3, 2, 2]
    assert list(c.first_token) == [10.0, 10.0, 15.0]
    assert list(c.second_token) == [15.0, 15.0, 22.0]
    assert list(c.last_token) == [22.0, 15.0, 22.0]
    assert not c.young
    itl = c.gaps.itl_stats()
    assert itl.count == 4  # gaps 5, 5, 7, 7
    assert itl.mean == pytest.approx(6.0)


def test_readmission_after_the_second_token_keeps_first_and_second() -> None:
    """A request preempted on decode after its second token and admitted again keeps the
    first and second token times it streamed (the reference's TTST is second - first of the
    streamed tokens); the first token after the re-admission is just another ITL gap."""
    c = Collector(1)
    c.on_arrival(0, 0.0, 100)
    c.on_admit(0, 0)
    c.on_decode_admit(0, 0)
    c.on_tokens(np.array([0], dtype=np.int64), 10.0, 0)
    c.on_tokens(np.array([0], dtype=np.int64), 20.0, 0)
    c.on_decode_admit(0, 1)  # preempted, re-admitted (here on another worker)
    c.on_tokens(np.array([0], dtype=np.int64), 500.0, 1)
    assert (c.first_token.item(0), c.second_token.item(0), c.last_token.item(0)) == (10.0, 20.0, 500.0)
    assert not c.young


def test_per_request_sample_memory_is_compact() -> None:
    n = 10_000
    c = Collector(n)
    per_request = sum(
        getattr(c, name).nbytes
        for name in ("arrival", "first_token", "second_token", "last_token", "tokens", "status",
                     "input_length", "reused", "first_admitted")
    ) / n
    assert per_request <= 64


def _collector_with(statuses: list[TerminalStatus]) -> Collector:
    c = Collector(len(statuses))
    for rid, status in enumerate(statuses):
        c.on_arrival(rid, float(rid), 100)
        c.on_admit(rid, 25)
        c.on_decode_admit(rid)
    ids = np.array([rid for rid, s in enumerate(statuses) if s is TerminalStatus.COMPLETED], dtype=np.int64)
    c.on_tokens(ids, 50.0)
    c.on_tokens(ids, 60.0)
    for rid, status in enumerate(statuses):
        c.on_terminal(rid, status, 60.0)
    return c


def test_summary_totals_count_only_completed_requests() -> None:
    c = _collector_with([TerminalStatus.COMPLETED, TerminalStatus.REJECTED, TerminalStatus.COMPLETED,
                         TerminalStatus.FAILED, TerminalStatus.CANCELED])
    s = build_summary(c, handoff_order="source-first", sla=SlaThresholds())
    assert s["num_requests"] == 5 and s["completed_requests"] == 2
    assert (s["rejected_requests"], s["failed_requests"], s["canceled_requests"], s["incomplete_requests"]) == (1, 1, 1, 0)
    assert s["total_input_tokens"] == 200 and s["total_output_tokens"] == 4
    assert s["prefix_cache_reused_ratio"] == 0.25
    assert s["duration_ms"] == 60.0
    assert s["output_throughput_tok_s"] == pytest.approx(4 / 0.06)
    assert s["num_ttft_samples"] == 2
    assert s["mean_ttft_ms"] == pytest.approx(49.0)  # arrivals 0 and 2
    assert s["mean_tpot_ms"] == 10.0 and s["mean_ttst_ms"] == 10.0
    assert s["handoff_order"] == "source-first"
    assert "goodput_completed_requests" not in s
    for stat in ("mean", "min", "max", "median", "p75", "p90", "p95", "p99", "std"):
        for metric in ("ttft", "ttst", "tpot", "itl", "e2e_latency"):
            assert f"{stat}_{metric}_ms" in s
        assert f"{stat}_output_token_throughput_per_user" in s


def test_first_terminal_wins() -> None:
    c = Collector(1)
    c.on_arrival(0, 0.0, 10)
    assert c.on_terminal(0, TerminalStatus.REJECTED, 5.0)
    assert not c.on_terminal(0, TerminalStatus.CANCELED, 6.0)
    assert c.status[0] == TerminalStatus.REJECTED


def test_goodput_only_with_sla() -> None:
    c = _collector_with([TerminalStatus.COMPLETED] * 3)
    s = build_summary(c, handoff_order="source-first", sla=SlaThresholds(ttft_ms=49.0))
    assert s["goodput_completed_requests"] == 2  # ttft 50, 49, 48


def test_stable_json_is_sorted_and_rounded() -> None:
    text = stable_json({"b": 1.23456789, "a": float("nan"), "c": [0.1 + 0.2, -0.0]})
    assert text == '{\n  "a": null,\n  "b": 1.234568,\n  "c": [\n    0.3,\n    0.0\n  ]\n}\n'


def test_request_uuid_is_deterministic() -> None:
    assert request_uuid(5) == request_uuid(5) != request_uuid(6)


class _Oracle:
    """The collector's contract, token by token: every pass of every worker looks at every
    watched request (no per-worker watch lists, no bulk runs, no reused-array shortcut)."""

    def __init__(self, n: int) -> None:
        self.tokens = [0] * n
        self.first = [math.nan] * n
        self.second = [math.nan] * n
        self.last = [math.nan] * n
        self.young: dict[int, int] = {}
        self.gaps: list[float] = []

    def admit(self, rid: int) -> None:
        if self.tokens[rid] < 2:  # a re-admission after the second token watches nothing
            self.young[rid] = self.tokens[rid]

    def emit(self, ids: list[int], t: float) -> None:
        for rid in ids:
            if self.last[rid] == self.last[rid]:
                self.gaps.append(t - self.last[rid])
            self.tokens[rid] += 1
            self.last[rid] = t
        for rid, seen in list(self.young.items()):
            now = self.tokens[rid]
            if now == seen:
                continue
            if now == 1:
                self.first[rid] = t
                self.young[rid] = 1
            else:
                if seen == 0:
                    self.first[rid] = t
                self.second[rid] = t
                del self.young[rid]


_STEP = st.tuples(st.integers(0, 2), st.integers(0, 6), st.integers(0, 5), st.integers(0, 3))


@settings(max_examples=150, deadline=None)
@given(st.lists(_STEP, min_size=1, max_size=60))
def test_collector_matches_a_token_by_token_oracle(steps: list[tuple[int, int, int, int]]) -> None:
    """Per-worker watch lists, bulk runs, the reused-array shortcut and forgetting completed
    requests change no number: random decode traffic of three workers (admissions, moves and
    re-admissions of preempted requests, single passes, runs, completions) against the oracle."""
    _check_against_oracle(steps)


@settings(max_examples=150, deadline=None)
@given(st.lists(_STEP, min_size=1, max_size=60))
def test_collector_numpy_path_matches_the_oracle(steps: list[tuple[int, int, int, int]]) -> None:
    """The same with every pass on the path for large batches (numpy on the array views, and
    its test for "every continuing member last emitted at this worker's previous pass")."""
    with mock.patch.object(collector_module, "_SMALL_BATCH", 0):
        _check_against_oracle(steps)


def _check_against_oracle(steps: list[tuple[int, int, int, int]]) -> None:
    n = 40
    c, o = Collector(n), _Oracle(n)
    batch: dict[int, list[int]] = {0: [], 1: [], 2: []}
    arrays = {w: np.array([], dtype=np.int64) for w in batch}
    parked: list[int] = []  # preempted, waiting for a new admission
    next_rid = 0
    t = 0.0

    def admit(w: int, rid: int) -> None:
        c.on_decode_admit(rid, w)
        o.admit(rid)
        batch[w].append(rid)
        arrays[w] = np.array(batch[w], dtype=np.int64)  # a new array: the batch changed

    for w, op, arg, dt in steps:
        t += float(dt)
        members = batch[w]
        if op == 0 and next_rid < n:  # a new request joins
            admit(w, next_rid)
            next_rid += 1
        elif op == 1:  # a preempted or another worker's request is admitted here
            others = [r for v in batch if v != w for r in batch[v]]
            pool = parked + others
            if pool:
                rid = pool[arg % len(pool)]
                if rid in parked:
                    parked.remove(rid)
                else:
                    v = next(v for v in batch if rid in batch[v])
                    batch[v].remove(rid)
                    arrays[v] = np.array(batch[v], dtype=np.int64)
                admit(w, rid)
        elif op in (2, 4) and members:  # one pass; with op 4 its last member finishes
            c.on_tokens(arrays[w], t, w)
            o.emit(members, t)
            if op == 4:
                rid = members.pop()
                arrays[w] = np.array(members, dtype=np.int64)
                c.on_terminal(rid, TerminalStatus.COMPLETED, t)
        elif op == 3 and members:  # a bulk run of arg + 2 passes
            times = t + np.cumsum(np.array([1.0 + (i * dt) % 3 for i in range(arg + 2)]))
            c.on_tokens(arrays[w], float(times[-1]), w, times)
            for x in times.tolist():
                o.emit(members, x)
            t = float(times[-1])
        elif op == 5 and members:  # preemption: the request leaves without a terminal
            parked.append(members.pop(arg % len(members)))
            arrays[w] = np.array(members, dtype=np.int64)
    assert c.tokens.tolist() == o.tokens
    for got, want in ((c.first_token, o.first), (c.second_token, o.second), (c.last_token, o.last)):
        assert np.array_equal(got, np.array(want), equal_nan=True)
    live = {r for m in batch.values() for r in m} | set(parked)
    assert {r: s for r, s in o.young.items() if r in live} == {r: s for r, s in c.young.items() if r in live}
    itl = c.gaps.itl_stats()
    want = sorted(max(g, 0.0) for g in o.gaps)
    assert itl.count == len(want)
    assert c.gaps.itl.total == math.fsum(want)  # integer gaps: every weighted product is exact
    if want:
        assert (itl.min, itl.max) == (want[0], want[-1])
        assert itl.median == pytest.approx(want[nearest_rank(len(want), 50.0)], rel=2e-3)


def test_sketch_quantile_is_the_bucket_representative_even_beyond_min_and_max() -> None:
    """Gaps that all fall in one bucket: every quantile is that bucket's representative, which
    may lie above the largest or below the smallest sample (the reference's sketch does not
    clamp it; a one-request vLLM replay, 1536-token prompt, 30 tokens, block 64, reports
    median ITL 5.818253245... below its min 5.819112...)."""
    s = LogSketch()
    gamma = (1 + 0.001) / (1 - 0.001)
    values = [5.8191124, 5.8198, 5.8205526]
    s.add_many(np.array(values))
    st_ = s.stats()
    i = math.ceil(math.log(values[0]) / math.log(gamma))
    assert all(math.ceil(math.log(v) / math.log(gamma)) == i for v in values)
    rep = 2.0 * gamma ** i / (gamma + 1.0)
    assert rep < st_.min
    assert st_.median == pytest.approx(rep, rel=1e-12) and st_.p99 == pytest.approx(rep, rel=1e-12)
    assert st_.median == pytest.approx(5.818253245173, rel=1e-9)


@pytest.mark.parametrize(("c", "prev"), [(0, [1.0]), (3, [0.5, 2.0, 2.0]), (65_530, [1.0] * 10), (70_000, [1.5])])
def test_gap_split_is_the_same_gaps_one_by_one(c: int, prev: list[float]) -> None:
    """``add_split`` (a joiner's pass: ``c`` equal gaps, then one per joiner) stages exactly
    what ``add_many`` of the same gaps does, across a full staging buffer and past its size."""
    split, plain = GapSketches(), GapSketches()
    for sk in (split, plain):
        sk.add_many(np.linspace(0.5, 40.0, 100))
        sk.add_same(3.0, 7)
    split.add_split(10.0, 7.25, c, prev)
    plain.add_many(10.0 - np.array([7.25] * c + prev, dtype=np.float64))
    for sk in (split, plain):
        sk.add_many(np.array([0.0, 2.5]))
        sk.flush()
    assert split.itl.stats() == plain.itl.stats() and split.itl.count == 100 + 7 + c + len(prev) + 2
    assert split.per_user.stats() == plain.per_user.stats()



def _runs_vs_gaps(runs: list[tuple[list[float], int]], start: float) -> None:
    staged, plain = GapSketches(), GapSketches()
    for durations, weight in runs:
        times = np.array(durations, dtype=np.float64)
        times[0] += start
        np.add.accumulate(times, out=times)  # back-to-back passes
        staged.add_run(times, weight)
        for a, b in zip(times.tolist(), times[1:].tolist()):
            plain.add_same(b - a, weight)
        start = float(times[-1])
    assert staged.itl_stats() == plain.itl_stats() and staged.itl.count == plain.itl.count
    assert staged.per_user_stats() == plain.per_user_stats()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(st.floats(0.0, 50.0), min_size=1, max_size=40), st.integers(1, 90)),
                min_size=1, max_size=30),
       st.floats(0.0, 1e6))
def test_runs_fold_as_their_gaps_one_by_one(runs: list[tuple[list[float], int]], start: float) -> None:
    """``add_run`` (a bulk run's end times, staged as they are and subtracted once a flush
    joins the staged runs) folds what ``add_same`` of each gap between consecutive end times
    does."""
    _runs_vs_gaps(runs, start)


def test_runs_fold_as_their_gaps_past_the_staging_buffer() -> None:
    """The same across many flushes of the staging buffer and for a run longer than it."""
    rng = np.random.default_rng(3)
    runs = [(rng.uniform(5.0, 40.0, int(n)).tolist(), int(w))
            for n, w in zip(rng.integers(1, 3000, 40), rng.integers(1, 200, 40))]
    runs.insert(7, (rng.uniform(5.0, 40.0, 20_000).tolist(), 3))
    _runs_vs_gaps(runs, 1234.5)
