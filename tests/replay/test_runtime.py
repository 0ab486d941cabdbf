"""Runtime rules (action execution, phases, the per-timestamp drain order, the reference's runtime
properties) on fake workers.

The fake workers (fake_engine.py) have fixed pass costs, so every expected time below can be
worked out by hand.
"""

from __future__ import annotations

import pytest

from dmocker.handoff import Canceled, HandoffOrder, TimedOut
from dmocker.replay.events import DeadEndError
from dmocker.replay.workload import SyntheticSpec, SyntheticWorkload

from .helpers import fake_run

SF = HandoffOrder.SOURCE_FIRST
DF = HandoffOrder.DESTINATION_FIRST


def _wl(n: int = 4, *, rate: float = 100.0, isl: int = 600, osl: int = 3, turns: int = 1, delay: float = 0.0) -> SyntheticWorkload:
    return SyntheticWorkload(
        SyntheticSpec(requests=n, rate=rate, isl_mean=isl, osl_mean=osl, spread=0.0, turns=turns, turn_delay_ms=delay)
    )


def _by_id(run: object) -> dict[int, dict[str, object]]:
    return {r["request_id"]: r for r in run.records}  # type: ignore[attr-defined]


@pytest.mark.parametrize("order", [SF, DF])
def test_everything_completes_and_every_handoff_ends_done(order: HandoffOrder) -> None:
    run = fake_run(_wl(6), order=order, n_prefill=2, n_decode=2)
    assert run.summary["completed_requests"] == 6
    assert run.summary["incomplete_requests"] == 0
    assert len(run.records) == 6
    assert all(r["terminal_status"] == "completed" for r in run.records)
    assert not run.runtime.table.live  # every request retired (phase Done)
    assert run.summary["handoff_order"] == order.value


def test_report_is_decode_only() -> None:
    # The prefill's single token is hidden: output tokens are the decode ones only, and TTFT
    # covers prefill (10 ms) + transfer (0) + the first decode pass (5 ms).
    run = fake_run(_wl(1, osl=3))
    rec = run.records[0]
    assert rec["output_length"] == 3
    assert run.summary["total_output_tokens"] == 3
    assert rec["ttft_ms"] == pytest.approx(15.0)
    assert run.runtime.effects.source_output_tokens == 1


def test_pools_are_separate() -> None:
    run = fake_run(_wl(4), n_prefill=2, n_decode=2)
    for w in run.prefill:
        assert {k for k, _, _ in w.log} <= {"submit", "release", "cancel_source"}
    for w in run.decode:
        assert {k for k, _, _ in w.log} <= {"reserve", "activate", "cancel_destination"}


def test_round_robin_sends_request_i_to_worker_i_mod_n() -> None:
    run = fake_run(_wl(6), n_prefill=2, n_decode=3)
    for rid, rec in _by_id(run).items():
        assert rec["prefill_worker_idx"] == rid % 2
        assert rec["decode_worker_idx"] == rid % 3


def test_source_first_lifecycle_order_per_request() -> None:
    run = fake_run(_wl(8, rate=400.0), n_prefill=2, n_decode=2)
    for r in run.records:
        assert r["prefill_admit_ms"] <= r["source_held_ms"] <= r["destination_reserved_ms"]
        assert r["destination_reserved_ms"] <= r["destination_activated_ms"] <= r["source_released_ms"]
        assert r["destination_activated_ms"] <= r["decode_admit_ms"] <= r["first_token_ms"]


def test_destination_first_reserves_before_prefill_admission() -> None:
    run = fake_run(_wl(8, rate=400.0), order=DF, n_prefill=2, n_decode=2)
    for r in run.records:
        assert r["destination_reserved_ms"] <= r["prefill_admit_ms"] <= r["source_held_ms"]
        assert r["destination_activated_ms"] <= r["source_released_ms"]


def test_event_log_order_matches_the_lifecycle() -> None:
    run = fake_run(_wl(1))
    kinds = [e["event"] for e in run.events]
    assert kinds == [
        "prefill_submitted", "source_held", "destination_accepted", "destination_reserved",
        "transfer_started", "transfer_completed", "destination_activated", "source_released",
        "completed",
    ]
    assert run.events[-1]["detail"] == "success"


def test_zero_delay_transfer_completes_in_the_same_drain() -> None:
    run = fake_run(_wl(1))
    times = {e["event"]: e["t_ms"] for e in run.events}
    assert times["transfer_started"] == times["transfer_completed"] == times["destination_activated"] == 10.0


def test_transfer_delay_is_applied_once_to_ttft() -> None:
    # 128 tokens x 1e6 bytes at 1 GB/s = 128 ms (delay = tokens x bytes / (GB/s x 1e9) x 1000).
    base = fake_run(_wl(1, isl=128, osl=2)).records[0]
    slow = fake_run(_wl(1, isl=128, osl=2), bandwidth=1.0, kv_bytes=1_000_000).records[0]
    assert slow["ttft_ms"] - base["ttft_ms"] == pytest.approx(128.0)
    assert slow["destination_activated_ms"] - slow["source_held_ms"] == pytest.approx(128.0)


def test_actions_on_a_busy_worker_are_deferred_to_its_pass_end() -> None:
    # Decode passes of 7 ms keep the decode worker busy; activations must land on pass
    # boundaries of that worker, never mid-pass.
    run = fake_run(_wl(6, rate=300.0, osl=6), decode_ms=7.0)
    w = run.decode[0]
    starts = sorted({t for k, _, t in w.log if k == "activate"})
    # the worker's pass boundaries are the decode admission times (all multiples of the pass grid)
    admits = sorted({r["decode_admit_ms"] for r in run.records})
    for t in starts:
        assert t in admits or t == pytest.approx(min(admits))
    for r in run.records:
        assert r["destination_activated_ms"] == r["decode_admit_ms"]


