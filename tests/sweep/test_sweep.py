"""Every sweep row is the single replay of its configuration, whatever the backend and jobs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dmocker.cli.main import main as dmocker_main
from dmocker.cli.replay import main as replay_main
from dmocker.replay import ReplayConfig, run as replay_run
from dmocker.sweep import Backend, plan_sweep, run_sweep

WORKLOAD = ["--synthetic", "60", "--rate", "25", "--isl-mean", "900", "--osl-mean", "24", "--seed", "3"]
BASE: dict[str, Any] = {"synthetic": 60, "rate": 25.0, "isl_mean": 900, "osl_mean": 24, "seed": 3,
                        "engine": "vllm", "sla_ttft_ms": 120.0}
BASE_CONFIG = ReplayConfig.from_values(BASE)
AXES: dict[str, tuple[Any, ...]] = {"prefill_workers": (1, 2), "decode_workers": (1, 2)}


def _trace(tmp_path: Path) -> Path:
    lines = []
    for i in range(40):
        n = 3 + i % 4
        ids = [0, *range(100 * i + 1, 100 * i + n)]
        lines.append(json.dumps({"timestamp": 40 * i, "input_length": 512 * n - 100,
                                 "output_length": 10 + i % 7, "hash_ids": ids}))
    p = tmp_path / "trace.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


def _sweep_json(tmp_path: Path, name: str, args: list[str]) -> tuple[int, bytes]:
    out = tmp_path / name
    code = dmocker_main(["sweep", *args, "--out", str(out), "--quiet"])
    return code, out.read_bytes()


def test_rows_equal_single_replays_serial_and_pool() -> None:
    plan = plan_sweep(BASE_CONFIG, AXES)
    serial = run_sweep(plan, jobs=1)
    pooled = run_sweep(plan, jobs=2)
    assert serial.document == pooled.document
    assert [r.config for r in serial.rows] == plan.configs
    for row in serial.rows:
        single = replay_run(ReplayConfig.from_values({**BASE, **row.config}))
        assert row.summary == single.summary


def test_sweep_json_rows_are_what_replay_out_writes(tmp_path: Path) -> None:
    code, data = _sweep_json(tmp_path, "sweep.json", [*WORKLOAD, "--prefill-workers", "1,2", "--decode-workers", "1",
                                                      "--sla-ttft-ms", "120", "--jobs", "2"])
    assert code == 0
    doc = json.loads(data)
    # one value is not an axis: it goes to "base"; rows name the swept values only
    assert [r["config"] for r in doc["runs"]] == [{"prefill_workers": 1}, {"prefill_workers": 2}]
    assert doc["base"]["cluster"]["decode_workers"] == 1 and [r["gpus"] for r in doc["runs"]] == [2, 3]
    for run in doc["runs"]:
        out = tmp_path / "one.json"
        assert replay_main([*WORKLOAD, "--sla-ttft-ms", "120", "--prefill-workers", str(run["config"]["prefill_workers"]),
                            "--decode-workers", "1", "--out", str(out), "--quiet"]) == 0
        assert run["summary"] == json.loads(out.read_text())["summary"]


@pytest.mark.slow  # starts a local Ray cluster
def test_byte_identical_across_jobs_and_ray(tmp_path: Path, ray_cluster: Any) -> None:
    args = [*WORKLOAD, "--prefill-workers", "1..2", "--decode-workers", "1,2", "--sla-ttft-ms", "120"]
    outs = [
        _sweep_json(tmp_path, "j1.json", [*args, "--jobs", "1"]),
        _sweep_json(tmp_path, "j2.json", [*args, "--jobs", "2"]),
        _sweep_json(tmp_path, "ray.json", [*args, "--backend", "ray"]),
    ]
    assert [c for c, _ in outs] == [0, 0, 0]
    assert outs[0][1] == outs[1][1] == outs[2][1]


@pytest.mark.slow
def test_trace_shipped_to_pool_and_ray(tmp_path: Path, ray_cluster: Any) -> None:
    trace = _trace(tmp_path)
    base = {"trace": str(trace), "engine": "sglang", "sla_ttft_ms": 200.0}
    plan = plan_sweep(ReplayConfig.from_values(base),
                      {"prefill_workers": (1, 2), "decode_workers": (1,), "arrival_speedup_ratio": (1.0, 3.0)})
    results = [run_sweep(plan, jobs=1), run_sweep(plan, jobs=2), run_sweep(plan, backend=Backend.RAY)]
    assert results[0].document == results[1].document == results[2].document
    for row in results[2].rows:
        assert row.ok
        assert row.summary == replay_run(ReplayConfig.from_values({**base, **row.config})).summary


def test_failing_configuration_is_recorded_and_the_sweep_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import dmocker.sweep.task as task_mod

    real = task_mod._replay

    def flaky(config: ReplayConfig) -> Any:
        if config.cluster.prefill_workers == 2:
            raise RuntimeError("worker exploded")
        return real(config)

    monkeypatch.setattr(task_mod, "_replay", flaky)
    out = tmp_path / "sweep.json"
    code = dmocker_main(["sweep", *WORKLOAD, "--prefill-workers", "1..3", "--jobs", "1", "--out", str(out)])
    captured = capsys.readouterr()
    assert code == 1
    doc = json.loads(out.read_text())
    assert doc["failed"] == 1
    assert [("error" in r) for r in doc["runs"]] == [False, True, False]
    assert doc["runs"][1]["error"] == "RuntimeError: worker exploded" and doc["runs"][1]["summary"] is None
    assert "FAILED: RuntimeError: worker exploded" in captured.out
    assert "configuration 1 failed" in captured.err


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--prefill-workers", "4..1"], "bad range '4..1'"),
        (["--decode-workers", "x"], "'x' is not an integer"),
        (["--router", "kv-aware"], "unknown router"),
        (["--engine", "vllm,trtllm"], "trtllm"),
        (["--max-num-seqs", "0", "--engine", "vllm,sglang"], "max_num_seqs"),
        (["--sla-ttft-ms", "-5"], "--sla-ttft-ms: field 'sla.ttft_ms': must be > 0"),
        (["--sla-attainment", "1.5"], "--sla-attainment must be a number in (0, 1]"),
        (["--max-rate"], "--max-rate needs at least one SLA bound"),
        (["--max-rate", "--sla-ttft-ms", "100", "--rate", "10,20"], "do not sweep --rate"),
        (["--plot", "frontier.jpg"], "must end in .png or .svg"),
        (["--ray-address", "auto"], "--ray-address needs --backend ray"),
        (["--per-request", "r.jsonl"], "per-replay output"),
        (["--isl-mean", "0"], "isl_mean"),
        (["--fault-fail-rate", "1.5"], "--fault-fail-rate: field 'faults.fail_rate': must be <= 1"),
        (["--vary", "decode.max_num_seqs=0,4"], "--vary decode.max_num_seqs: 0 must be >= 1"),
        (["--vary", "no_such_field=1,2"], "--vary no_such_field: no such configuration field"),
        (["--vary", "faults.crashes=1,2"], "cannot be swept"),
        (["--vary", "prefill_workers=1,2", "--prefill-workers", "3,4"], "already swept"),
        (["--vary", "cluster.prefill_workers=1,2", "--prefill-workers", "3,4"], "already swept"),
        (["--vary", "max_num_seqs=4,8", "--max-num-seqs", "16"], "--max-num-seqs is also swept"),
    ],
)
def test_bad_input_exits_2_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str], expect: str
) -> None:
    import dmocker.sweep.task as task_mod

    def never(*_a: object, **_k: object) -> Any:
        raise AssertionError("a replay ran")

    monkeypatch.setattr(task_mod, "_replay", never)
    monkeypatch.chdir(tmp_path)
    base = [a for a in WORKLOAD if a not in ("--rate", "25")] if "--rate" in args else list(WORKLOAD)
    code = dmocker_main(["sweep", *base, *args, "--out", "sweep.json", "--jobs", "1"])
    err = capsys.readouterr().err
    assert code == 2
    assert expect in err, err
    assert err.startswith("dmocker sweep: error:") and err.count("\n") == 1
    assert not (tmp_path / "sweep.json").exists()


def test_bad_trace_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [1, 2]}\n{"timestamp": 1}\n')
    code = dmocker_main(["sweep", str(trace), "--prefill-workers", "1,2", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and f"{trace}:2" in err


def test_ray_missing_says_how_to_install(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import dmocker.sweep.runners as runners

    real = runners.importlib.import_module

    def no_ray(name: str, *a: Any) -> Any:
        if name == "ray":
            raise ImportError("No module named 'ray'")
        return real(name, *a)

    monkeypatch.setattr(runners.importlib, "import_module", no_ray)
    code = dmocker_main(["sweep", *WORKLOAD, "--backend", "ray", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and 'pip install "dmocker[ray]"' in err


def test_broken_invariants_fail_the_configuration_but_keep_its_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import dmocker.sweep.task as task_mod

    real = task_mod._replay

    def broken(config: ReplayConfig) -> Any:
        summary = real(config)
        if config.cluster.prefill_workers == 1:
            summary = {**summary, "invariants_ok": False, "invariant_breaks": [{"name": "x"}]}
        return summary

    monkeypatch.setattr(task_mod, "_replay", broken)
    out = tmp_path / "sweep.json"
    assert dmocker_main(["sweep", *WORKLOAD, "--prefill-workers", "1,2", "--jobs", "1", "--out", str(out), "--quiet"]) == 1
    doc = json.loads(out.read_text())
    first, second = doc["runs"]
    assert first["error"].startswith("end-of-run invariants broken") and first["summary"]["invariants_ok"] is False
    assert "error" not in second and doc["failed"] == 1 and doc["ranking"] == [1]
    capsys.readouterr()
    assert dmocker_main(["sweep", "--from-json", str(out)]) == 1
    assert "FAILED: end-of-run invariants broken" in capsys.readouterr().out


def test_router_axis_rows_equal_single_replays() -> None:
    plan = plan_sweep(BASE_CONFIG, {"router": ("round-robin", "kv"), "prefill_workers": (2,)})
    outcome = run_sweep(plan, jobs=2)
    modes = []
    for row in outcome.rows:
        single = replay_run(ReplayConfig.from_values({**BASE, **row.config}))
        assert row.summary == single.summary
        modes.append(row.summary.get("router_mode", "round_robin"))
    assert modes == ["round_robin", "kv_router"]


def test_vary_sweeps_any_field_by_name(tmp_path: Path) -> None:
    """``--vary`` takes a dotted path (one pool) or a name (both pools), numbers and switches; each
    row is the single replay of the base configuration with the row's values."""
    code, data = _sweep_json(tmp_path, "sweep.json", [*WORKLOAD, "--vary", "decode.max_num_seqs=2,64",
                                                      "--vary", "enable_prefix_caching=true,false", "--jobs", "2"])
    assert code == 0
    doc = json.loads(data)
    # Expanded in the configuration's field order (prefill's fields before decode's), the last fastest.
    assert [r["config"] for r in doc["runs"]] == [
        {"decode.max_num_seqs": m, "enable_prefix_caching": c} for c in (True, False) for m in (2, 64)]
    base = ReplayConfig.from_json(doc["base"])
    assert base == ReplayConfig.from_values({k: v for k, v in BASE.items() if k != "sla_ttft_ms"}).resolved()
    summaries = []
    for run in doc["runs"]:
        single = replay_run(base.with_values(run["config"]))
        assert run["summary"] == json.loads(single.to_json())["summary"]
        summaries.append(json.dumps(run["summary"], sort_keys=True))
    assert len(set(summaries)) == 4  # every field swept changes the replay


def test_a_csv_trace_is_swept_like_a_mooncake_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "azure.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                     + "".join(f"2023-11-16 18:15:{10 + i:02d}.5000000,{500 + 37 * i},{5 + i % 4}\n" for i in range(20)))
    out = tmp_path / "sweep.json"
    assert dmocker_main(["sweep", str(trace), "--vary", "decode_workers=1,2", "--out", str(out), "--quiet"]) == 0
    runs = json.loads(out.read_text())["runs"]
    assert [r["summary"]["completed_requests"] for r in runs] == [20, 20]
    bad = tmp_path / "bad.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:10,x,3\n")
    assert dmocker_main(["sweep", str(bad), "--vary", "decode_workers=1,2", "--out", str(tmp_path / "s2.json")]) == 2
    assert f"{bad}:2: field 'ContextTokens'" in capsys.readouterr().err
