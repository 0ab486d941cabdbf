"""A scripted planner and a fake-worker runtime with a planner loop, for the planner tests."""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dmocker.handoff import HandoffOrder
from dmocker.replay import PlannerMetrics, ScalingDecision
from dmocker.replay.collector import Collector
from dmocker.replay.planner import PlannerLoop
from dmocker.replay.runtime import DisaggRuntime
from dmocker.replay.workload import AdmissionQueue, MooncakeTrace, SyntheticSpec, SyntheticWorkload, Workload

from ..fake_engine import FakeWorker
from ..helpers import fake_engine_args, run_to_end


@dataclass
class Scripted:
    """Ticks at the given times; at each, sets the given (prefill, decode) targets."""

    script: Sequence[tuple[float, int | None, int | None]]
    seen: list[PlannerMetrics] = field(default_factory=list)
    on_tick_hook: Callable[[PlannerMetrics], None] | None = None

    def initial_tick_ms(self) -> float | None:
        return self.script[0][0] if self.script else None

    def on_tick(self, metrics: PlannerMetrics) -> ScalingDecision:
        self.seen.append(metrics)
        if self.on_tick_hook is not None:
            self.on_tick_hook(metrics)
        i = len(self.seen) - 1
        _, p, d = self.script[i]
        nxt = self.script[i + 1][0] if i + 1 < len(self.script) else None
        return ScalingDecision(p, d, nxt)


@dataclass
class PlannerRun:
    runtime: DisaggRuntime
    loop: PlannerLoop
    prefill: list[FakeWorker]
    decode: list[FakeWorker]
    records: list[dict[str, Any]]
    events: list[dict[str, Any]]
    summary: dict[str, Any]
    report: dict[str, Any]

    def record(self, rid: int) -> dict[str, Any]:
        return next(r for r in self.records if r["request_id"] == rid)


def workload(n: int = 4, *, rate: float = 100.0, isl: int = 600, osl: int = 3) -> SyntheticWorkload:
    return SyntheticWorkload(SyntheticSpec(requests=n, rate=rate, isl_mean=isl, osl_mean=osl, spread=0.0))


def trace(path: Path, arrivals: Sequence[float], *, isl: int = 600, osl: int = 3) -> MooncakeTrace:
    """A Mooncake trace with requests at exactly the given times (distinct prompts)."""
    rows = [
        json.dumps({"timestamp": t, "input_length": isl, "output_length": osl,
                    "hash_ids": [1000 * i + k for k in range(-(-isl // 512))]})
        for i, t in enumerate(arrivals)
    ]
    path.write_text("\n".join(rows) + "\n")
    return MooncakeTrace(path)


def planner_run(
    planner: object,
    wl: Workload | None = None,
    *,
    order: HandoffOrder = HandoffOrder.SOURCE_FIRST,
    n_prefill: int = 1,
    n_decode: int = 1,
    prefill_ms: float = 10.0,
    decode_ms: float = 5.0,
    startup_s: float = 0.0,
    bandwidth: float | None = None,
    kv_bytes: int | None = None,
    inject: Sequence[tuple[float, int, type]] = (),
    first_tick_ms: float | None = None,
    expose: Callable[[list[FakeWorker], list[FakeWorker]], None] | None = None,
) -> PlannerRun:
    """Run ``planner`` on fake workers; ``expose`` receives the two live worker lists
    (new workers are appended as the planner adds them) before the run starts."""
    wl = wl if wl is not None else workload()
    pargs, dargs = fake_engine_args(order, bandwidth, kv_bytes)
    prefill = [FakeWorker(pargs, i, prefill_ms=prefill_ms) for i in range(n_prefill)]
    decode = [FakeWorker(dargs, i, decode_ms=decode_ms) for i in range(n_decode)]
    pools = (prefill, decode)
    if expose is not None:
        expose(prefill, decode)
    clock: list[DisaggRuntime] = []

    def new_worker(stage: int, idx: int) -> FakeWorker:
        w = FakeWorker(pargs if stage == 0 else dargs, idx, prefill_ms=prefill_ms, decode_ms=decode_ms)
        w.clock = lambda: clock[0].now_ms
        pools[stage].append(w)
        return w

    first = first_tick_ms if first_tick_ms is not None else planner.initial_tick_ms()  # type: ignore[attr-defined]
    loop = PlannerLoop(planner, first_tick_ms=first, initial_workers=(n_prefill, n_decode),
                       make_worker=new_worker, startup_time_s=startup_s)  # type: ignore[arg-type]
    records = io.StringIO()
    events = io.StringIO()
    collector = Collector(wl.num_requests)
    rt = DisaggRuntime(
        admission=AdmissionQueue(wl), prefill_args=pargs, decode_args=dargs,
        prefill_workers=list(prefill), decode_workers=list(decode),  # type: ignore[arg-type]
        order=order, collector=collector, records=records, events=events, planner=loop,
    )
    loop.attach(rt.control)
    clock.append(rt)
    for w in (*prefill, *decode):
        w.clock = lambda: rt.now_ms
    for t, rid, cls in inject:
        rt.control.inject(t, rid, cls)
    summary, recs, evs = run_to_end(rt, collector, order, records, events)
    return PlannerRun(rt, loop, prefill, decode, recs, evs, summary, json.loads(json.dumps(loop.report())))
