"""Runtime properties of the reference's replay tests that need the real mock engines (vLLM)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dmocker.replay import ReplayConfig, run


def _trace(tmp_path: Path, rows: list[dict[str, object]]) -> Path:
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def _records(path: Path) -> list[dict[str, object]]:
    return sorted((json.loads(line) for line in path.read_text().splitlines()), key=lambda r: r["request_id"])  # type: ignore[arg-type, return-value]


def _events(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()[1:]]


def test_lifecycle_causality_and_decode_only_report(tmp_path: Path) -> None:
    rec = tmp_path / "r.jsonl"
    report = run(ReplayConfig.from_values({
        "synthetic": 60, "rate": 30.0, "isl_mean": 1500, "osl_mean": 30, "per_request": rec,
        "kv_transfer_bandwidth": 10.0, "kv_bytes_per_token": 131072,
    }))
    assert report.summary["completed_requests"] == 60
    for r in _records(rec):
        assert r["prefill_admit_ms"] < r["source_held_ms"] <= r["destination_reserved_ms"]  # type: ignore[operator]
        assert r["destination_reserved_ms"] < r["destination_activated_ms"] <= r["source_released_ms"]  # type: ignore[operator]
        assert r["destination_activated_ms"] <= r["decode_admit_ms"] < r["first_token_ms"]  # type: ignore[operator]
        assert r["output_length"] == r["requested_output_length"]
        assert r["decode_reused_input_tokens"] == 0  # a materialized prompt is not recomputed
    assert report.summary["total_output_tokens"] == sum(r["output_length"] for r in _records(rec))  # type: ignore[misc]


def test_transfer_delay_matches_the_formula(tmp_path: Path) -> None:
    # 1275 tokens x 131072 B at 10 GB/s = 16.711 ms, as Dynamo 1.6.1 reports.
    ev = tmp_path / "e.jsonl"
    trace = _trace(tmp_path, [{"timestamp": 0, "input_length": 1275, "output_length": 3, "hash_ids": [1, 2, 3]}])
    run(ReplayConfig.from_values({
        "trace": trace, "prefill_workers": 1, "decode_workers": 1, "kv_transfer_bandwidth": 10.0,
        "kv_bytes_per_token": 131072, "events": ev,
    }))
    t = {e["event"]: e["t_ms"] for e in _events(ev)}
    assert t["transfer_completed"] - t["transfer_started"] == pytest.approx(16.711, abs=1e-3)  # type: ignore[operator]


def test_destination_missing_charges_only_what_the_destination_lacks(tmp_path: Path) -> None:
    # Two identical prompts on 1P+1D, the second after the first finished: the destination
    # already caches the prefix, so only the partial tail block is transferred.
    rows = [{"timestamp": 0, "input_length": 1000, "output_length": 2, "hash_ids": [7, 8]},
            {"timestamp": 5000, "input_length": 1000, "output_length": 2, "hash_ids": [7, 8]}]
    ev = tmp_path / "e.jsonl"
    run(ReplayConfig.from_values({
        "trace": _trace(tmp_path, rows), "prefill_workers": 1, "decode_workers": 1, "kv_transfer_bandwidth": 1.0,
        "kv_bytes_per_token": 1_000_000, "kv_transfer_timing_mode": "destination-missing", "events": ev,
    }))
    events = _events(ev)
    dur = {}
    for h in (0, 1):
        t = {e["event"]: e["t_ms"] for e in events if e["handoff"] == h}
        dur[h] = t["transfer_completed"] - t["transfer_started"]  # type: ignore[operator]
    reserved = {e["handoff"]: e["tokens"] for e in events if e["event"] == "destination_reserved"}
    assert dur[0] == pytest.approx(reserved[0] * 1.0)  # 1e6 B/token at 1 GB/s = 1 ms/token
    assert reserved[1] < reserved[0]
    assert dur[1] < dur[0]


def test_full_prompt_mode_ignores_destination_cache(tmp_path: Path) -> None:
    rows = [{"timestamp": 0, "input_length": 1000, "output_length": 2, "hash_ids": [7, 8]},
            {"timestamp": 5000, "input_length": 1000, "output_length": 2, "hash_ids": [7, 8]}]
    ev = tmp_path / "e.jsonl"
    run(ReplayConfig.from_values({
        "trace": _trace(tmp_path, rows), "prefill_workers": 1, "decode_workers": 1, "kv_transfer_bandwidth": 1.0,
        "kv_bytes_per_token": 1_000_000, "events": ev,
    }))
    events = _events(ev)
    for h in (0, 1):
        t = {e["event"]: e["t_ms"] for e in events if e["handoff"] == h}
        assert t["transfer_completed"] - t["transfer_started"] == pytest.approx(1000.0)  # type: ignore[operator]


def test_hidden_prefill_reports_reuse(tmp_path: Path) -> None:
    rows = [{"timestamp": 0, "input_length": 2048, "output_length": 2, "hash_ids": [1, 2, 3, 4]},
            {"timestamp": 3000, "input_length": 2048, "output_length": 2, "hash_ids": [1, 2, 3, 9]}]
    rec = tmp_path / "r.jsonl"
    report = run(ReplayConfig.from_values({
        "trace": _trace(tmp_path, rows), "prefill_workers": 1, "decode_workers": 1, "per_request": rec,
    }))
    second = _records(rec)[1]
    assert second["prefill_reused_input_tokens"] == 1536
    assert second["reused_input_tokens"] == 1536
    assert report.summary["prefix_cache_reused_ratio"] == pytest.approx(1536 / 4096)


def test_chunked_prefill_holds_the_handoff_until_materialized(tmp_path: Path) -> None:
    rows = [{"timestamp": 0, "input_length": 20000, "output_length": 3, "hash_ids": list(range(40))}]
    rec, ev = tmp_path / "r.jsonl", tmp_path / "e.jsonl"
    run(ReplayConfig.from_values({
        "trace": _trace(tmp_path, rows), "prefill_workers": 1, "decode_workers": 1, "per_request": rec,
        "events": ev,
    }))
    r = _records(rec)[0]
    kinds = [e["event"] for e in _events(ev)]
    assert kinds.count("source_held") == 1
    # 20000 tokens over an 8192-token budget: three prefill passes before the hold.
    assert r["source_held_ms"] - r["prefill_admit_ms"] > 3 * 16.5  # type: ignore[operator]
    # decode starts from the materialized prompt: one decode pass to the first token
    assert r["first_token_ms"] - r["decode_admit_ms"] < 60.0  # type: ignore[operator]


def test_prompt_larger_than_the_decode_pool_fails_without_stalling() -> None:
    report = run(ReplayConfig.from_values({
        "synthetic": 4, "isl_mean": 3000, "osl_mean": 5, "spread": 0.0, "num_gpu_blocks": 20,
    }))
    s = report.summary
    assert s["completed_requests"] == 0
    assert s["rejected_requests"] + s["failed_requests"] == 4


def test_separate_engine_args_must_match() -> None:
    from dmocker.engines.interface import WorkerType
    from dmocker.replay import ClusterConfig, ConfigError, PoolConfig

    with pytest.raises(ConfigError, match="block sizes must match"):
        ReplayConfig(prefill=PoolConfig(block_size=32), decode=PoolConfig(block_size=64))
    # One engine for both pools, by construction: the pools cannot disagree on it.
    prefill, decode = ReplayConfig(cluster=ClusterConfig(engine="sglang"), prefill=PoolConfig(block_size=64),
                                   decode=PoolConfig(block_size=64)).engine_args()
    assert prefill.engine == decode.engine == "sglang"
    assert (prefill.worker_type, decode.worker_type) == (WorkerType.PREFILL, WorkerType.DECODE)


def test_report_round_trip_is_stable(tmp_path: Path) -> None:
    a = run(ReplayConfig.from_values({"synthetic": 30, "rate": 30.0, "isl_mean": 800, "osl_mean": 10}))
    b = run(ReplayConfig.from_values({"synthetic": 30, "rate": 30.0, "isl_mean": 800, "osl_mean": 10}))
    assert a.to_json() == b.to_json()
    parsed = json.loads(a.to_json())
    assert set(parsed) == {"summary", "config"}
    assert parsed["summary"]["handoff_order"] == "source-first" and parsed["config"]["cluster"]["engine"] == "vllm"


def test_fixed_timing_option() -> None:
    report = run(ReplayConfig.from_values({
        "synthetic": 5, "rate": 1.0, "isl_mean": 1000, "osl_mean": 4, "spread": 0.0, "fixed_prefill_ms": 20.0,
        "fixed_decode_ms": 5.0,
    }))
    # TTFT = one 20 ms prefill pass + one 5 ms decode pass, with nothing queued at rate 1/s.
    assert report.summary["mean_ttft_ms"] == pytest.approx(25.0)
    assert report.summary["mean_itl_ms"] == pytest.approx(5.0, rel=1e-3)


def test_records_stream_back_through_the_report(tmp_path: Path) -> None:
    rec = tmp_path / "records.jsonl"
    report = run(ReplayConfig.from_values({
        "synthetic": 12, "rate": 20.0, "isl_mean": 700, "osl_mean": 5, "per_request": rec,
    }))
    records = list(report.records())
    assert sorted(r["request_id"] for r in records) == list(range(12))
    fields = {"request_id", "uuid", "arrival_time_ms", "first_admit_ms", "first_token_ms", "last_token_ms",
              "ttft_ms", "ttst_ms", "e2e_latency_ms", "itl_ms", "input_length", "output_length",
              "reused_input_tokens", "prefill_worker_idx", "decode_worker_idx", "prefill_admit_ms",
              "source_held_ms", "destination_reserved_ms", "destination_activated_ms", "decode_admit_ms",
              "source_released_ms", "terminal_status"}
    assert fields <= set(records[0])
    with pytest.raises(ValueError):
        list(run(ReplayConfig.from_values({"synthetic": 2})).records())
