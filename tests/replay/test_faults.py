"""Seeded faults in the replay: validation, the must-hold runs, every fault kind at every phase
of the handoff in both orders, worker crashes with and without restart, planted leaks."""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dmocker.conformance.stream import check_native
from dmocker.conformance.validator import Validator
from dmocker.engines.registry import make_worker
from dmocker.handoff import HandoffCoordinator, HandoffOrder
from dmocker.replay import ReplayConfig, run
from dmocker.replay.collector import Collector
from dmocker.replay.fault_driver import FaultDriver
from dmocker.replay.faults import FaultKind, FaultPlan, Pool, ScheduledFault, WorkerCrash, parse_worker_crash
from dmocker.replay.invariants import check_end_of_run
from dmocker.replay.report import SlaThresholds, build_summary
from dmocker.replay.runtime import ClusterControl, DisaggRuntime
from dmocker.replay.workload import AdmissionQueue
from dmocker.fuzz.scenario import Request, ScenarioWorkload

ENGINES = {HandoffOrder.SOURCE_FIRST: "vllm", HandoffOrder.DESTINATION_FIRST: "sglang"}

# --- validation -----------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["cancel_rate", "fail_rate", "timeout_rate"])
@pytest.mark.parametrize("value", [-0.1, 1.5, math.nan, math.inf])
def test_bad_rates_are_rejected(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"fault_{field}"):
        FaultPlan(**{field: value})  # type: ignore[arg-type]


def test_bad_crashes_are_rejected() -> None:
    for text in ("gpu:0@5", "decode:x@5", "decode:0@-1", "decode:0", "decode:0@nan", "decode:-1@5"):
        with pytest.raises(ValueError, match="--worker-crash"):
            parse_worker_crash(text)
    with pytest.raises(ValueError, match="finite time"):
        FaultPlan(restart_s=-1.0)
    with pytest.raises(ValueError, match="decode pool has 2 worker"):
        run(ReplayConfig.from_values({
            "synthetic": 3, "faults": FaultPlan(crashes=(WorkerCrash(Pool.DECODE, 2, 10.0),)),
        }))


def test_cli_bad_fault_flags_exit_2_and_write_nothing(tmp_path: Path) -> None:
    from dmocker.cli.main import main

    out, rec = tmp_path / "r.json", tmp_path / "r.jsonl"
    for flags in (["--fault-cancel-rate", "1.5"], ["--fault-fail-rate", "nan"], ["--worker-crash", "prefill:7@10"],
                  ["--worker-crash", "prefill:0@-5"], ["--worker-restart-s", "-2", "--worker-crash", "decode:0@1"]):
        assert main(["replay", "--synthetic", "3", "--quiet", "--out", str(out), "--per-request", str(rec), *flags]) == 2
        assert not out.exists() and not rec.exists()
        assert not list(tmp_path.iterdir())


# --- the must-hold runs ---------------------------------------------------------------------------

_FLAGS = ["--synthetic", "150", "--kv-transfer-bandwidth", "20", "--kv-bytes-per-token", "200000",
          "--fault-cancel-rate", "0.04", "--fault-fail-rate", "0.04", "--fault-timeout-rate", "0.04",
          "--fault-seed", "7", "--worker-crash", "decode:1@2500", "--worker-crash", "prefill:0@4000",
          "--worker-restart-s", "1.5", "--quiet"]


def _cli(tmp: Path, tag: str, engine: str, hashseed: str) -> tuple[int, list[str]]:
    paths = [tmp / f"{tag}.json", tmp / f"{tag}.jsonl", tmp / f"{tag}-e.jsonl"]
    extra = ["--engine", engine] + (["--block-size", "64"] if engine == "sglang" else [])
    proc = subprocess.run(
        [sys.executable, "-m", "dmocker.cli.main", "replay", *_FLAGS, *extra, "--out", str(paths[0]),
         "--per-request", str(paths[1]), "--events", str(paths[2])],
        env={**os.environ, "PYTHONHASHSEED": hashseed}, capture_output=True, text=True, check=False,
    )
    return proc.returncode, [hashlib.md5(p.read_bytes()).hexdigest() for p in paths]


