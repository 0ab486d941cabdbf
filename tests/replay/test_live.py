"""The replay's cluster driven from outside (:class:`dmocker.replay.live.LiveCluster`): handed the
same arrivals at the same times, it gives the same requests' records, event log and summary as
the replay, pass by pass -- what a live server is built on."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmocker.replay import ReplayConfig, run_pass_by_pass
from dmocker.replay.collector import TerminalStatus
from dmocker.replay.errors import DeadEndError
from dmocker.replay.live import LiveCluster, LiveError
from dmocker.replay.report import JsonValue
from dmocker.replay.workload import SyntheticSpec, SyntheticWorkload


def _drive(config: ReplayConfig, spec: SyntheticSpec) -> tuple[str, str, dict[str, JsonValue], dict[int, list[float]]]:
    """Submit the workload's requests at their arrival times, advancing between them as a live
    edge does, then run to the end."""
    records, events = io.StringIO(), io.StringIO()
    tokens: dict[int, list[float]] = {}
    ended: dict[int, TerminalStatus] = {}

    def on_tokens(ids: list[int], t: float) -> None:
        for rid in ids:
            tokens.setdefault(rid, []).append(t)

    def on_end(rid: int, status: TerminalStatus, t: float) -> None:
        ended[rid] = status

    workload = SyntheticWorkload(spec)
    cluster = LiveCluster(config, capacity=spec.requests, trace_block_size=workload.trace_block_size,
                          on_tokens=on_tokens, on_end=on_end, records=records, events=events)
    starts = list(workload.session_starts())
    i = 0
    while i < len(starts):
        now = starts[i].arrival_ms
        cluster.advance(now)
        while i < len(starts) and starts[i].arrival_ms == now:  # simultaneous arrivals enter together
            turn = workload.load(starts[i].request_id)
            rid = cluster.submit(turn.input_length, turn.output_length, turn.hash_ids, now)
            assert rid == turn.request_id
            i += 1
        cluster.advance(now)
    while not cluster.settled():  # (the workers' own timers keep no run alive)
        due = cluster.next_due_ms()
        assert due is not None
        cluster.advance(due)
    assert cluster.in_flight == 0
    assert len(ended) == spec.requests
    summary = cluster.finish()
    for line in records.getvalue().splitlines():  # each end reported as its record has it
        rec = json.loads(line)
        assert ended[rec["request_id"]].label == rec["terminal_status"]
    return records.getvalue(), events.getvalue(), summary, tokens


def _replay(config: ReplayConfig, tmp_path: Path) -> tuple[str, str, dict[str, JsonValue]]:
    records, events = tmp_path / "records.jsonl", tmp_path / "events.jsonl"
    summary = run_pass_by_pass(config.with_values({"per_request": str(records), "events": str(events)})).summary
    return records.read_text(), events.read_text(), summary


def _same(config: ReplayConfig, spec: SyntheticSpec, tmp_path: Path) -> None:
    want_records, want_events, want_summary = _replay(config, tmp_path)
    records, events, summary, tokens = _drive(config, spec)
    assert records == want_records
    assert events.splitlines()[1:] == want_events.splitlines()[1:]  # (the header line is the replay's to write)
    for key, value in summary.items():
        assert want_summary[key] == value, key
    for line in records.splitlines():  # the streamed tokens are the ones the records count
        rec = json.loads(line)
        times = tokens.get(rec["request_id"], [])
        assert len(times) == rec["output_length"]
        if times:
            assert times[0] == pytest.approx(rec["first_token_ms"], abs=1e-6)
            assert times[-1] == pytest.approx(rec["last_token_ms"], abs=1e-6)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_driven_from_outside_it_is_the_replay(engine: str, tmp_path: Path) -> None:
    spec = SyntheticSpec(requests=40, rate=25.0, isl_mean=700, osl_mean=30, seed=5)
    config = ReplayConfig.from_values({"synthetic": 40, "rate": 25.0, "isl_mean": 700, "osl_mean": 30, "seed": 5,
                                       "engine": engine, "kv_transfer_bandwidth": 25.0,
                                       "kv_bytes_per_token": 65536})
    _same(config, spec, tmp_path)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_faults_and_crashes_land_live_as_in_the_replay(engine: str, tmp_path: Path) -> None:
    """The configuration's fault plan applies to a live cluster as to the replay: the same
    requests canceled, failed and timed out at the same steps, the same worker crash."""
    spec = SyntheticSpec(requests=60, rate=30.0, isl_mean=600, osl_mean=40, seed=2)
    config = ReplayConfig.from_values({"synthetic": 60, "rate": 30.0, "isl_mean": 600, "osl_mean": 40, "seed": 2,
                                       "engine": engine, "fault_cancel_rate": 0.1, "fault_fail_rate": 0.1,
                                       "fault_timeout_rate": 0.05, "fault_seed": 4,
                                       "worker_crash": ["decode:1@700"], "worker_restart_s": 0.5})
    _same(config, spec, tmp_path)
    records, _, summary, _ = _drive(config, spec)
    injected = summary["faults_injected"]
    assert isinstance(injected, dict) and injected["worker_crash"] == 1 and injected["fail"]
    assert summary["leaked_kv_blocks"] == 0 and summary["invariants_ok"] is True
    assert {json.loads(line)["terminal_status"] for line in records.splitlines()} >= {"completed", "failed", "canceled"}


@pytest.mark.parametrize("engine, clocks", [
    ("vllm", {"kv_abort_timeout_s": 1.0, "kv_load_failure_policy": "recompute"}),
    ("vllm", {"kv_abort_timeout_s": 1.0}),
    ("sglang", {"disaggregation_waiting_timeout_s": 1.0, "heartbeat_loss": ["prefill:0@500+3000"],
                "disaggregation_heartbeat_interval_s": 0.5}),
])
def test_the_workers_clocks_run_live_as_in_the_replay(engine: str, clocks: dict[str, object], tmp_path: Path) -> None:
    """Stalled transfers, the timers that catch them, a recomputation and a heartbeat verdict
    land live exactly as in the replay (records, event log with its timer lines, summary)."""
    spec = SyntheticSpec(requests=60, rate=30.0, isl_mean=600, osl_mean=40, seed=2)
    config = ReplayConfig.from_values({"synthetic": 60, "rate": 30.0, "isl_mean": 600, "osl_mean": 40, "seed": 2,
                                       "engine": engine, "fault_stall_rate": 0.3, "fault_stall_s": 2.0, **clocks})
    _same(config, spec, tmp_path)
    _, _, summary, _ = _drive(config, spec)
    timers = summary["worker_timers"]
    assert isinstance(timers, dict) and any(v for k, v in timers.items() if k.endswith(("s", "prefills"))
                                            and not k.endswith("_s") and isinstance(v, int))
    assert summary["leaked_kv_blocks"] == 0 and summary["invariants_ok"] is True


@pytest.mark.slow  # quick twin: test_driven_from_outside_it_is_the_replay
@settings(max_examples=20, deadline=None)
@given(engine=st.sampled_from(["vllm", "sglang"]), n=st.integers(1, 25), rate=st.floats(1.0, 400.0),
       isl=st.integers(10, 1500), osl=st.integers(1, 60), seed=st.integers(0, 99), router=st.sampled_from(["round-robin", "kv"]),
       blocks=st.integers(60, 4000))
def test_any_workload_driven_from_outside_is_the_replay(tmp_path_factory: pytest.TempPathFactory, engine: str, n: int,
                                                        rate: float, isl: int, osl: int, seed: int, router: str,
                                                        blocks: int) -> None:
    values = {"synthetic": n, "rate": rate, "isl_mean": isl, "osl_mean": osl, "seed": seed, "engine": engine,
              "router": router, "block_size": 16, "num_gpu_blocks": blocks}
    spec = SyntheticSpec(requests=n, rate=rate, isl_mean=isl, osl_mean=osl, seed=seed)
    try:
        config = ReplayConfig.from_values(values)
        _same(config, spec, tmp_path_factory.mktemp("live"))
    except AssertionError:
        raise
    except (ValueError, DeadEndError):  # the replay refuses the workload, or it dead-ends (a live cluster would wait)
        return


def test_bad_requests_and_configurations_are_refused() -> None:
    cluster = LiveCluster(ReplayConfig(), capacity=1)
    with pytest.raises(LiveError, match="input_length"):
        cluster.submit(0, 5, (), 0.0)
    cluster.submit(64, 5, (1,), 0.0)
    with pytest.raises(LiveError, match="capacity"):
        cluster.submit(64, 5, (1,), 0.0)
    later = LiveCluster(ReplayConfig(), capacity=2)
    later.advance(10.0)
    with pytest.raises(LiveError, match="before the cluster's time"):
        later.submit(64, 5, (1,), 1.0)
    with pytest.raises(LiveError, match="disaggregated"):
        LiveCluster(ReplayConfig.from_values({"mode": "agg"}))
    with pytest.raises(LiveError, match="planner"):
        LiveCluster(ReplayConfig.from_values({"planner": "throughput"}))


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_pinned_cluster_takes_its_workers_from_outside_and_frees_a_source_nobody_reads(engine: str) -> None:
    """The proxy in front chooses: the prefill worker with the request, the decode worker when
    its decode request comes.  A source whose decode request never comes is freed after the
    abort timeout; nothing is left held."""
    held: dict[int, float] = {}
    tokens: dict[int, int] = {}
    ended: dict[int, TerminalStatus] = {}
    config = ReplayConfig.from_values({"engine": engine, "kv_transfer_bandwidth": 25.0, "kv_bytes_per_token": 65536,
                                       "kv_abort_timeout_s": 5.0})
    cluster = LiveCluster(config, capacity=10, pinned=True, trace_block_size=64,
                          on_held=lambda rid, t: held.__setitem__(rid, t),
                          on_tokens=lambda ids, t: [tokens.__setitem__(r, tokens.get(r, 0) + 1) for r in ids] and None,
                          on_end=lambda rid, status, t: ended.__setitem__(rid, status))
    with pytest.raises(LiveError, match="pinned"):
        LiveCluster(config).submit(640, 8, tuple(range(10)), 0.0, prefill_worker=0)
    a = cluster.submit(640, 8, tuple(range(10)), 0.0, prefill_worker=1)
    b = cluster.submit(640, 8, tuple(range(100, 110)), 0.0, prefill_worker=0)
    cluster.advance(0.0)
    if engine == "sglang":  # destination-first: the decode worker is needed before the prefill
        assert cluster.attach_decode(a, 0, 0.0) and cluster.attach_decode(b, 1, 0.0)
        cluster.advance(0.0)
    while a not in held or b not in held:
        due = cluster.next_due_ms()
        assert due is not None and due < 1000.0
        cluster.advance(due)
    assert cluster.runtime.table.live[a].prefill_worker == 1 and cluster.runtime.table.live[b].prefill_worker == 0
    t = max(held.values())
    if engine == "vllm":  # source-first: only a's decode request comes
        assert cluster.attach_decode(a, 1, t)
        assert not cluster.attach_decode(a, 1, t)  # once
    cluster.advance(t)
    while (due := cluster.next_due_ms()) is not None:
        cluster.advance(due)
    assert ended[a] is TerminalStatus.COMPLETED and tokens[a] == 8
    if engine == "vllm":
        assert ended[b] is TerminalStatus.FAILED and b not in tokens  # timed out: freed after 5 s
        assert cluster.now_ms >= held[b] + 5000.0
        assert not cluster.attach_decode(b, 0, cluster.now_ms)  # too late: gone
    summary = cluster.finish()
    assert summary["leaked_kv_blocks"] == 0 and summary["invariants_ok"] is True, summary["invariant_breaks"]
