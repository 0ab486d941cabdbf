"""The time-series recorder: bounded, exact at bucket boundaries, no effect on the replay."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from dmocker.replay import ReplayConfig, run, run_pass_by_pass
from dmocker.replay.timeseries import CDF_POINTS, TimeSeriesRecorder

SMALL = {"synthetic": 120, "rate": 30.0, "isl_mean": 900, "osl_mean": 30, "seed": 1}


def _drive(rec: TimeSeriesRecorder, times: list[float], state: list[float]) -> None:
    """Jump a fake clock through ``times``; after the jump to times[i] the state is i."""
    for i, t in enumerate(times):
        if t > rec.next_ms:
            rec.sample_until(t)
        state[0] = float(i)
    rec.close(times[-1])


@given(st.lists(st.floats(0.0, 50_000.0), min_size=1, max_size=60), st.integers(4, 32))
def test_gauge_samples_hold_the_state_at_each_boundary(raw: list[float], max_points: int) -> None:
    times = sorted(raw)
    rec = TimeSeriesRecorder(bucket_ms=10.0, max_points=max_points)
    state = [math.nan]
    rec.add_gauge("g", lambda: (("x", state[0]),))
    _drive(rec, times, state)
    s = rec.series()["g"]
    assert s.values.shape[0] <= max_points  # bounded whatever the duration
    bucket = rec.bucket_ms
    for row, value in enumerate(s.values[:, 0]):
        b = row * bucket
        seen = [i for i, t in enumerate(times) if t <= b]  # the last jump at or before b
        expect = float(seen[-1]) if seen else math.nan
        assert (math.isnan(value) and math.isnan(expect)) or value == expect


@given(st.lists(st.tuples(st.floats(0.0, 1e6), st.integers(1, 5)), max_size=80), st.integers(4, 16))
def test_counters_keep_every_event_when_coarsened(events: list[tuple[float, int]], max_points: int) -> None:
    rec = TimeSeriesRecorder(bucket_ms=1.0, max_points=max_points)
    for t, n in events:
        rec.count("failures", "timeout" if n % 2 else "oom", t, float(n))
    series = rec.series()
    if not events:
        assert "failures" not in series
        return
    s = series["failures"]
    assert s.values.shape[0] <= max_points
    assert float(s.values.sum()) == float(sum(n for _, n in events))
    for t, _n in events:
        assert int(t // rec.bucket_ms) < s.values.shape[0]


def test_labels_may_appear_later() -> None:
    rec = TimeSeriesRecorder(bucket_ms=10.0)
    cols: list[tuple[str, float]] = [("prefill", 1.0)]
    rec.add_gauge("workers", lambda: tuple(cols))
    rec.sample_until(25.0)  # boundaries 0, 10, 20
    cols.append(("decode", 2.0))
    rec.sample_until(45.0)  # 30, 40
    s = rec.series()["workers"]
    assert s.labels == ("prefill", "decode")
    assert np.isnan(s.values[:3, 1]).all() and (s.values[3:, 1] == 2.0).all()


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_recording_changes_nothing_and_records_the_standard_series(engine: str) -> None:
    plain = run(ReplayConfig.from_values({"engine": engine, **SMALL}))
    rec = run(ReplayConfig.from_values({"engine": engine, "timeseries": True, **SMALL}))
    assert plain.timeseries is None
    assert rec.summary == plain.summary and rec.to_json() == plain.to_json()
    ts = rec.timeseries
    assert ts is not None
    assert set(ts.series) == {"in_flight", "queue_depth", "kv_usage"}
    assert ts.series["queue_depth"].labels == ("prefill", "decode")
    assert ts.series["kv_usage"].labels == ("prefill-0", "prefill-1", "decode-0", "decode-1")
    kv = ts.series["kv_usage"].values
    assert (kv >= 0).all() and (kv <= 1).all() and kv.max() > 0
    inflight = ts.series["in_flight"].values[:, 0]
    assert inflight.max() > 0 and inflight[-1] == 0  # the final state: everything done
    # completions per second integrate back to the completed count
    completed = ts.completions_per_s.sum() * ts.bucket_ms / 1000.0
    assert completed == pytest.approx(rec.summary["completed_requests"])
    for key in ("ttft", "itl", "e2e"):
        q = ts.cdfs[key]
        assert q.shape == (CDF_POINTS,) and (np.diff(q) >= 0).all()
    assert ts.cdfs["ttft"][-1] == pytest.approx(rec.summary["max_ttft_ms"])
    assert ts.cdfs["e2e"][0] == pytest.approx(rec.summary["min_e2e_latency_ms"])


def test_long_run_stays_bounded() -> None:
    rep = run(ReplayConfig.from_values({
        "synthetic": 300, "rate": 0.5, "isl_mean": 600, "osl_mean": 8, "timeseries": True,
    }))  # ~10 minutes virtual
    ts = rep.timeseries
    assert ts is not None and ts.duration_ms > 500_000
    assert all(s.values.shape[0] <= 1024 for s in ts.series.values())
    assert ts.bucket_ms > 100.0


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("planner", [None, "load"])
def test_bulk_runs_sample_what_the_per_pass_replay_shows(engine: str, planner: str | None) -> None:
    """A bucket boundary inside a bulk decode run samples the per-pass state (KV taken pass by
    pass, not the whole run's at its start): every series equals the per-pass replay's."""
    kw = dict(synthetic=60, rate=10.0, isl_mean=600, osl_mean=300, block_size=16, engine=engine,
              decode_workers=2, timeseries=True, planner=planner, load_interval_s=0.5)
    config = ReplayConfig.from_values(kw)
    bulk, per_pass = run(config), run_pass_by_pass(config)
    assert bulk.to_json() == per_pass.to_json()
    a, b = bulk.timeseries, per_pass.timeseries
    assert a is not None and b is not None and a.series.keys() == b.series.keys()
    for name, got in a.series.items():
        want = b.series[name]
        assert got.labels == want.labels, name
        assert np.array_equal(got.values, want.values, equal_nan=True), name
