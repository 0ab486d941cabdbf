"""Collector arrays, the ITL sketch and the summary statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmocker.replay.collector import Collector, DistributionStats, LogSketch, TerminalStatus, nearest_rank
from dmocker.replay.report import SlaThresholds, build_summary, request_uuid, stable_json


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


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.booleans(), st.integers(0, 3)), min_size=1, max_size=40))
def test_source_shortcut_matches_general_path(steps: list[tuple[int, bool, int]]) -> None:
    """Passing the emitting source (the reused-array shortcut) changes no number."""
    members: dict[int, list[int]] = {0: [0, 1, 2], 1: [5, 6]}
    arrays: dict[int, np.ndarray] = {w: np.array(m, dtype=np.int64) for w, m in members.items()}
    plain, fast = Collector(10), Collector(10)
    for c in (plain, fast):
        for rid in range(10):
            c.on_decode_admit(rid)
    t = 0.0
    for worker, change, extra in steps:
        t += 1.0 + extra
        if change:  # membership changes: a new array object (the engine never mutates one)
            m = members[worker]
            rid = (m[-1] + 1) if worker == 0 else (m[-1] + 1)
            m.append(rid % 10 if rid % 10 not in members[1 - worker] else m[0])
            members[worker] = sorted(set(m))
            arrays[worker] = np.array(members[worker], dtype=np.int64)
        plain.on_tokens(arrays[worker], t)
        fast.on_tokens(arrays[worker], t, worker)
    for name in ("tokens", "first_token", "second_token", "last_token"):
        assert np.array_equal(getattr(plain, name), getattr(fast, name), equal_nan=True)
    assert plain.gaps.itl_stats() == fast.gaps.itl_stats()
    assert plain.gaps.per_user_stats() == fast.gaps.per_user_stats()
    assert plain.gaps.itl.total == fast.gaps.itl.total