@pytest.mark.slow  # quick twins: the fault kinds, crashes and leaks below
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_faulty_runs_hold_every_invariant_and_rerun_byte_identically(tmp_path: Path, engine: str) -> None:
    code_a, md5_a = _cli(tmp_path, "a", engine, "1")
    code_b, md5_b = _cli(tmp_path, "b", engine, "12345")
    assert code_a == 0 and code_b == 0
    assert md5_a == md5_b
    summary = json.loads((tmp_path / "a.json").read_text())["summary"]
    assert summary["leaked_kv_blocks"] == 0
    assert summary["invariants_ok"] is True
    keys = ("completed_requests", "rejected_requests", "failed_requests", "canceled_requests", "incomplete_requests")
    assert sum(summary[k] for k in keys) == summary["num_requests"] == 150
    injected = summary["faults_injected"]
    assert injected["cancel"] > 0 and injected["fail"] > 0 and injected["timeout"] > 0
    assert injected["worker_crash"] == 2 and injected["worker_restart"] == 2
    causes = summary["failures_by_cause"]
    assert sum(causes.values()) == summary["failed_requests"] + summary["canceled_requests"] + summary["rejected_requests"]
    v = Validator(HandoffOrder.SOURCE_FIRST if engine == "vllm" else HandoffOrder.DESTINATION_FIRST)
    with open(tmp_path / "a-e.jsonl", encoding="utf-8") as fh:
        check_native(fh, v, keep_going=True)
    assert v.result().exit_code == 0


def test_zero_rates_change_nothing(tmp_path: Path) -> None:
    plain = run(ReplayConfig.from_values({
        "synthetic": 60, "per_request": tmp_path / "a.jsonl", "events": tmp_path / "a-e.jsonl",
    }))
    zero = run(ReplayConfig.from_values({
        "synthetic": 60, "per_request": tmp_path / "b.jsonl", "events": tmp_path / "b-e.jsonl",
        "faults": FaultPlan(),
    }))
    assert plain.to_json() == zero.to_json()
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    assert (tmp_path / "a-e.jsonl").read_bytes() == (tmp_path / "b-e.jsonl").read_bytes()


# --- each fault kind at each phase, both orders ---------------------------------------------------

PHASES = ("before_submit", "while_held", "while_reserved", "during_transfer", "after_activation", "after_success")
# Zero-width by the protocol, so never between two steps: source-first issues StartTransfer in
# the step that reserves the destination; destination-first in the step that holds the source.
UNOBSERVABLE = {HandoffOrder.SOURCE_FIRST: "while_reserved", HandoffOrder.DESTINATION_FIRST: "while_held"}


def _phase(order: HandoffOrder, label: str) -> str | None:
    """The handoff phase a coordinator state label is in (None: a transient in-between state)."""
    r = dict(part.split("=") for part in label.split())
    if r["mode"] == "succeeded":
        return "after_success"
    if r["mode"] != "active":
        return None
    if r["source"] in ("not_submitted", "submit_pending"):
        return "before_submit"
    if r["transfer"] in ("pending", "scheduled"):
        return "during_transfer"
    if r["destination"] == "activated":
        return "after_activation"
    if r["transfer"] == "none" and r["source"] == "held":
        return "while_held"
    if r["transfer"] == "none" and r["destination"] == "reserved":
        return "while_reserved"
    return None


def _run_one(order: HandoffOrder, kind: FaultKind, step: int, crash: WorkerCrash | None) -> tuple[str | None, str]:
    """One request (plus a companion), a fault after its coordinator's ``step``-th input; returns
    the phase it landed in and the verdict of the end-of-run checks."""
    engine = ENGINES[order]
    pargs, dargs = ReplayConfig.from_values({"engine": engine, "block_size": 16, "num_gpu_blocks": 64,
                                             "kv_transfer_bandwidth": 0.01, "kv_bytes_per_token": 1000}).engine_args()
    workload = ScenarioWorkload((Request(0.0, 96, 3), Request(1.0, 64, 2)))
    plan = FaultPlan(crashes=(crash,) if crash else (), restart_s=0.02 if crash else None)
    driver = FaultDriver(plan, prefill_args=pargs, decode_args=dargs)
    original = driver.factory

    def factory(rid: int, o: HandoffOrder, **kw: object) -> HandoffCoordinator:
        coord = original(rid, o, **kw)  # type: ignore[arg-type]
        if rid == 0:
            driver._due[0] = [(step, kind)]  # noqa: SLF001 - the test forces the draw
            from dmocker.replay.fault_driver import StepCountingCoordinator

            coord = StepCountingCoordinator(rid, o, driver._on_step, **kw)  # type: ignore[arg-type]  # noqa: SLF001
        return coord

    landed: list[str | None] = []
    land = driver.land

    def spy(rid: int, k: FaultKind) -> None:
        c = rt.control.coordinator_of(rid)
        landed.append(_phase(order, c.state_label()) if c is not None else None)
        land(rid, k)

    driver.land = spy  # type: ignore[method-assign]
    events = io.StringIO()
    collector = Collector(workload.num_requests)
    rt = DisaggRuntime(
        admission=AdmissionQueue(workload), prefill_args=pargs, decode_args=dargs,
        prefill_workers=[make_worker(pargs, 0)], decode_workers=[make_worker(dargs, 0)],
        order=order, collector=collector, events=events, coordinator_factory=factory,
    )
    driver.attach(rt.control)
    rt.run()
    summary = build_summary(collector, handoff_order=order.value, sla=SlaThresholds())
    eor = check_end_of_run(rt.control, collector, summary, order=order, finished=True)
    v = Validator(order)
    check_native(events.getvalue().splitlines(keepends=True), v, keep_going=True)
    verdict = "ok" if eor.ok and v.result().exit_code == 0 else f"{eor.breaks} / log {v.result().exit_code}"
    return (landed[0] if landed else None), verdict


