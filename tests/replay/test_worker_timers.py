"""The workers' own clocks in a replay: the source's hold expiry (``--kv-abort-timeout-s``, fail
or recompute), SGLang's waiting and bootstrap timeouts and heartbeats, and the faults that stall
a transfer or drop heartbeats.  Runs replay byte for byte, their event logs conform, and a run
where no timer fires is exactly the run without it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dmocker.cli.conform import main as conform_main
from dmocker.cli.replay import main as replay_main
from dmocker.handoff import load_spec
from dmocker.replay import ReplayConfig, run

CONGESTED = dict(synthetic=40, rate=50.0, decode_workers=1, max_num_seqs=2, isl_mean=300, osl_mean=200)


def _run(tmp: Path, name: str, **kw: object) -> tuple[dict[str, object], bytes, bytes]:
    rec, ev = tmp / f"{name}.jsonl", tmp / f"{name}-events.jsonl"
    report = run(ReplayConfig.from_values({"per_request": rec, "events": ev, **CONGESTED, **kw}))
    return dict(report.summary), rec.read_bytes(), ev.read_bytes()


def test_expired_holds_fail_and_replay_identically(tmp_path: Path) -> None:
    s1, rec1, ev1 = _run(tmp_path, "a", kv_abort_timeout_s=0.3)
    s2, rec2, ev2 = _run(tmp_path, "b", kv_abort_timeout_s=0.3)
    timers = s1["worker_timers"]
    assert isinstance(timers, dict) and timers["source_expirations"] > 0
    assert timers["stranded_block_seconds"] > 0
    causes = s1["failures_by_cause"]
    assert isinstance(causes, dict) and causes["transfer_timeout"] == timers["source_expirations"]
    assert s1["invariants_ok"] is True  # includes the event log's conformance
    assert (rec1, ev1) == (rec2, ev2)
    timed_out = [json.loads(line) for line in ev1.splitlines()[1:] if b'"timed_out"' in line]
    assert len(timed_out) == timers["source_expirations"]


def test_no_expiry_no_trace_of_the_timer(tmp_path: Path) -> None:
    with_default, rec_d, ev_d = _run(tmp_path, "d")
    without, rec_n, ev_n = _run(tmp_path, "n", kv_abort_timeout_s=None)
    assert "worker_timers" not in with_default
    for s in (with_default, without):
        s.pop("wall_seconds", None)
    assert with_default == without and rec_d == rec_n and ev_d == ev_n


def test_destination_first_has_no_source_hold_timer(tmp_path: Path) -> None:
    s, _, _ = _run(tmp_path, "s", engine="sglang", kv_abort_timeout_s=0.001)
    assert "worker_timers" not in s


def test_destination_wait_timeout_fails_slow_prefills(tmp_path: Path) -> None:
    kw = dict(engine="sglang", synthetic=30, rate=200.0, prefill_workers=1, isl_mean=4000, osl_mean=20)
    rec, ev = tmp_path / "w.jsonl", tmp_path / "w-events.jsonl"
    s = run(ReplayConfig.from_values({"per_request": rec, "events": ev, **kw,
                                      "disaggregation_waiting_timeout_s": 0.05})).summary
    timers = s["worker_timers"]
    assert isinstance(timers, dict) and timers["destination_timeouts"] > 0 and "source_expirations" not in timers
    causes = s["failures_by_cause"]
    assert isinstance(causes, dict) and causes["transfer_timeout"] == timers["destination_timeouts"]
    assert s["invariants_ok"] is True
    # the default (300 s) never fires on this run, and leaves no trace
    plain = run(ReplayConfig.from_values(dict(kw))).summary
    assert "worker_timers" not in plain and plain["failed_requests"] == 0


# ---- stalls, recomputation, bootstrap and heartbeats ------------------------------------------

from hypothesis import example, given, settings, strategies as st  # noqa: E402

from dmocker.replay.faults import HeartbeatLoss, Pool, parse_heartbeat_loss  # noqa: E402
from dmocker.replay.worker_timers import heartbeat_detections  # noqa: E402

LIGHT = dict(synthetic=60, rate=20.0, isl_mean=600, osl_mean=40)


def _events(ev: bytes) -> list[dict[str, object]]:
    return [json.loads(line) for line in ev.splitlines()[1:]]


def _after(events: list[dict[str, object]], kind: str) -> list[tuple[dict[str, object], dict[str, object]]]:
    """Each ``kind`` line with the next line of the same handoff."""
    out = []
    for i, e in enumerate(events):
        if e["event"] == kind:
            nxt = next(f for f in events[i + 1:] if f["handoff"] == e["handoff"])
            out.append((e, nxt))
    return out


def _light(tmp: Path, name: str, **kw: object) -> tuple[dict[str, object], bytes, bytes]:
    rec, ev = tmp / f"{name}.jsonl", tmp / f"{name}-events.jsonl"
    report = run(ReplayConfig.from_values({"per_request": rec, "events": ev, **LIGHT, **kw}))
    return dict(report.summary), rec.read_bytes(), ev.read_bytes()


def test_a_stalled_read_outlasting_the_hold_fails_and_replays_identically(tmp_path: Path) -> None:
    kw = dict(fault_stall_rate=0.2, fault_stall_s=2.0, kv_abort_timeout_s=1.0)
    s1, rec1, ev1 = _light(tmp_path, "a", **kw)
    s2, rec2, ev2 = _light(tmp_path, "b", **kw)
    assert (rec1, ev1) == (rec2, ev2)
    timers, injected = s1["worker_timers"], s1["faults_injected"]
    assert isinstance(timers, dict) and isinstance(injected, dict)
    assert timers["source_expirations"] == injected["transfer_stall"] > 0
    assert s1["failed_requests"] == timers["source_expirations"]
    assert s1["invariants_ok"] is True and s1["leaked_kv_blocks"] == 0
    events = _events(ev1)
    # every stall is caught by the source's timer, which fails the read (never a completion after it)
    assert all(nxt["event"] == "timed_out" for _, nxt in _after(events, "source_expired"))
    assert {e["handoff"] for e in events if e["event"] == "transfer_stalled"} == \
        {e["handoff"] for e in events if e["event"] == "source_expired"}


def test_a_stall_shorter_than_the_timers_only_delays(tmp_path: Path) -> None:
    s, _, ev = _light(tmp_path, "s", fault_stall_rate=0.2, fault_stall_s=0.5)
    plain, _, _ = _light(tmp_path, "p")
    assert "worker_timers" not in s and s["failed_requests"] == 0 and s["invariants_ok"] is True
    assert any(e["event"] == "transfer_stalled" for e in _events(ev))
    assert float(s["mean_ttft_ms"]) > float(plain["mean_ttft_ms"])  # type: ignore[arg-type]


def test_recompute_serves_every_request_whose_source_expired(tmp_path: Path) -> None:
    """kv_load_failure_policy=recompute: a stalled read (in flight) and a late destination (not
    yet reserved) both end in a recomputation; nothing fails and nothing leaks."""
    for name, kw in (("stall", dict(LIGHT, fault_stall_rate=0.2, fault_stall_s=2.0, kv_abort_timeout_s=1.0)),
                     ("late", dict(CONGESTED, kv_abort_timeout_s=0.3))):
        rec, ev = tmp_path / f"{name}.jsonl", tmp_path / f"{name}-events.jsonl"
        values = {"per_request": rec, "events": ev, "kv_load_failure_policy": "recompute", **kw}
        s = run(ReplayConfig.from_values(values)).summary
        timers = s["worker_timers"]
        assert isinstance(timers, dict)
        assert timers["recomputed_prefills"] == timers["source_expirations"] > 0, name
        assert s["failed_requests"] == 0 and s["leaked_kv_blocks"] == 0 and s["invariants_ok"] is True, name
        events = _events(ev.read_bytes())
        recomputed = _after(events, "kv_recomputed")
        assert len(recomputed) == timers["recomputed_prefills"]
        assert not any(e["event"] == "source_expired" for e in events)
        # the source's ReleaseSource finds nothing left to free, and the request completes
        done = {e["handoff"] for e in events if e["event"] == "completed" and e.get("detail") == "success"}
        assert {e["handoff"] for e, _ in recomputed} <= done


def test_sglang_wait_timeout_catches_a_stalled_transfer(tmp_path: Path) -> None:
    s, _, ev = _light(tmp_path, "w", engine="sglang", fault_stall_rate=0.2, fault_stall_s=2.0,
                      disaggregation_waiting_timeout_s=1.0)
    timers = s["worker_timers"]
    assert isinstance(timers, dict) and timers["destination_timeouts"] > 0
    assert s["invariants_ok"] is True and s["leaked_kv_blocks"] == 0
    assert all(nxt["event"] == "timed_out" for _, nxt in _after(_events(ev), "destination_timed_out"))


def test_bootstrap_timeout_fails_requests_the_decode_side_has_no_room_for(tmp_path: Path) -> None:
    kw = dict(engine="sglang", synthetic=80, rate=50.0, decode_workers=1, max_num_seqs=2, isl_mean=300, osl_mean=200)
    rec, ev = tmp_path / "b.jsonl", tmp_path / "b-events.jsonl"
    s = run(ReplayConfig.from_values({"per_request": rec, "events": ev, **kw,
                                      "disaggregation_bootstrap_timeout_s": 0.5})).summary
    timers = s["worker_timers"]
    assert isinstance(timers, dict) and timers["bootstrap_timeouts"] > 0
    assert s["failed_requests"] == timers["bootstrap_timeouts"] and s["invariants_ok"] is True
    events = _events(ev.read_bytes())
    pairs = _after(events, "bootstrap_timed_out")
    assert all(nxt["event"] == "timed_out" for _, nxt in pairs)
    # a destination still waiting for room: nothing was submitted to a prefill worker
    submitted = {e["handoff"] for e in events if e["event"] == "prefill_submitted"}
    assert not submitted & {e["handoff"] for e, _ in pairs}


def test_heartbeat_loss_fails_the_transfers_from_that_prefill_worker(tmp_path: Path) -> None:
    kw = dict(LIGHT, engine="sglang", fault_stall_rate=0.5, fault_stall_s=4.0, heartbeat_loss=["prefill:0@1000+3000"],
              disaggregation_heartbeat_interval_s=1.0)
    rec, ev = tmp_path / "h.jsonl", tmp_path / "h-events.jsonl"
    s = run(ReplayConfig.from_values({"per_request": rec, "events": ev, **kw})).summary
    timers, causes = s["worker_timers"], s["failures_by_cause"]
    assert isinstance(timers, dict) and isinstance(causes, dict)
    assert timers["heartbeat_failures"] == causes["heartbeat_loss"] > 0
    assert s["invariants_ok"] is True and s["leaked_kv_blocks"] == 0
    events = _events(ev.read_bytes())
    lost = _after(events, "heartbeat_lost")
    assert {e["t_ms"] for e, _ in lost} <= {2000.0, 4000.0}  # 1 s probes, 2 failures each
    assert all(nxt["event"] == "failed" for _, nxt in lost)
    prefill_of = {e["handoff"]: e["worker"] for e in events if e["event"] == "prefill_submitted"}
    assert {prefill_of[e["handoff"]] for e, _ in lost} == {"prefill-0"}


@settings(max_examples=200, deadline=None)
@example(t=5e-324, d=1.0, interval=0.1, failures=1)  # a start that rounds to probe 0 when divided
@given(t=st.floats(0, 1e5), d=st.floats(1, 1e5), interval=st.floats(0.1, 30), failures=st.integers(1, 5))
def test_heartbeat_detections_are_every_max_failure_th_failed_probe(t: float, d: float, interval: float,
                                                                   failures: int) -> None:
    loss = HeartbeatLoss(Pool.PREFILL, 0, t, d)
    got = heartbeat_detections(loss, interval, failures)
    probe = interval * 1000.0
    failed = [k * probe for k in range(int(t // probe), int((t + d) // probe) + 2) if t <= k * probe < t + d]
    assert got == failed[failures - 1::failures]


def test_heartbeat_loss_text_round_trips_and_names_what_is_wrong() -> None:
    loss = parse_heartbeat_loss("prefill:1@2500+20000")
    assert loss == HeartbeatLoss(Pool.PREFILL, 1, 2500.0, 20000.0) and parse_heartbeat_loss(loss.label()) == loss
    for bad, needle in (("prefill:0@1", "expected prefill:INDEX@T_MS+DURATION_MS"),
                        ("decode:0@1+2", "from a prefill worker"), ("prefill:0@1+0", "> 0"),
                        ("prefill:x@1+2", "not an integer"), ("prefill:0@1+y", "not a number")):
        try:
            parse_heartbeat_loss(bad)
        except ValueError as exc:
            assert needle in str(exc), (bad, str(exc))
        else:
            raise AssertionError(bad)


@pytest.mark.parametrize("engine,flags", [
    ("vllm", ["--fault-stall-rate", "0.3", "--fault-stall-s", "2", "--kv-abort-timeout-s", "1"]),
    ("vllm", ["--fault-stall-rate", "0.3", "--fault-stall-s", "2", "--kv-abort-timeout-s", "1",
              "--kv-load-failure-policy", "recompute"]),
    ("sglang", ["--fault-stall-rate", "0.3", "--fault-stall-s", "4", "--disaggregation-waiting-timeout-s", "2",
                "--heartbeat-loss", "prefill:0@500+3000", "--disaggregation-heartbeat-interval-s", "1"]),
])
def test_a_run_with_stalls_and_expiries_replays_identically_and_its_log_conforms(
        tmp_path: Path, engine: str, flags: list[str]) -> None:
    """As a user runs it: the replay verb twice, byte-identical outputs, then the conform verb."""
    outs = []
    for name in ("a", "b"):
        out, rec, ev = (tmp_path / f"{name}{suffix}" for suffix in (".json", ".jsonl", "-events.jsonl"))
        assert replay_main(["--synthetic", "30", "--rate", "20", "--isl-mean", "600", "--osl-mean", "40",
                            "--engine", engine, *flags, "--out", str(out), "--per-request", str(rec),
                            "--events", str(ev), "--quiet"]) == 0
        report = json.loads(out.read_bytes())
        report.pop("config", None)
        report["summary"].pop("wall_seconds", None)
        outs.append((report, rec.read_bytes(), ev.read_bytes()))
    assert outs[0] == outs[1]
    summary = outs[0][0]["summary"]
    assert summary["invariants_ok"] is True and summary["leaked_kv_blocks"] == 0
    assert summary["worker_timers"] and summary["faults_injected"]["transfer_stall"] > 0
    worker_kinds = {e["event"] for e in _events(outs[0][2])} & {k.name for k in load_spec().worker_kinds}
    assert "transfer_stalled" in worker_kinds and len(worker_kinds) >= 2
    assert conform_main([str(tmp_path / "a-events.jsonl")]) == 0


def test_the_summary_table_says_which_timers_fired(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert replay_main(["--synthetic", "30", "--rate", "20", "--isl-mean", "600", "--osl-mean", "40",
                        "--fault-stall-rate", "0.3", "--fault-stall-s", "2", "--kv-abort-timeout-s", "1"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("worker timers"))
    assert "source_expirations 10" in row and "stranded_block_seconds" in row and "kv_abort" not in row
    assert replay_main(["--synthetic", "30", "--rate", "20", "--isl-mean", "600", "--osl-mean", "40"]) == 0
    assert "worker timers" not in capsys.readouterr().out  # none fired, none shown
