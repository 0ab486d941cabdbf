"""``dmocker replay``: bad input exits 2 with one clear line; determinism across processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dmocker.cli.replay import main

SMALL = ["--synthetic", "40", "--rate", "40", "--isl-mean", "800", "--osl-mean", "20", "--quiet"]


def _cli(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "dmocker.cli.replay", *args],
        capture_output=True, text=True, env=full_env, timeout=120, check=False,
    )


def _trace(tmp_path: Path, lines: list[str]) -> Path:
    p = tmp_path / "trace.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


GOOD = '{"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [1, 2]}'


@pytest.mark.parametrize(
    ("line", "expect"),
    [
        ('{"timestamp": 0, "input_length": -3, "output_length": 4, "hash_ids": [1]}', ":2: field 'input_length'"),
        ('{"timestamp": 0, "input_length": 3.5, "output_length": 4, "hash_ids": [1]}', ":2: field 'input_length'"),
        ('{"timestamp": 0, "input_length": "3", "output_length": 4, "hash_ids": [1]}', ":2: field 'input_length'"),
        ('{"timestamp": 0, "input_length": 30, "hash_ids": [1]}', ":2: field 'output_length': missing"),
        ('{"timestamp": 0, "input_length": 3000, "output_length": 4, "hash_ids": [1]}', "hash_ids capacity"),
        ('{"timestamp": 0, "input_length": 30, "output_length": 4, "hash_ids": [1]', ":2: truncated JSON"),
        ('{"timestamp": 0 "input_length": 30}', ":2: malformed JSON"),
    ],
)
def test_bad_trace_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, expect: str) -> None:
    trace = _trace(tmp_path, [GOOD, line])
    out = tmp_path / "report.json"
    code = main([str(trace), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert expect in err and str(trace) in err
    assert "Traceback" not in err and err.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--prefill-workers", "0"], "--prefill-workers: field 'cluster.prefill_workers': must be >= 1"),
        (["--decode-workers", "-2"], "--decode-workers: field 'cluster.decode_workers': must be >= 0, got -2"),
        (["--engine", "trtllm"], "engine 'trtllm' is not supported"),
        (["--engine", "foo"], "unknown engine 'foo'"),
        (["--kv-transfer-bandwidth", "nan"], "--kv-transfer-bandwidth: field 'transfer.bandwidth_gb_s': must be a finite"),
        (["--kv-transfer-bandwidth", "-1"], "--kv-transfer-bandwidth: field 'transfer.bandwidth_gb_s': must be >= 0"),
        (["--block-size", "0"], "--block-size: field 'prefill.block_size': must be >= 1"),
        (["--rate", "0"], "--rate: field 'workload.synthetic.rate': must be > 0"),
        (["--max-in-flight", "0"], "max_in_flight"),
        (["--arrival-speedup-ratio", "0"], "arrival_speedup_ratio"),
    ],
)
def test_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], expect: str) -> None:
    out = tmp_path / "report.json"
    records = tmp_path / "records.jsonl"
    code = main([*SMALL, *args, "--out", str(out), "--per-request", str(records)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert expect in err
    assert "Traceback" not in err
    assert not out.exists() and not records.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_empty_and_missing_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main([str(empty), "--quiet"]) == 2
    assert "empty" in capsys.readouterr().err
    assert main([str(tmp_path / "missing.jsonl"), "--quiet"]) == 2
    assert "no such trace file" in capsys.readouterr().err


def test_missing_output_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SMALL, "--out", str(tmp_path / "nodir" / "r.json")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_trace_replay_writes_report_records_and_events(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _trace(tmp_path, [GOOD, GOOD.replace('"timestamp": 0', '"timestamp": 20')])
    out, rec, ev = tmp_path / "r.json", tmp_path / "rec.jsonl", tmp_path / "ev.jsonl"
    assert main([str(trace), "--out", str(out), "--per-request", str(rec), "--events", str(ev)]) == 0
    stdout = capsys.readouterr().out
    assert "mean_ttft_ms" in stdout and "2 / 2" in stdout
    report = json.loads(out.read_text())
    assert set(report) == {"summary", "config"}
    assert report["summary"]["completed_requests"] == 2
    records = [json.loads(line) for line in rec.read_text().splitlines()]
    assert sorted(r["request_id"] for r in records) == [0, 1]
    events = ev.read_text().splitlines()
    assert json.loads(events[0]) == {"dmocker_event_log": "1.0"}
    assert sum(1 for e in events[1:] if json.loads(e)["event"] == "completed") == 2


@pytest.mark.slow  # two replay processes
def test_same_inputs_are_byte_identical_across_hash_seeds(tmp_path: Path) -> None:
    outputs = []
    for seed in ("0", "4242"):
        d = tmp_path / f"run{seed}"
        d.mkdir()
        res = _cli([*SMALL, "--turns", "2", "--out", str(d / "r.json"), "--per-request", str(d / "rec.jsonl"),
                    "--events", str(d / "ev.jsonl")], env={"PYTHONHASHSEED": seed})
        assert res.returncode == 0, res.stderr
        outputs.append(tuple((d / n).read_bytes() for n in ("r.json", "rec.jsonl", "ev.jsonl")))
    assert outputs[0] == outputs[1]
    assert len(outputs[0][1].splitlines()) == 40


def test_different_seed_changes_the_workload(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main([*SMALL, "--seed", "1", "--out", str(a)]) == 0
    assert main([*SMALL, "--seed", "2", "--out", str(b)]) == 0
    assert a.read_bytes() != b.read_bytes()


def test_default_run_prints_the_summary() -> None:
    res = _cli([])
    assert res.returncode == 0, res.stderr
    assert "vllm 2P+2D" in res.stdout and "mean_ttft_ms" in res.stdout
    assert "300 / 300" in res.stdout


def test_first_line_names_engine_pools_and_workload() -> None:
    quick = [a for a in SMALL if a != "--quiet"]
    res = _cli(quick)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0].startswith("dmocker replay: vllm 2P+2D, synthetic 40 requests @ 40.0 req/s")


def test_render_summary_heads_the_table() -> None:
    from dmocker.cli.replay import render_summary
    from dmocker.replay import ReplayConfig, run

    report = run(ReplayConfig.from_values({"synthetic": 5, "isl_mean": 300, "osl_mean": 4}))
    lines = render_summary(report).splitlines()
    assert lines[0].startswith("dmocker replay: vllm 2P+2D, synthetic 5 requests")
    assert lines[1] == "-" * len(lines[0])