@pytest.mark.parametrize("order", list(HandoffOrder), ids=[o.value for o in HandoffOrder])
@pytest.mark.parametrize("kind", list(FaultKind), ids=[k.value for k in FaultKind])
def test_each_fault_kind_at_each_phase(order: HandoffOrder, kind: FaultKind) -> None:
    seen: set[str] = set()
    # Before submit needs the prefill pool to be briefly empty (source-first) or the submit
    # to wait for a reservation (destination-first): a crash of the one prefill worker at t=0.
    cases: list[tuple[int, WorkerCrash | None]] = [(k, None) for k in range(10)]
    cases += [(k, WorkerCrash(Pool.PREFILL, 0, 0.0)) for k in range(3)]
    for step, crash in cases:
        phase, verdict = _run_one(order, kind, step, crash)
        assert verdict == "ok", (step, crash, phase, verdict)
        if phase is not None:
            seen.add(phase)
    assert seen == set(PHASES) - {UNOBSERVABLE[order]}, sorted(seen)


# --- worker crashes -------------------------------------------------------------------------------


@pytest.mark.parametrize("restart", [None, 0.5])
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_worker_crash_with_and_without_restart(engine: str, restart: float | None) -> None:
    crashes = (WorkerCrash(Pool.DECODE, 0, 1500.0), WorkerCrash(Pool.PREFILL, 1, 2500.0))
    report = run(ReplayConfig.from_values({
        "synthetic": 80, "engine": engine, "block_size": 64,
        "faults": FaultPlan(crashes=crashes, restart_s=restart),
    }))
    s = report.summary
    assert s["invariants_ok"] is True, s["invariant_breaks"]
    assert s["leaked_kv_blocks"] == 0
    causes = s["failures_by_cause"]
    assert isinstance(causes, dict) and isinstance(causes["worker_crash"], int) and causes["worker_crash"] > 0
    injected = s["faults_injected"]
    assert isinstance(injected, dict)
    assert injected["worker_crash"] == 2 and injected["worker_restart"] == (2 if restart else 0)


def test_a_pool_crashed_for_good_fails_its_requests() -> None:
    report = run(ReplayConfig.from_values({
        "synthetic": 20, "prefill_workers": 1, "faults": FaultPlan(crashes=(WorkerCrash(Pool.PREFILL, 0, 200.0),)),
    }))
    s = report.summary
    assert s["invariants_ok"] is True, s["invariant_breaks"]
    assert s["completed_requests"] + s["failed_requests"] == 20  # type: ignore[operator]
    assert isinstance(s["failed_requests"], int) and s["failed_requests"] > 0


def test_scheduled_faults_land_at_their_time() -> None:
    plan = FaultPlan(schedule=(ScheduledFault(0.5, 0, FaultKind.CANCEL), ScheduledFault(10_000.0, 1, FaultKind.FAIL)))
    s = run(ReplayConfig.from_values({"synthetic": 4, "faults": plan})).summary
    assert s["canceled_requests"] == 1
    assert s["faults_injected"] == {"cancel": 1, "fail": 0, "timeout": 0, "worker_crash": 0, "worker_restart": 0}


# --- the checker catches planted leaks ------------------------------------------------------------


