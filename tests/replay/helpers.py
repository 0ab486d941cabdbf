"""Build a runtime over fake workers (see fake_engine) for runtime-rule tests."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from hypothesis import strategies as st

from dmocker.handoff import HandoffOrder
from dmocker.replay.collector import Collector
from dmocker.engines.interface import EngineArgs, WorkerType
from dmocker.replay.report import SlaThresholds, build_summary
from dmocker.replay.runtime import DisaggRuntime
from dmocker.replay.workload import AdmissionQueue, SyntheticSpec, SyntheticWorkload, Workload

from .fake_engine import FakeWorker


@dataclass
class FakeRun:
    runtime: DisaggRuntime
    prefill: list[FakeWorker]
    decode: list[FakeWorker]
    records: list[dict[str, Any]]
    events: list[dict[str, Any]]
    summary: dict[str, Any]


def fake_engine_args(
    order: HandoffOrder, bandwidth: float | None = None, kv_bytes: int | None = None
) -> tuple[EngineArgs, EngineArgs]:
    """Prefill and decode args of the fake-worker runs: the order's engine, 64-token blocks."""
    engine = "vllm" if order is HandoffOrder.SOURCE_FIRST else "sglang"
    pargs = EngineArgs(engine=engine, worker_type=WorkerType.PREFILL, block_size=64,
                       kv_transfer_bandwidth=bandwidth, kv_bytes_per_token=kv_bytes)
    return pargs, EngineArgs(engine=engine, worker_type=WorkerType.DECODE, block_size=64)


def run_to_end(
    rt: DisaggRuntime, collector: Collector, order: HandoffOrder, records: io.StringIO, events: io.StringIO
) -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """Run ``rt`` to the end; its summary, per-request records and event-log lines (header skipped)."""
    rt.run()
    rt.lifecycle.write_incomplete_records()
    summary = build_summary(collector, handoff_order=order.value, sla=SlaThresholds())
    recs = [json.loads(line) for line in records.getvalue().splitlines()]
    evs = [json.loads(line) for line in events.getvalue().splitlines()[1:]]
    return summary, recs, evs


def fake_run(
    workload: Workload | None = None,
    *,
    order: HandoffOrder = HandoffOrder.SOURCE_FIRST,
    n_prefill: int = 1,
    n_decode: int = 1,
    prefill_ms: float = 10.0,
    decode_ms: float = 5.0,
    bandwidth: float | None = None,
    kv_bytes: int | None = None,
    capacity: int | None = None,
    reject_over: int | None = None,
    max_in_flight: int | None = None,
    max_sim_time_ms: float | None = None,
    decode_ms_per_worker: Sequence[float] | None = None,
    inject: Sequence[tuple[float, int, type]] = (),
    never_reserve: bool = False,
) -> FakeRun:
    if workload is None:
        workload = SyntheticWorkload(SyntheticSpec(requests=4, rate=100.0, isl_mean=600, osl_mean=3, spread=0.0))
    pargs, dargs = fake_engine_args(order, bandwidth, kv_bytes)
    prefill = [FakeWorker(pargs, i, prefill_ms=prefill_ms, reject_prompts_over=reject_over) for i in range(n_prefill)]
    decode = [
        FakeWorker(dargs, i, decode_ms=(decode_ms_per_worker[i] if decode_ms_per_worker else decode_ms), capacity=capacity)
        for i in range(n_decode)
    ]
    for d in decode:
        d.never_reserve = never_reserve
    records = io.StringIO()
    events = io.StringIO()
    collector = Collector(workload.num_requests)
    rt = DisaggRuntime(
        admission=AdmissionQueue(workload, max_in_flight=max_in_flight),
        prefill_args=pargs,
        decode_args=dargs,
        prefill_workers=prefill,  # type: ignore[arg-type]
        decode_workers=decode,  # type: ignore[arg-type]
        order=order,
        collector=collector,
        max_sim_time_ms=max_sim_time_ms,
        records=records,
        events=events,
    )
    for w in (*prefill, *decode):
        w.clock = lambda: rt.now_ms
    for t, rid, cls in inject:
        rt.control.inject(t, rid, cls)
    summary, recs, evs = run_to_end(rt, collector, order, records, events)
    return FakeRun(rt, prefill, decode, recs, evs, summary)


def small_workloads(n: int) -> st.SearchStrategy[SyntheticSpec]:
    """Small synthetic workloads of ``n`` requests that stress the bulk decode runs (bursty or
    sparse arrivals, short and long outputs, prefix groups, multi-turn sessions): the
    bulk / per-pass differential tests draw from it."""
    return st.builds(
        SyntheticSpec, requests=st.just(n), rate=st.sampled_from([20.0, 80.0, 400.0]),
        isl_mean=st.integers(40, 900), osl_mean=st.integers(2, 120),
        spread=st.sampled_from([0.0, 0.5, 0.9]), prefix_groups=st.integers(0, 3),
        turns=st.integers(1, 3), turn_delay_ms=st.sampled_from([0.0, 50.0]),
        seed=st.integers(0, 1000), trace_block_size=st.just(64),
    )


def engine_settings(draw: st.DrawFn) -> dict[str, object]:
    """The engine and cluster settings both bulk / per-pass differential tests draw: engine,
    block size, pool size, batch cap, transfer bandwidth (None: no delay), decode workers."""
    return {
        "engine": draw(st.sampled_from(["vllm", "sglang"])),
        "block_size": draw(st.sampled_from([16, 64])),
        "blocks": draw(st.sampled_from([120, 300, 4096])),
        "max_seqs": draw(st.sampled_from([2, 5, 256])),
        "bandwidth": draw(st.sampled_from([None, 1.0, 50.0])),
        "decode": draw(st.integers(1, 3)),
    }


_T = TypeVar("_T")


def both_ways(replay: Callable[[bool], _T]) -> tuple[_T, _T] | None:
    """``(bulk, per_pass)`` results of ``replay(bulk)``; None when the per-pass replay fails and
    the bulk one fails with the same message (a workload the engines cannot serve must fail the
    same way; bulk succeeding there is an error)."""
    try:
        per_pass = replay(False)
    except Exception as exc:
        try:
            replay(True)
        except Exception as exc2:
            assert str(exc2) == str(exc)
            return None
        raise AssertionError(f"bulk run succeeded where the per-pass run failed: {exc}") from exc
    return replay(True), per_pass
