"""Bulk decode runs with a planner in the loop, against the per-pass simulation (their oracle).

A planner tick reads every active and draining worker (running and waiting requests, KV in
use, its latest pass); the runtime cuts a worker's bulk run at the tick before it is read, so
the planner must see exactly what it sees pass by pass -- and therefore decide exactly the
same.  Random small workloads on both engines, under the built-in ``throughput`` and ``load``
policies and a scripted planner that scales both pools up and down (with and without a
startup time), must give identical records, event logs, summaries, tick metrics and scaling
timelines.
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dmocker.engines.interface import EngineArgs, EngineWorker, WorkerType
from dmocker.engines.registry import make_worker
from dmocker.handoff import order_for_engine
from dmocker.replay import PlannerMetrics, ScalingDecision
from dmocker.replay.collector import Collector
from dmocker.replay.planner import PlannerLoop
from dmocker.replay.planner.policies import LoadPlanner, PlannerSettings, ThroughputPlanner
from dmocker.replay.report import SlaThresholds, build_summary
from dmocker.replay.runtime import DisaggRuntime
from dmocker.replay.workload import AdmissionQueue, SyntheticSpec, SyntheticWorkload

from ..helpers import both_ways, engine_settings, small_workloads


@dataclass
class _Scripted:
    """Ticks every ``every_ms``; tick i sets the pools to ``targets[i % len(targets)]``."""

    every_ms: float
    targets: Sequence[tuple[int | None, int | None]]

    def initial_tick_ms(self) -> float:
        return self.every_ms

    def on_tick(self, metrics: PlannerMetrics) -> ScalingDecision:
        p, d = self.targets[metrics.tick % len(self.targets)]
        return ScalingDecision(p, d, metrics.now_ms + self.every_ms)


@dataclass
class _Recording:
    """Delegates to ``inner`` and keeps every metrics object it was shown.

    Gives up after ``max_ticks``: a workload the engines cannot serve is a dead end, which
    ticks re-armed while work remains would otherwise spin through forever (both ways alike).
    """

    inner: object
    seen: list[PlannerMetrics] = field(default_factory=list)
    max_ticks: int = 300

    def initial_tick_ms(self) -> float | None:
        return self.inner.initial_tick_ms()  # type: ignore[attr-defined, no-any-return]

    def on_tick(self, metrics: PlannerMetrics) -> ScalingDecision:
        self.seen.append(metrics)
        if len(self.seen) > self.max_ticks:
            raise RuntimeError("too many ticks: the workload is stuck")
        return self.inner.on_tick(metrics)  # type: ignore[attr-defined, no-any-return]


def _replay(params: dict[str, object], bulk: bool) -> tuple[str, str, str, str, list[PlannerMetrics], int]:
    engine = str(params["engine"])
    common = dict(engine=engine, block_size=params["block_size"], num_gpu_blocks=params["blocks"],
                  max_num_seqs=params["max_seqs"])
    pargs = EngineArgs(worker_type=WorkerType.PREFILL, kv_transfer_bandwidth=params["bandwidth"],  # type: ignore[arg-type]
                       kv_bytes_per_token=131072 if params["bandwidth"] is not None else None, **common)
    dargs = EngineArgs(worker_type=WorkerType.DECODE, **common)  # type: ignore[arg-type]
    kind = params["planner"]
    every = float(params["every_ms"])  # type: ignore[arg-type]
    inner: object
    if kind == "throughput":
        inner = ThroughputPlanner(PlannerSettings(throughput_interval_s=every / 1000.0, max_gpu_budget=6),
                                  pargs, dargs)
    elif kind == "load":
        inner = LoadPlanner(PlannerSettings(load_interval_s=every / 1000.0, max_gpu_budget=6), pargs, dargs)
    else:
        # the cycle ends at one worker per pool: a pool never stays empty for good
        inner = _Scripted(every, [*params["targets"], (1, 1)])  # type: ignore[misc]
    planner = _Recording(inner)
    spec = params["spec"]
    assert isinstance(spec, SyntheticSpec)
    workload = SyntheticWorkload(spec)
    collector = Collector(workload.num_requests)
    records, events = io.StringIO(), io.StringIO()
    n_p, n_d = int(params["prefill"]), int(params["decode"])  # type: ignore[call-overload]
    pools: tuple[list[EngineWorker], list[EngineWorker]] = (
        [make_worker(pargs, i) for i in range(n_p)], [make_worker(dargs, i) for i in range(n_d)])

    def new_worker(stage: int, idx: int) -> EngineWorker:
        w = make_worker(pargs if stage == 0 else dargs, idx)
        pools[stage].append(w)
        return w

    loop = PlannerLoop(planner, first_tick_ms=planner.initial_tick_ms(), initial_workers=(n_p, n_d),
                       make_worker=new_worker, startup_time_s=float(params["startup_s"]))  # type: ignore[arg-type]
    rt = DisaggRuntime(
        admission=AdmissionQueue(workload), prefill_args=pargs, decode_args=dargs,
        prefill_workers=list(pools[0]), decode_workers=list(pools[1]),
        order=order_for_engine(engine), collector=collector, records=records, events=events,
        planner=loop, bulk=bulk,
    )
    loop.attach(rt.control)
    result = rt.run()
    rt.lifecycle.write_incomplete_records()
    summary = build_summary(collector, handoff_order=order_for_engine(engine).value,
                            sla=SlaThresholds(None, None, None))
    summary["end_ms"] = result.now_ms
    runs = sum(getattr(w, "bulk_runs", 0) for w in pools[1])
    return (records.getvalue(), events.getvalue(), json.dumps(summary, sort_keys=True),
            json.dumps(loop.report(), sort_keys=True), planner.seen, runs)


@st.composite
def _params(draw: st.DrawFn) -> dict[str, object]:
    n = draw(st.integers(4, 30))
    spec = draw(small_workloads(n))
    count = st.one_of(st.none(), st.integers(0, 3))
    return {
        **engine_settings(draw),
        "prefill": draw(st.integers(1, 2)),
        "planner": draw(st.sampled_from(["throughput", "load", "scripted"])),
        "every_ms": draw(st.sampled_from([7.0, 40.0, 100.0, 250.0, 500.0])),
        "targets": draw(st.lists(st.tuples(count, count), min_size=1, max_size=4)),
        "startup_s": draw(st.sampled_from([0.0, 0.03, 0.2])),
        "spec": spec,
    }


def _check(params: dict[str, object]) -> int:
    """Both ways, identical outputs (or the same error); returns the bulk runs computed."""
    both = both_ways(lambda bulk: _replay(params, bulk=bulk))
    if both is None:
        return 0
    bulk, per_pass = both
    assert bulk[0] == per_pass[0]  # per-request records
    assert bulk[1] == per_pass[1]  # event log
    assert bulk[2] == per_pass[2]  # summary
    assert bulk[3] == per_pass[3]  # scaling timeline and decisions
    assert len(bulk[4]) == len(per_pass[4])
    for got, want in zip(bulk[4], per_pass[4]):  # every tick's metrics, snapshots included
        assert got == want, (got.tick, got.now_ms)
    assert per_pass[5] == 0
    return bulk[5]


@pytest.mark.slow  # quick twin: test_bulk_runs_happen_under_every_planner
@settings(max_examples=60)
@given(_params())
@example({  # a scripted planner scaling the decode pool up and down under long decodes
    "engine": "vllm", "block_size": 64, "blocks": 4096, "max_seqs": 256, "bandwidth": 50.0,
    "prefill": 1, "decode": 2, "planner": "scripted", "every_ms": 100.0,
    "targets": [(2, 3), (None, 1), (1, 2)], "startup_s": 0.03,
    "spec": SyntheticSpec(requests=30, rate=80.0, isl_mean=600, osl_mean=120, seed=3, trace_block_size=64),
})
def test_planner_replays_match_the_per_pass_simulation(params: dict[str, object]) -> None:
    _check(params)


def test_bulk_runs_happen_under_every_planner() -> None:
    """Workloads where runs certainly form and ticks cut them: both engines, all planners."""
    for engine in ("vllm", "sglang"):
        for planner in ("throughput", "load", "scripted"):
            params: dict[str, object] = {
                "engine": engine, "block_size": 64, "blocks": 4096, "max_seqs": 256, "bandwidth": 50.0,
                "prefill": 1, "decode": 2, "planner": planner, "every_ms": 100.0,
                "targets": [(2, 3), (1, 1), (None, 2)], "startup_s": 0.03,
                "spec": SyntheticSpec(requests=40, rate=40.0, isl_mean=600, osl_mean=150, seed=5,
                                      trace_block_size=64),
            }
            assert _check(params) > 0, (engine, planner)