@pytest.mark.parametrize("name,rate,invariant", [("SkipsReleaseSource", 0.0, "no_leaked_kv"),
                                                 ("NeverCancelsDestination", 0.3, "canceled_means_clean")])
def test_planted_leaks_are_caught(name: str, rate: float, invariant: str) -> None:
    from dmocker.replay.coordinators import CoordinatorFault
    from tests.fuzz import leaky

    cls: Callable[..., object] = getattr(leaky, name)
    plan = FaultPlan(cancel_rate=rate, seed=1)
    try:
        report = run(ReplayConfig.from_values({"synthetic": 30, "coordinator": cls, "faults": plan}))
    except CoordinatorFault as exc:  # the monitor sees it before the end state does
        assert exc.invariant == invariant
        return
    s = report.summary
    assert s["invariants_ok"] is False
    names = [b["invariant"] for b in s["invariant_breaks"]]  # type: ignore[index,union-attr]
    assert invariant in names
    assert isinstance(s["leaked_kv_blocks"], int) and s["leaked_kv_blocks"] > 0


def test_a_leak_planted_in_an_engine_is_caught() -> None:
    """A worker that keeps a block after its request is gone: no_leaked_kv names it."""
    from dmocker.replay import end_of_run

    real = end_of_run.check_end_of_run

    def leaky_check(rt: ClusterControl, *a: object, **kw: object):  # type: ignore[no-untyped-def]
        rt.workers(1)[0].pool.take(3)  # type: ignore[attr-defined]
        return real(rt, *a, **kw)  # type: ignore[arg-type]

    end_of_run.check_end_of_run = leaky_check  # type: ignore[assignment]
    try:
        s = run(ReplayConfig.from_values({"synthetic": 5})).summary
    finally:
        end_of_run.check_end_of_run = real
    assert s["invariants_ok"] is False and s["leaked_kv_blocks"] == 3


def test_a_request_is_never_decoded_after_it_failed_before_activation(tmp_path: Path) -> None:
    plan = FaultPlan(fail_rate=0.3, timeout_rate=0.3, seed=4)
    run(ReplayConfig.from_values({
        "synthetic": 60, "kv_transfer_bandwidth": 20.0, "kv_bytes_per_token": 200_000, "faults": plan,
        "per_request": tmp_path / "r.jsonl",
    }))
    failed_early = 0
    for line in (tmp_path / "r.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec["terminal_status"] == "failed" and rec["destination_activated_ms"] is None:
            failed_early += 1
            assert rec["decode_admit_ms"] is None and rec["output_length"] == 0, rec
    assert failed_early > 0


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_failures_include_failed_submits_and_reservations(tmp_path: Path, engine: str) -> None:
    """Half the failures are a FAILED outcome of the first or second acquiring command: the
    command never reaches a worker, so the request has no worker on that side."""
    report = run(ReplayConfig.from_values({
        "synthetic": 40, "engine": engine, "block_size": 64, "faults": FaultPlan(fail_rate=1.0, seed=2),
        "per_request": tmp_path / "r.jsonl", "events": tmp_path / "e.jsonl",
    }))
    assert report.summary["invariants_ok"] is True, report.summary["invariant_breaks"]
    first, second = ("prefill_worker_idx", "decode_worker_idx")[:: 1 if engine == "vllm" else -1]
    recs = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert all(r["terminal_status"] == "failed" for r in recs)
    assert any(r[first] is None for r in recs)  # the first acquire failed
    assert any(r[first] is not None and r[second] is None for r in recs)  # the second failed
    causes = report.summary["failures_by_cause"]
    assert isinstance(causes, dict) and causes["action_failed"] == 40


def test_fault_kinds_are_the_specs_terminal_facts() -> None:
    """What each fault delivers and the cause it records are the spec's (facts.*.fault)."""
    from dmocker.handoff import FACT_CLASSES, load_spec
    from dmocker.replay.faults import FaultKind

    spec = load_spec()
    by_name = {f.fault.name: f for f in spec.fault_facts if f.fault is not None}
    assert sorted(by_name) == sorted(k.value for k in FaultKind)
    for kind in FaultKind:
        fact = by_name[kind.value]
        assert kind.fact is FACT_CLASSES[fact.name] and fact.terminal
        assert fact.fault is not None and kind.cause.value == fact.fault.cause
    assert [k for k in FaultKind if k.fails_acquire] == [FaultKind.FAIL]