def test_decode_terminal_before_deferred_release_keeps_the_handoff_until_cleanup() -> None:
    # Request 1's activation waits for the decode pass of request 0 (50..65); its release then
    # waits for prefill worker 1, busy with request 3 until ~101, while its 1-token decode
    # ends at 80: the decode terminal precedes ReleaseSource.
    wl = _wl(4, rate=1000.0, osl=1)
    run = fake_run(wl, n_prefill=2, prefill_ms=50.0, decode_ms=15.0)
    late = [r for r in run.records if r["source_released_ms"] > r["terminal_time_ms"]]
    assert late, "scenario should produce a release after the decode terminal"
    for r in late:
        assert r["terminal_status"] == "completed"
    assert run.summary["completed_requests"] == 4
    assert not run.runtime.table.live


def test_rejected_prefill_stays_rejected_with_no_tokens() -> None:
    run = fake_run(_wl(2, isl=600), reject_over=500)
    for r in run.records:
        assert r["terminal_status"] == "rejected"
        assert r["output_length"] == 0
        assert r["ttft_ms"] is None
    assert run.summary["rejected_requests"] == 2
    assert run.summary["completed_requests"] == 0
    assert [e["event"] for e in run.events if e["handoff"] == 0][-1] == "completed"
    assert [e["detail"] for e in run.events if e["event"] == "completed"] == ["canceled", "canceled"]


def test_impossible_destination_unwinds_to_failed_without_stalling() -> None:
    run = fake_run(_wl(2, isl=600), capacity=500)
    assert run.summary["failed_requests"] == 2
    assert all(r["terminal_status"] == "failed" for r in run.records)
    assert not run.runtime.table.live


def test_cancel_during_transfer_ignores_the_stale_completion() -> None:
    # 600 tokens x 1e6 B at 1 GB/s: the transfer runs 10..610 ms; cancel at 100 ms.
    run = fake_run(_wl(1, isl=600), bandwidth=1.0, kv_bytes=1_000_000, inject=[(100.0, 0, Canceled)])
    rec = run.records[0]
    assert rec["terminal_status"] == "canceled"
    assert rec["output_length"] == 0
    kinds = [e["event"] for e in run.events]
    assert "transfer_completed" not in kinds
    assert kinds[-1] == "completed" and run.events[-1]["detail"] == "canceled"
    assert run.runtime.stale_pruned == 1
    assert run.runtime.now_ms < 610.0  # the stale completion did not advance the clock


def test_timeout_maps_to_failed() -> None:
    run = fake_run(_wl(1, isl=600), bandwidth=1.0, kv_bytes=1_000_000, inject=[(100.0, 0, TimedOut)])
    assert run.records[0]["terminal_status"] == "failed"


def test_dead_end_names_the_stuck_requests() -> None:
    with pytest.raises(DeadEndError) as info:
        fake_run(_wl(2), never_reserve=True)
    message = str(info.value)
    assert "request 0" in message and "request 1" in message
    assert "dead end" in message


def test_time_cap_leaves_requests_incomplete() -> None:
    run = fake_run(_wl(10, rate=10.0, osl=30), max_sim_time_ms=400.0)
    s = run.summary
    assert 0 < s["completed_requests"] < 10
    assert s["num_requests"] < 10
    assert s["incomplete_requests"] >= 1
    assert s["num_requests"] == s["completed_requests"] + s["incomplete_requests"]
    assert run.runtime.now_ms <= 400.0
    incomplete = [r for r in run.records if r["terminal_status"] == "incomplete"]
    assert incomplete and all(r["e2e_latency_ms"] is None for r in incomplete)


def test_no_cap_everything_completes() -> None:
    run = fake_run(_wl(10, rate=10.0))
    assert run.summary["completed_requests"] == 10


def test_follow_up_turn_arrives_after_completion_plus_delay() -> None:
    run = fake_run(_wl(6, turns=3, delay=40.0, rate=5.0))
    recs = _by_id(run)
    for rid, rec in recs.items():
        if rec["turn_index"] > 0:
            prev = recs[rid - 1]
            assert rec["arrival_time_ms"] == pytest.approx(prev["terminal_time_ms"] + 40.0)


def test_concurrency_backfill_waits_for_decode_completion() -> None:
    run = fake_run(_wl(5, rate=1000.0), max_in_flight=1)
    recs = [r for _, r in sorted(_by_id(run).items())]
    for prev, nxt in zip(recs, recs[1:]):
        assert nxt["arrival_time_ms"] == pytest.approx(prev["terminal_time_ms"])


def test_concurrency_holds_session_slots_depth_first() -> None:
    # 2 sessions x 3 turns, 1 slot: session 1 starts only after session 0's last turn.
    run = fake_run(_wl(6, turns=3, delay=5.0, rate=1000.0), max_in_flight=1)
    recs = _by_id(run)
    assert recs[3]["arrival_time_ms"] >= recs[2]["terminal_time_ms"]
    assert recs[1]["arrival_time_ms"] == pytest.approx(recs[0]["terminal_time_ms"] + 5.0)


def test_ttft_includes_the_prefill_queueing() -> None:
    # Two simultaneous requests on one prefill worker share one 10 ms pass (fake batches all).
    run = fake_run(_wl(2, rate=1e9))
    for r in run.records:
        assert r["ttft_ms"] >= 15.0 - 1e-9
