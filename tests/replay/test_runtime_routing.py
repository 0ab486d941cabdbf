"""Routing in the replay runtime: the properties the reference checks, and the user protocol."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dmocker.engines.hashing import block_hashes_from_trace
from dmocker.engines.interface import EngineArgs, EngineRequest, WorkerType
from dmocker.engines.registry import make_worker
from dmocker.handoff import Canceled, HandoffOrder
from dmocker.replay import ReplayConfig, RouterConfig, RouterError, run
from dmocker.replay.collector import Collector
from dmocker.replay.routing import KvRouter, Pool, RouterContext
from dmocker.replay.runtime import DisaggRuntime
from dmocker.replay.workload import AdmissionQueue, SyntheticSpec, SyntheticWorkload

SESSIONS = {"workload.synthetic": SyntheticSpec(requests=120, rate=20.0, isl_mean=1500, osl_mean=20, spread=0.3,
                                               prefix_groups=0, turns=4, turn_delay_ms=50.0, seed=1)}


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_kv_routing_raises_prefix_reuse_over_round_robin_on_sessions(engine: str) -> None:
    kw: dict[str, Any] = dict(SESSIONS, engine=engine, block_size=64, prefill_workers=4, decode_workers=2)
    rr = run(ReplayConfig.from_values({**kw}))
    kv = run(ReplayConfig.from_values({**kw, "router": "kv"}))
    assert kv.summary["router_mode"] == "kv_router"
    assert "router_mode" not in rr.summary  # round robin output is unchanged
    assert kv.summary["prefill_prefix_cache_reused_ratio"] > rr.summary["prefix_cache_reused_ratio"] + 0.1
    assert kv.summary["completed_requests"] == rr.summary["completed_requests"] == 120


def test_records_carry_the_overlap_the_router_saw_and_decode_overrides_are_forced(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    run(ReplayConfig.from_values({
        **SESSIONS, "engine": "vllm", "prefill_workers": 3, "decode_workers": 2, "router": "kv", "per_request": out,
    }))
    recs = _records(out)
    assert all(r["decode_route_overlap_tokens"] == 0 for r in recs)  # decode: no overlap credit
    later = [r for r in recs if r["turn_index"] > 0]
    assert later and sum(r["prefill_route_overlap_tokens"] > 0 for r in later) > len(later) // 2
    for r in recs:  # the router's view never exceeds the prompt, and the engine reuses what it saw
        assert 0 <= r["prefill_route_overlap_tokens"] <= r["input_length"]


def test_pools_are_routed_separately(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    run(ReplayConfig.from_values({
        **SESSIONS, "engine": "sglang", "block_size": 64, "prefill_workers": 3, "decode_workers": 1, "router": "kv",
        "per_request": out,
    }))
    recs = _records(out)
    assert {r["decode_worker_idx"] for r in recs} == {0}
    assert {r["prefill_worker_idx"] for r in recs} <= {0, 1, 2}
    assert len({r["prefill_worker_idx"] for r in recs}) > 1


def _runtime_with_kv(n_prefill: int, cancel: list[tuple[float, int]], config: RouterConfig) -> tuple[DisaggRuntime, KvRouter, KvRouter, Collector]:
    spec = SyntheticSpec(requests=40, rate=200.0, isl_mean=1200, osl_mean=30, spread=0.3, prefix_groups=2, seed=2)
    wl = SyntheticWorkload(spec)
    pargs = EngineArgs(engine="vllm", worker_type=WorkerType.PREFILL, block_size=64).validate()
    dargs = EngineArgs(engine="vllm", worker_type=WorkerType.DECODE, block_size=64).validate()
    pr = KvRouter(RouterContext(Pool.PREFILL, 0, 64, pargs.max_num_batched_tokens), config)
    dr = KvRouter(RouterContext(Pool.DECODE, 0, 64, dargs.max_num_batched_tokens), config)
    collector = Collector(wl.num_requests)
    rt = DisaggRuntime(
        admission=AdmissionQueue(wl),
        prefill_args=pargs,
        decode_args=dargs,
        prefill_workers=[make_worker(pargs, i, record_kv_events=True) for i in range(n_prefill)],
        decode_workers=[make_worker(dargs, i) for i in range(2)],
        order=HandoffOrder.SOURCE_FIRST,
        collector=collector,
        records=io.StringIO(),
        prefill_router=pr,
        decode_router=dr,
    )
    for t, rid in cancel:
        rt.control.inject(t, rid, Canceled)
    return rt, pr, dr, collector


@pytest.mark.parametrize("threshold", [None, 0.05])
def test_cleanup_frees_every_route_and_restores_prefix_routing(threshold: float | None) -> None:
    """Cancels (some while held in the router queue) and releases leave no load behind."""
    cancels = [(5.0, 3), (20.0, 7), (60.0, 12), (61.0, 30)]
    rt, pr, dr, collector = _runtime_with_kv(3, cancels, RouterConfig(router_queue_threshold=threshold))
    rt.run()
    assert pr.pending_count == 0 and dr.pending_count == 0
    assert all(pr.prefill_tokens_in_flight(w) == 0 for w in range(3))
    assert all(dr.active_blocks(w) == 0 for w in range(2))
    # Prefix routing is back: a repeat of a finished prompt goes to a worker caching its prefix.
    again = SyntheticWorkload(SyntheticSpec(requests=40, rate=200.0, isl_mean=1200, osl_mean=30, spread=0.3,
                                            prefix_groups=2, seed=2))
    first = next(iter(again.session_starts()))
    turn = again.load(first.request_id)
    hashes = block_hashes_from_trace(turn.hash_ids, turn.input_length, 512, 64)
    repeat = EngineRequest(10_000, turn.input_length, 4, hashes)
    worker = pr.route(repeat, rt.now_ms + 1.0)
    assert worker is not None and pr.overlap_tokens(10_000) >= 64
    assert pr.cached_overlaps(hashes)[worker] == max(pr.cached_overlaps(hashes).values())


def test_queue_threshold_runs_to_completion_with_every_policy() -> None:
    base = {"workload.synthetic": SyntheticSpec(requests=80, rate=400.0, isl_mean=1500, osl_mean=10, seed=3),
            "engine": "vllm", "prefill_workers": 2, "decode_workers": 2, "router": "kv"}
    outs = [run(ReplayConfig.from_values({
        **base, "router.kv": RouterConfig(router_queue_threshold=0.1, router_queue_policy=p),
    }))
            for p in ("fcfs", "lcfs", "wspt")]
    assert all(o.summary["completed_requests"] == 80 for o in outs)
    assert len({o.summary["mean_ttft_ms"] for o in outs}) > 1  # the policy matters under a backlog


def test_user_router_is_told_everything_and_its_choice_is_used(tmp_path: Path) -> None:
    from tests.replay.user_routers import LastWorker

    LastWorker.made.clear()
    out = tmp_path / "r.jsonl"
    report = run(ReplayConfig.from_values({
        **SESSIONS, "engine": "vllm", "prefill_workers": 3, "decode_workers": 2,
        "router": "tests.replay.user_routers:LastWorker", "per_request": out,
    }))
    recs = _records(out)
    assert {r["prefill_worker_idx"] for r in recs} == {2} and {r["decode_worker_idx"] for r in recs} == {1}
    assert report.summary["router_mode"] == "tests.replay.user_routers:LastWorker"
    assert report.config["router"]["name"] == "tests.replay.user_routers:LastWorker"  # type: ignore[index]
    prefill, decode = LastWorker.made
    # the class attribute wants_kv_events = True overrides the (compiled) base's property
    assert prefill.kv_batches > 0 and decode.kv_batches == 0
    n = len(recs)
    assert sorted(prefill.prefill_done) == sorted(r["request_id"] for r in recs) and len(prefill.freed) == n
    assert decode.prefill_done == [] and len(decode.freed) == n


def test_a_router_answering_a_worker_outside_the_pool_is_an_error_naming_the_request() -> None:
    with pytest.raises(RouterError, match=r"returned worker 99 for request \d+"):
        run(ReplayConfig.from_values({"synthetic": 10, "router": "tests.replay.user_routers:OutOfPool"}))


def test_a_class_without_the_protocol_is_rejected_before_running() -> None:
    with pytest.raises(ValueError, match="does not implement the Router protocol"):
        run(ReplayConfig.from_values({"synthetic": 10, "router": "tests.replay.user_routers:NotARouter"}))


def _cli(args: list[str], hashseed: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONHASHSEED": hashseed}
    return subprocess.run([sys.executable, "-m", "dmocker", "replay", *args], capture_output=True, text=True,
                          env=env, timeout=300, check=False)


@pytest.mark.slow  # two replay processes
def test_kv_router_output_is_byte_identical_across_hash_seeds(tmp_path: Path) -> None:
    outs = []
    for seed in ("0", "12345"):
        rep, recs = tmp_path / f"a{seed}.json", tmp_path / f"a{seed}.jsonl"
        res = _cli(["--synthetic", "90", "--turns", "3", "--isl-mean", "1200", "--osl-mean", "10", "--router", "kv",
                    "--router-temperature", "0.5", "--prefill-workers", "3", "--quiet", "--out", str(rep),
                    "--per-request", str(recs)], seed)
        assert res.returncode == 0, res.stderr
        outs.append((rep.read_bytes(), recs.read_bytes()))
    assert outs[0] == outs[1]


@pytest.mark.parametrize(
    ("flags", "message"),
    # one dmocker process each: the quick loop runs the first
    [(["--router", "kv", "--overlap-score-credit", "-1"], "overlap_score_credit"),
     pytest.param(["--router", "tests.replay.user_routers:OutOfPool"], "returned worker 99 for request",
                  marks=pytest.mark.slow),
     pytest.param(["--router", "no.such.mod:X"], "cannot import", marks=pytest.mark.slow),
     pytest.param(["--router-queue-policy", "random"], "invalid choice", marks=pytest.mark.slow)],
)
def test_cli_bad_router_input_exits_2(flags: list[str], message: str) -> None:
    res = _cli(["--synthetic", "10", "--quiet", *flags], "0")
    assert res.returncode == 2 and message in res.stderr, res.stderr
