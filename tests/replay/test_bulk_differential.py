"""Bulk decode runs against the per-pass simulation (their oracle): identical outputs, byte for byte.

A decode worker in bulk mode computes the passes until its batch next changes at once (from the
pass that admits activated requests through the pass in which the next requests finish), and
the runtime cuts such a run where the per-pass simulation would be whenever a command reaches
the worker.  This test replays random small workloads both ways, on both engines, under pressure
that exercises every reason a run ends or is cut: small pools (vLLM preemption, SGLang
retraction), few running slots, multi-turn sessions, prefix sharing, KV-transfer delays and
injected Canceled / Failed / TimedOut facts, and demands identical per-request records, event
logs and summaries.
"""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from dmocker.engines.interface import EngineArgs, WorkerType
from dmocker.engines.registry import make_worker
from dmocker.handoff import Canceled, Failed, TimedOut, order_for_engine
from dmocker.replay.collector import Collector
from dmocker.replay.report import SlaThresholds, build_summary
from dmocker.replay.runtime import DisaggRuntime
from dmocker.replay.workload import AdmissionQueue, SyntheticSpec, SyntheticWorkload

from .helpers import both_ways, engine_settings, small_workloads

_KINDS = (Canceled, Failed, TimedOut)


def _replay(params: dict[str, object], bulk: bool,
            batch_epochs: bool = True) -> tuple[str, str, str, tuple[int, int, int], int]:
    engine = str(params["engine"])
    common = dict(engine=engine, block_size=params["block_size"], num_gpu_blocks=params["blocks"],
                  max_num_seqs=params["max_seqs"])
    pargs = EngineArgs(worker_type=WorkerType.PREFILL, kv_transfer_bandwidth=params["bandwidth"],  # type: ignore[arg-type]
                       kv_bytes_per_token=131072 if params["bandwidth"] is not None else None,
                       **common)
    dargs = EngineArgs(worker_type=WorkerType.DECODE, **common)  # type: ignore[arg-type]
    spec = params["spec"]
    assert isinstance(spec, SyntheticSpec)
    workload = SyntheticWorkload(spec)
    collector = Collector(workload.num_requests, batch_epochs=batch_epochs)
    records, events = io.StringIO(), io.StringIO()
    decode = [make_worker(dargs, i) for i in range(int(params["decode"]))]  # type: ignore[call-overload]
    rt = DisaggRuntime(
        admission=AdmissionQueue(workload), prefill_args=pargs, decode_args=dargs,
        prefill_workers=[make_worker(pargs, i) for i in range(2)], decode_workers=decode,
        order=order_for_engine(engine), collector=collector, records=records, events=events,
        bulk=bulk,
    )
    for t, rid, kind in params["inject"]:  # type: ignore[attr-defined]
        rt.control.inject(t, rid, _KINDS[kind])
    rt.run()
    rt.lifecycle.write_incomplete_records()
    summary = build_summary(collector, handoff_order=order_for_engine(engine).value,
                            sla=SlaThresholds(None, None, None))
    runs = tuple(sum(getattr(w, name) for w in decode) for name in ("bulk_runs", "bulk_joins", "bulk_tails"))
    return (records.getvalue(), events.getvalue(), json.dumps(summary, sort_keys=True), (runs[0], runs[1], runs[2]),
            collector.epoch_passes)


@st.composite
def _params(draw: st.DrawFn) -> dict[str, object]:
    n = draw(st.integers(3, 24))
    spec = draw(small_workloads(n))
    inject = draw(st.lists(st.tuples(st.floats(0.0, 4000.0), st.integers(0, n - 1), st.integers(0, 2)),
                           max_size=3))
    return {
        **engine_settings(draw),
        "spec": spec,
        "inject": inject,
    }


@pytest.mark.slow  # quick twin: test_bulk_runs_happen_and_match
@given(_params())
@example({  # a run that evicted cached blocks, then cut: the cut must restore them (LRU order)
    "engine": "vllm", "block_size": 16, "blocks": 120, "max_seqs": 5, "bandwidth": None, "decode": 1,
    "spec": SyntheticSpec(requests=21, rate=400.0, isl_mean=40, osl_mean=93, spread=0.5, prefix_groups=0,
                          turns=3, turn_delay_ms=50.0, seed=758, trace_block_size=64),
    "inject": [],
})
@example({  # two decode workers' runs end together with passes that started together: the
    # completions pop in the order the per-pass simulation pushed them (pool order), not the
    # order the runs were started in
    "engine": "sglang", "block_size": 64, "blocks": 300, "max_seqs": 2, "bandwidth": None, "decode": 2,
    "spec": SyntheticSpec(requests=15, rate=80.0, isl_mean=253, osl_mean=2, spread=0.0, prefix_groups=0,
                          turns=1, turn_delay_ms=0.0, seed=200, trace_block_size=64),
    "inject": [],
})
def test_bulk_runs_match_the_per_pass_simulation(params: dict[str, object]) -> None:
    both = both_ways(lambda bulk: _replay(params, bulk=bulk))
    if both is None:
        return
    bulk, per_pass = both
    assert bulk[0] == per_pass[0]  # per-request records
    assert bulk[1] == per_pass[1]  # event log
    assert bulk[2] == per_pass[2]  # summary
    assert per_pass[3] == (0, 0, 0)


def test_bulk_runs_happen_and_match() -> None:
    """A workload where runs certainly form (and get cut by arrivals), both engines."""
    for engine in ("vllm", "sglang"):
        params: dict[str, object] = {
            "engine": engine, "block_size": 64, "blocks": 4096, "max_seqs": 256, "bandwidth": 50.0,
            "decode": 2, "spec": SyntheticSpec(requests=30, rate=20.0, isl_mean=600, osl_mean=80, seed=3,
                                               trace_block_size=64),
            "inject": [(700.0, 5, 0), (900.0, 9, 1)],
        }
        bulk = _replay(params, bulk=True)
        per_pass = _replay(params, bulk=False)
        runs, joins, tails = bulk[3]
        # runs form, some admit the activated requests in their first pass, some end with the
        # pass in which requests finish
        assert runs > 0 and joins > 0 and tails > 0, (engine, bulk[3])
        assert bulk[:3] == per_pass[:3], engine


@given(st.lists(st.one_of(st.just(0.0), st.floats(1e-5, 1e4), st.integers(-3000, 3000).map(
    lambda i: ((1 + 0.001) / (1 - 0.001)) ** i)), max_size=60), st.integers(1, 300))
def test_weighted_many_matches_one_by_one(values: list[float], weight: int) -> None:
    """The run path's bulk sketch update equals add_weighted value by value (bucket
    boundaries included: powers of gamma sit exactly on them)."""
    import numpy as np

    from dmocker.replay.collector import LogSketch

    bulk, single = LogSketch(), LogSketch()
    bulk.add_weighted_many(np.array(values, dtype=np.float64), weight)
    for v in values:
        single.add_weighted(v, weight)
    assert bulk.stats() == single.stats()
    assert bulk.count == single.count and bulk.zeros == single.zeros
    assert bulk._counts.tolist() == single._counts.tolist()
