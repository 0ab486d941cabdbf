"""The planner through ``run()`` and ``dmocker replay`` on the mock engines.

Determinism and the end-of-run invariants with scaling, the report's planner section, the
error surface (exit 2 bad configuration, exit 1 a planner failing mid-run, nothing written).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dmocker.cli.conform import main as conform_main
from dmocker.replay import PlannerError, PlannerMetrics, ReplayConfig, ScalingDecision, run

from . import sample_planners as sp

SMALL = dict(synthetic=120, rate=40.0, isl_mean=900, osl_mean=12, block_size=64)
M = "tests.replay.planner.sample_planners"


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_scaling_run_is_deterministic_complete_and_its_event_log_conforms(
    tmp_path: Path, engine: str, capsys: pytest.CaptureFixture[str]
) -> None:
    outs = []
    for k in range(2):
        ev, recs = tmp_path / f"ev{k}.jsonl", tmp_path / f"rec{k}.jsonl"
        rep = run(ReplayConfig.from_values({
            **SMALL, "engine": engine, "planner": sp.Stepper(), "startup_time_s": 0.05, "events": ev,
            "per_request": recs, "kv_transfer_bandwidth": 10.0, "kv_bytes_per_token": 131072,
        }))
        outs.append((rep.to_json(), recs.read_bytes(), ev.read_bytes()))
    assert outs[0] == outs[1]
    s = rep.summary
    assert s["completed_requests"] == 120 and s["incomplete_requests"] == 0
    p = rep.planner
    assert p is not None and p["ticks"] >= 3
    workers = p["prefill_workers"]
    assert isinstance(workers, list) and len(workers) > 2  # scaled up at least once
    assert any(w["state"] == "removed" for w in workers)  # type: ignore[index]
    assert json.loads(rep.to_json())["planner"]["decisions"][0]["prefill_target"] == 3
    assert rep.config["planner"]["policy"] == f"{M}:Stepper"  # type: ignore[index]
    assert conform_main([str(tmp_path / "ev0.jsonl")]) == 0, capsys.readouterr().out


class _Recorder:
    def __init__(self) -> None:
        self.seen: list[PlannerMetrics] = []

    def initial_tick_ms(self) -> float:
        return 250.0

    def on_tick(self, metrics: PlannerMetrics) -> ScalingDecision:
        self.seen.append(metrics)
        return ScalingDecision(next_tick_ms=metrics.now_ms + 250.0)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_worker_snapshots_read_the_mock_engines(engine: str) -> None:
    rec = _Recorder()
    run(ReplayConfig.from_values({**SMALL, "engine": engine, "planner": rec}))
    snaps = [(m.prefill.workers, m.decode.workers) for m in rec.seen]
    prefill = [w for p, _ in snaps for w in p]
    decode = [w for _, d in snaps for w in d]
    assert any(w.last_pass_prefill_tokens > 0 for w in prefill)
    assert any(w.last_pass_decode_tokens > 0 and w.running_requests > 0 for w in decode)
    assert any(0.0 < w.kv_usage <= 1.0 and w.kv_total_blocks > 0 for w in decode)
    assert all(w.last_pass_ms is None or w.last_pass_ms >= 0.0 for w in prefill + decode)
    assert sum(m.traffic.num_req for m in rec.seen) <= 120
    assert any(m.traffic.avg_kv_hit_rate > 0.0 for m in rec.seen)  # synthetic prefix groups


def test_without_a_planner_the_report_has_no_planner_section() -> None:
    rep = run(ReplayConfig.from_values({"synthetic": 10}))
    assert rep.planner is None and "planner" not in json.loads(rep.to_json())
    assert rep.config["planner"]["policy"] is None  # type: ignore[index]


def test_builtin_policies_run_and_record_their_settings() -> None:
    for name in ("throughput", "load"):
        rep = run(ReplayConfig.from_values({
            **SMALL, "planner": name, "throughput_interval_s": 1.0, "load_interval_s": 0.5, "sla_ttft_ms": 300.0,
        }))
        assert rep.summary["completed_requests"] == 120
        planner, sla = rep.config["planner"], rep.config["sla"]
        assert isinstance(planner, dict) and planner["policy"] == name and planner["load_interval_s"] == 0.5
        assert isinstance(sla, dict) and sla["ttft_ms"] == 300.0
        assert rep.planner is not None and rep.planner["ticks"] > 0


@pytest.mark.parametrize(
    ("cls", "words"),
    [
        (sp.RaisesOnSecondTick, ["tick 1", "RuntimeError", "boom"]),
        (sp.NegativeCount, ["tick 0", "prefill_workers", "-1"]),
        (sp.FloatCount, ["tick 0", "decode_workers", "2.0"]),
        (sp.HugeCount, ["tick 0", "decode_workers", "0..4096"]),
        (sp.NanNextTick, ["tick 0", "next_tick_ms", "nan"]),
    ],
)
def test_a_planner_failing_mid_run_names_the_tick_and_writes_nothing(tmp_path: Path, cls: type, words: list[str]) -> None:
    recs = tmp_path / "r.jsonl"
    with pytest.raises(PlannerError) as err:
        run(ReplayConfig.from_values({**SMALL, "planner": cls(), "per_request": recs}))
    for w in words:
        assert w in str(err.value)
    assert not recs.exists() and not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"planner": sp.BadInitialTick()}, ["initial_tick_ms", "'soon'"]),
        ({"planner": object()}, ["no initial_tick_ms"]),
        ({"planner": "nope"}, ["MODULE:CLASS"]),
        ({"planner": "no_such_module_xyz:P"}, ["cannot import"]),
        ({"planner": f"{M}:Missing"}, ["has no class Missing"]),
        ({"planner": f"{M}:NeedsArgs"}, ["NeedsArgs()", "TypeError"]),
        ({"planner": "load", "startup_time_s": -1.0}, ["startup_time_s"]),
        ({"planner": "load", "load_interval_s": 0.0}, ["load_interval_s"]),
        ({"planner": "throughput", "max_gpu_budget": 1}, ["max_gpu_budget"]),
        ({"planner": "throughput", "min_endpoint": -1}, ["min_endpoint"]),
    ],
)
def test_bad_planner_configuration_is_a_value_error(kwargs: dict[str, object], words: list[str]) -> None:
    with pytest.raises(ValueError) as err:
        run(ReplayConfig.from_values({"synthetic": 5, **kwargs}))
    for w in words:
        assert w in str(err.value)


def _cli(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dmocker.cli.replay", *args], capture_output=True, text=True,
                          env={**os.environ}, timeout=120, check=False)


@pytest.mark.slow  # four dmocker processes
def test_cli_exit_codes_and_nothing_half_written(tmp_path: Path) -> None:
    out, recs = tmp_path / "o.json", tmp_path / "r.jsonl"
    base = ["--synthetic", "60", "--rate", "40", "--quiet", "--out", str(out), "--per-request", str(recs)]
    bad = _cli([*base, "--planner", f"{M}:Missing"])
    assert bad.returncode == 2 and "has no class Missing" in bad.stderr
    bad = _cli([*base, "--planner", "load", "--startup-time-s", "-2"])
    assert bad.returncode == 2 and "startup_time_s" in bad.stderr
    failed = _cli([*base, "--planner", f"{M}:RaisesOnSecondTick"])
    assert failed.returncode == 1 and "planner tick 1" in failed.stderr, failed.stderr
    assert not out.exists() and not recs.exists()
    ok = _cli([*base, "--planner", f"{M}:Stepper", "--startup-time-s", "0.1"])
    assert ok.returncode == 0, ok.stderr
    rep = json.loads(out.read_text())
    assert rep["config"]["planner"]["startup_time_s"] == 0.1 and rep["planner"]["ticks"] > 0
