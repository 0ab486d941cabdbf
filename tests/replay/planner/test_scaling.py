"""The reference planner's scaling properties, on fake workers with hand-checkable times.

Fake passes: prefill 10 ms, decode 5 ms per token; Poisson arrivals (rate 100/s unless said).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dmocker.handoff import Canceled, HandoffOrder
from dmocker.replay import DeadEndError, PlannerMetrics, ScalingDecision
from dmocker.replay.planner import WorkerState

from .helpers import Scripted, planner_run, trace, workload

SF = HandoffOrder.SOURCE_FIRST
DF = HandoffOrder.DESTINATION_FIRST


def _log(workers: list, kind: str) -> list[tuple[int, int, float]]:  # type: ignore[type-arg]
    return [(w.worker_idx, rid, t) for w in workers for k, rid, t in w.log if k == kind]


def test_source_first_with_no_decode_worker_waits_for_a_decode_scale_up() -> None:
    planner = Scripted([(50.0, None, 1)])
    run = planner_run(planner, workload(2), n_decode=0, startup_s=0.1)
    # The sources are held, the reservations parked: the tick sees them pending.
    m = planner.seen[0]
    assert m.decode.active == 0 and m.decode.router_pending == 2
    assert m.router_pending == 2
    ready = run.report["decode_workers"][0]["ready_ms"]
    assert ready == pytest.approx(150.0)
    assert all(t >= ready for _, _, t in _log(run.decode, "reserve"))
    assert run.summary["completed_requests"] == 2
    for r in run.records:
        assert r["source_held_ms"] < 50.0 <= ready <= r["destination_reserved_ms"]
        assert r["decode_worker_idx"] == 0


def test_scale_up_drains_the_parked_prefill_queue_only_once_the_worker_is_ready() -> None:
    planner = Scripted([(5.0, 1, None)])
    run = planner_run(planner, workload(3), n_prefill=0, startup_s=0.2)
    # Arrivals at 0, 10, 20 ms park (no prefill worker); the worker is ready at 205 ms.
    assert planner.seen[0].prefill.router_pending == 1 and planner.seen[0].prefill.starting == 0
    rec = run.report["prefill_workers"][0]
    assert (rec["start_ms"], rec["ready_ms"]) == (5.0, pytest.approx(205.0))
    assert [t for _, _, t in _log(run.prefill, "submit")] == [pytest.approx(205.0)] * 3
    assert all(r["prefill_admit_ms"] >= 205.0 for r in run.records)
    assert run.summary["completed_requests"] == 3


def test_scale_down_cancels_newest_starting_first_then_drains_highest_index() -> None:
    planner = Scripted([(1.0, 4, None), (2.0, 3, None), (3.0, 1, None)])
    run = planner_run(planner, workload(2), n_prefill=2, startup_s=10.0)
    workers = {w["worker"]: w for w in run.report["prefill_workers"]}
    assert workers[3]["state"] == "canceled" and workers[3]["removed_ms"] == 2.0
    assert workers[2]["state"] == "canceled" and workers[2]["removed_ms"] == 3.0
    assert workers[1]["state"] == "removed" and workers[1]["drain_ms"] == 3.0
    assert workers[0]["state"] == "active"
    counts = run.report["prefill_counts"]
    assert counts[1] == {"t_ms": 1.0, "active": 2, "starting": 2, "draining": 0}


def test_a_booking_on_a_draining_destination_survives_and_nothing_new_is_routed_there() -> None:
    # Destination-first: request 1 (arriving at ~10 ms) reserves decode worker 1 and prefills
    # for 10 ms; the tick at 15 ms drains worker 1 while that booking is pending.
    planner = Scripted([(15.0, None, 1)])
    run = planner_run(planner, workload(6), order=DF, n_decode=2)
    assert run.record(1)["decode_worker_idx"] == 1
    assert run.record(1)["terminal_status"] == "completed"
    w1 = run.report["decode_workers"][1]
    assert w1["drain_ms"] == 15.0 and w1["state"] == "removed"
    assert w1["removed_ms"] >= run.record(1)["terminal_time_ms"]
    assert all(t <= 15.0 for idx, _, t in _log(run.decode, "reserve") if idx == 1)
    late = [r for r in run.records if r["arrival_time_ms"] > 15.0]
    assert late and all(r["decode_worker_idx"] == 0 for r in late)
    assert run.summary["completed_requests"] == 6


def test_a_cancel_during_the_transfer_lets_both_pools_scale_to_zero() -> None:
    # 1 MB per token at 1 GB/s: the 600-token transfer of request 0 takes 600 ms (10..610).
    wl = workload(2, rate=1.0)  # request 1 arrives at 1000 ms
    planner = Scripted([(100.0, 0, 0), (500.0, 1, 1)])
    run = planner_run(planner, wl, order=SF, bandwidth=1.0, kv_bytes=1_000_000,
                      inject=[(100.0, 0, Canceled)])
    assert run.record(0)["terminal_status"] == "canceled"
    p0, d0 = run.report["prefill_workers"][0], run.report["decode_workers"][0]
    assert p0["removed_ms"] == 100.0 and d0["removed_ms"] == 100.0
    assert planner.seen[1].prefill.provisioned == 0 and planner.seen[1].decode.provisioned == 0
    # Request 1 is served by the new workers (next unused index: 1).
    assert run.record(1)["terminal_status"] == "completed"
    assert (run.record(1)["prefill_worker_idx"], run.record(1)["decode_worker_idx"]) == (1, 1)
    assert not run.runtime.table.live


def test_worker_seconds_include_the_startup_ramp_and_the_drain_tail() -> None:
    # Decode worker 1 starts at 5 ms (ready at 505); it is drained at 600 ms.
    planner = Scripted([(5.0, None, 2), (600.0, None, 1)])
    run = planner_run(planner, workload(40, rate=50.0, osl=20), startup_s=0.5)
    end = run.runtime.now_ms
    rec = run.report["decode_workers"][1]
    assert (rec["start_ms"], rec["ready_ms"], rec["drain_ms"]) == (5.0, 505.0, 600.0)
    assert rec["removed_ms"] > 600.0  # it finished what it held first
    expected = (end + (rec["removed_ms"] - 5.0)) / 1000.0
    assert run.summary["decode_worker_seconds"] == pytest.approx(expected, rel=1e-12)
    assert run.summary["prefill_worker_seconds"] == pytest.approx(end / 1000.0, rel=1e-12)


class _Every:
    """Ticks every ``period`` ms and never scales."""

    def __init__(self, period: float, *, rearm_now: bool = False) -> None:
        self.period = period
        self.rearm_now = rearm_now
        self.ticks: list[float] = []

    def initial_tick_ms(self) -> float:
        return self.period

    def on_tick(self, metrics: PlannerMetrics) -> ScalingDecision:
        self.ticks.append(metrics.now_ms)
        nxt = metrics.now_ms if self.rearm_now else metrics.now_ms + self.period
        return ScalingDecision(next_tick_ms=nxt)


def test_idle_gaps_are_crossed_tick_by_tick_and_a_finished_run_ticks_no_more() -> None:
    wl = workload(2, rate=1.0 / 3600.0)  # the second request an hour after the first
    p = _Every(5000.0)
    run = planner_run(p, wl)
    arrival = run.record(1)["arrival_time_ms"]
    assert arrival > 100_000
    # One tick per 5 s until the work is done; none after.
    assert p.ticks == [5000.0 * k for k in range(1, len(p.ticks) + 1)]
    assert p.ticks[-1] <= run.runtime.now_ms < p.ticks[-1] + 5000.0
    assert run.runtime.now_ms == pytest.approx(run.record(1)["terminal_time_ms"])


def test_a_tick_rearmed_at_now_is_not_refired() -> None:
    p = _Every(15.0, rearm_now=True)
    planner_run(p, workload(3))
    assert p.ticks == [15.0]


def test_ticks_fire_last_within_a_timestamp(tmp_path: Path) -> None:
    # Request 0: prefill 0..10, decode passes 10..15..20..25.  At 20 ms a decode pass ends,
    # the next one starts and request 1 arrives: the tick at 20 ms sees all of it applied.
    planner = Scripted([(20.0, None, None)])
    run = planner_run(planner, trace(tmp_path / "t.jsonl", [0.0, 20.0]))
    m = planner.seen[0]
    assert m.now_ms == 20.0
    assert m.prefill.workers[0].last_pass_start_ms == 20.0  # request 1 already prefilling
    assert m.decode.workers[0].last_pass_start_ms == 20.0
    assert m.decode.workers[0].last_pass_ms == 5.0
    assert run.summary["completed_requests"] == 2


def test_metrics_snapshot_and_traffic_window(tmp_path: Path) -> None:
    planner = Scripted([(1000.0, None, None), (2000.0, None, None)])
    run = planner_run(planner, trace(tmp_path / "t.jsonl", [0.0, 10.0, 20.0, 30.0, 1500.0]))
    m0 = planner.seen[0]
    assert isinstance(m0, PlannerMetrics) and m0.tick == 0
    assert m0.traffic.duration_s == 1.0 and m0.traffic.num_req == 4
    assert m0.traffic.request_rate == 4.0
    assert m0.traffic.avg_isl == 600.0 and m0.traffic.avg_osl == 3.0
    ttfts = [r["ttft_ms"] for r in run.records if r["request_id"] < 4]
    assert m0.traffic.avg_ttft_ms == pytest.approx(sum(ttfts) / 4)
    assert m0.traffic.avg_itl_ms == pytest.approx(5.0)
    assert m0.traffic.kv_hit_samples == 4 and m0.traffic.avg_kv_hit_rate == 0.0
    assert (m0.prefill.active, m0.prefill.starting, m0.prefill.draining) == (1, 0, 0)
    assert m0.prefill.workers[0].state is WorkerState.ACTIVE
    assert m0.prefill.workers[0].queued_tokens == 0
    with pytest.raises(AttributeError):
        m0.now_ms = 5.0  # type: ignore[misc]
    assert len(planner.seen) == 1  # the run finished before the second tick
    assert run.report["decisions"][0]["completed_in_window"] == 4


def test_queued_prompt_tokens_count_routed_requests_not_yet_admitted(tmp_path: Path) -> None:
    # Request 0 prefills 0..10 ms; requests 1 and 2 arrive at 5 ms and queue behind it.
    planner = Scripted([(5.0, None, None), (12.0, None, None)])
    planner_run(planner, trace(tmp_path / "t.jsonl", [0.0, 5.0, 5.0]))
    first, second = planner.seen
    assert first.prefill.workers[0].queued_tokens == 1200
    assert second.prefill.workers[0].queued_tokens == 0  # admitted at 10 ms


class _NeverServesDecode:
    """Scales the decode pool to zero at its first tick and keeps ticking forever."""

    def initial_tick_ms(self) -> float:
        return 1.0

    def on_tick(self, metrics: PlannerMetrics) -> ScalingDecision:
        return ScalingDecision(None, 0, metrics.now_ms + 100.0)


def test_a_planner_that_leaves_requests_stuck_is_a_dead_end_not_an_endless_run() -> None:
    # Request 0 arrives at 0 and is prefilled; the decode pool is gone from 1 ms on, so its
    # handoff waits for a decode worker that never comes: only ticks are left to happen.
    with pytest.raises(DeadEndError) as err:
        planner_run(_NeverServesDecode(), workload(1))
    assert "request 0" in str(err.value)
    assert err.value.now_ms < 1_000_000.0  # gave up after a bounded number of idle ticks
