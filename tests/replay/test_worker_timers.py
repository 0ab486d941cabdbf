"""The source's hold expiry in a replay (``--kv-abort-timeout-s``): holds whose destination is
never reserved in time are freed and their handoffs fail; runs replay byte for byte, their
event logs conform, and a run where no hold expires is exactly the run without the timer."""

from __future__ import annotations

import json
from pathlib import Path

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
