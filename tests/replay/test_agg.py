"""The aggregated baseline (``--mode agg --workers N``): what it shares with the disaggregated
replay, what it refuses, and the sweep that sets it against every P+D split of the same GPUs.
Its fidelity to Dynamo's aggregated replay: tests/engines/test_agg_fidelity.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dmocker.cli.main import main as dmocker_main
from dmocker.engines.interface import EngineArgs, EngineRequest, WorkerType
from dmocker.engines.registry import make_worker
from dmocker.replay import ReplayConfig, run
from dmocker.replay.config import ConfigError

SMALL = {"synthetic": 120, "rate": 30.0, "isl_mean": 900, "osl_mean": 40}


def _agg(**values: object) -> ReplayConfig:
    return ReplayConfig.from_values({**SMALL, "mode": "agg", "workers": 3, **values})


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("router", ["round-robin", "kv"])
def test_an_aggregated_run_completes_cleanly_and_reruns_byte_identically(
        tmp_path: Path, engine: str, router: str) -> None:
    reports = []
    for i in range(2):
        records = tmp_path / f"records{i}.jsonl"
        report = run(_agg(engine=engine, router=router, per_request=str(records)))
        reports.append((report.summary, records.read_bytes()))
    summary, records_bytes = reports[0]
    assert reports[1] == reports[0]
    assert summary["completed_requests"] == 120 and summary["invariants_ok"] is True
    assert summary["leaked_kv_blocks"] == 0 and summary["cluster_mode"] == "agg"
    assert summary["prefill_worker_seconds"] == 0.0  # booked as decode-pool time, as the reference
    lines = [json.loads(line) for line in records_bytes.decode().splitlines()]
    assert len(lines) == 120
    assert {r["worker_idx"] for r in lines} == {0, 1, 2}
    assert all(r["terminal_status"] == "completed" and r["ttft_ms"] > 0 for r in lines)
    assert "source_held_ms" not in lines[0]  # no handoff fields


def test_a_pass_is_charged_prefill_plus_the_decode_of_requests_already_decoding() -> None:
    """One request alone: its first token comes with the prefill's time only; every later pass
    costs one decode step (the reference's aggregated vLLM worker)."""
    args = EngineArgs(engine="vllm", worker_type=WorkerType.AGGREGATED, block_size=64).validate()
    w = make_worker(args, 0)
    w.submit(EngineRequest(0, 1000, 3, tuple(range(1000 // 64))))
    prefill_args = EngineArgs(engine="vllm", worker_type=WorkerType.PREFILL, block_size=64).validate()
    p = make_worker(prefill_args, 0)
    p.submit(EngineRequest(0, 1000, 1, tuple(range(1000 // 64))))
    first = w.start_pass(0.0, False)
    alone = p.start_pass(0.0, False)
    assert first is not None and alone is not None
    assert first.end_ms == alone.end_ms  # prefill time only
    w.finish_pass()
    second = w.start_pass(first.end_ms, False)
    assert second is not None and second.end_ms > first.end_ms


def test_an_aggregated_run_uses_the_same_engines_as_a_disaggregated_one() -> None:
    """With one worker and requests far apart, the aggregated TTFT is the prefill's time: the
    same number the disaggregated prefill pool reports for the same prompt, before its handoff."""
    summary = run(ReplayConfig.from_values({"synthetic": 5, "rate": 0.01, "isl_mean": 1000, "osl_mean": 2,
                                            "spread": 0.0, "prefix_groups": 0, "mode": "agg", "workers": 1})).summary
    assert summary["completed_requests"] == 5
    assert summary["min_ttft_ms"] == pytest.approx(summary["max_ttft_ms"])


@pytest.mark.parametrize(("values", "field"), [
    ({"fault_cancel_rate": 0.1}, "faults.cancel_rate"),
    ({"worker_crash": ["decode:0@100"]}, "faults.crashes"),
    ({"planner": "throughput"}, "planner.policy"),
    ({"events": "events.jsonl"}, "outputs.events"),
    ({"decode.max_num_seqs": 8}, "prefill.max_num_seqs"),
    ({"workers": 0}, "cluster.workers"),
])
def test_what_an_aggregated_cluster_cannot_have_is_refused_by_field(values: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        _agg(**values)
    assert err.value.field == field


def test_the_cli_runs_it_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.json"
    assert dmocker_main(["replay", "--synthetic", "60", "--mode", "agg", "--workers", "2", "--out", str(out)]) == 0
    assert "vllm 2 aggregated" in capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["config"]["cluster"]["mode"] == "agg" and report["config"]["cluster"]["workers"] == 2
    # the report's config reruns the same run
    again = tmp_path / "again.json"
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(report["config"]))
    assert dmocker_main(["replay", "--config", str(cfg), "--quiet", "--out", str(again)]) == 0
    assert json.loads(again.read_text())["summary"] == report["summary"]


def test_sweep_gpus_sets_aggregated_against_every_split(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep.json"
    assert dmocker_main(["sweep", "--synthetic", "80", "--rate", "20", "--gpus", "3", "--jobs", "1",
                         "--out", str(out)]) == 0
    table = capsys.readouterr().out
    for name in ("3 agg", "1P+2D", "2P+1D"):
        assert name in table
    doc = json.loads(out.read_text())
    shapes = sorted((r["config"].get("mode"), r["gpus"]) for r in doc["runs"])
    assert shapes == [("agg", 3), ("disagg", 3), ("disagg", 3)]
    assert doc["axes"]["gpus"] == [3]
    assert all(isinstance(r["goodput_per_gpu"], float) for r in doc["runs"])


def test_sweep_gpus_refuses_a_swept_pool_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert dmocker_main(["sweep", "--synthetic", "20", "--gpus", "4", "--prefill-workers", "1,2"]) == 2
    assert "--gpus sets the cluster's shape" in capsys.readouterr().err


def _agg_both_ways(values: dict[str, object], tmp_path: Path) -> tuple[tuple[object, bytes], tuple[object, bytes]]:
    from dmocker.replay import run_pass_by_pass

    out = []
    for name, replay in (("bulk", run), ("per_pass", run_pass_by_pass)):
        records = tmp_path / f"{name}.jsonl"
        report = replay(ReplayConfig.from_values({**values, "mode": "agg", "per_request": str(records)}))
        out.append((report.summary, records.read_bytes()))
    return out[0], out[1]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_bulk_runs_on_aggregated_workers_match_the_per_pass_simulation(engine: str, tmp_path: Path) -> None:
    """Arrivals cut the runs of an aggregated worker where the per-pass replay would be."""
    values = {"synthetic": 60, "rate": 8.0, "isl_mean": 600, "osl_mean": 120, "engine": engine, "block_size": 64,
              "workers": 2}
    bulk, per_pass = _agg_both_ways(values, tmp_path)
    assert bulk == per_pass


@pytest.mark.slow  # quick twin: test_bulk_runs_on_aggregated_workers_match_the_per_pass_simulation
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(engine=st.sampled_from(["vllm", "sglang"]), n=st.integers(3, 30), rate=st.floats(1.0, 200.0),
       isl=st.integers(20, 900), osl=st.integers(1, 150), blocks=st.integers(40, 2000), seqs=st.integers(1, 16),
       turns=st.integers(1, 3), workers=st.integers(1, 3), seed=st.integers(0, 1000))
def test_aggregated_bulk_runs_match_under_pressure(tmp_path: Path, engine: str, n: int, rate: float, isl: int,
                                                   osl: int, blocks: int, seqs: int, turns: int, workers: int,
                                                   seed: int) -> None:
    values = {"synthetic": n, "rate": rate, "isl_mean": isl, "osl_mean": osl, "turns": turns, "seed": seed,
              "engine": engine, "block_size": 16, "num_gpu_blocks": blocks, "max_num_seqs": seqs,
              "workers": workers}
    from dmocker.replay import run_pass_by_pass
    from dmocker.replay.errors import DeadEndError

    stops = []
    for replay in (run, run_pass_by_pass):
        try:
            replay(ReplayConfig.from_values({**values, "mode": "agg"}))
            stops.append("")
        except (ValueError, DeadEndError) as exc:
            # a prompt larger than the pool is refused; one whose output outgrows it dead-ends
            stops.append(f"{type(exc).__name__}: {exc}")
    assert stops[0] == stops[1]  # alike both ways
    if stops[0]:
        return
    bulk, per_pass = _agg_both_ways(values, tmp_path)
    assert bulk == per_pass
