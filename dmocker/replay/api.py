"""``dmocker.replay.run``: the Python entry point of the disaggregated replay.

``run(config)`` takes one :class:`~dmocker.replay.config.ReplayConfig` (checked when it was
built) and returns the :class:`~dmocker.replay.report.Report`.  What a configuration cannot say
by itself -- user classes that must be imported (``MODULE:CLASS`` routers, planners,
coordinators) and the trace's lines -- is checked here, before any simulation work and before
any output file exists, so bad input from any surface fails with one ``ValueError``.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from typing import IO, TYPE_CHECKING

from dmocker._atomic import AtomicFile
from dmocker.handoff import HandoffOrder, order_for_engine
from dmocker.engines.interface import EngineWorker
from dmocker.engines.registry import make_worker

from .collector import Collector
from .config import DEFAULT_SYNTHETIC, ClusterMode, ReplayConfig, WorkloadKind
from .report import Report, SlaThresholds, build_summary
from .routing import Pool, RouterContext, parse_router
from .runtime import AggRuntime, DisaggRuntime
from . import end_of_run as _end
from .gc_quiet import collect_rarely
from .timeseries import TimeSeries, TimeSeriesRecorder, add_standard_gauges, finish as finish_timeseries
from .workload import AdmissionQueue, SyntheticWorkload, Workload
from .workload.traces import open_trace

if TYPE_CHECKING:
    from .planner.wiring import PlannerOptions

__all__ = ["run", "run_pass_by_pass", "DecodeStepping", "DEFAULT_SYNTHETIC"]


class DecodeStepping(enum.Enum):
    """How decode passes are simulated; both give the same outputs."""

    BULK = "bulk"  # a run of passes whose batch does not change is computed at once (the default)
    PASS_BY_PASS = "pass-by-pass"  # every pass on its own: slower, the oracle BULK is tested against


@collect_rarely
def run(config: ReplayConfig, *, progress: bool = False) -> Report:
    """Replay ``config`` and return its Report.

    ``progress`` shows a progress bar on stderr.  End-of-run invariants are always checked
    (:mod:`dmocker.replay.invariants`): the summary says ``invariants_ok`` and lists what broke.
    Raises ``ValueError`` on bad input (``WorkloadError`` for trace problems), ``PlannerError``
    when a planner fails mid-run.
    """
    return _replay(config, DecodeStepping.BULK, progress)


@collect_rarely
def run_pass_by_pass(config: ReplayConfig, *, progress: bool = False) -> Report:
    """:func:`run`, simulating every decode pass one by one instead of computing runs of passes
    whose batch does not change at once.  Same outputs, slower: the oracle the default is
    tested against (``tests/replay/test_bulk_differential.py``)."""
    return _replay(config, DecodeStepping.PASS_BY_PASS, progress)


def _workload(config: ReplayConfig) -> Workload:
    """The workload object of the run (a trace is read and checked whole here)."""
    w = config.workload
    kind = w.kind
    if kind is WorkloadKind.EXPLICIT:
        return w.workload_object
    if kind is WorkloadKind.TRACE:
        t = w.trace
        assert t is not None
        return open_trace(t.path, t.format, trace_block_size=t.trace_block_size,
                          arrival_speedup_ratio=w.arrival_speedup_ratio, clamp_input_length=t.clamp_input_length)
    spec = w.synthetic_spec
    if w.arrival_speedup_ratio != 1.0:
        # As for traces: arrivals and think times are divided by the ratio.
        spec = dataclasses.replace(spec, rate=spec.rate * w.arrival_speedup_ratio,
                                   turn_delay_ms=spec.turn_delay_ms / w.arrival_speedup_ratio)
    return SyntheticWorkload(spec)


def _planner_options(config: ReplayConfig) -> PlannerOptions | None:
    p = config.planner
    if p.policy is None:
        return None
    # (imported here: a replay without a planner never loads the planner's modules)
    from .planner import wiring

    return wiring.PlannerOptions.check(
        p.policy, startup_time_s=p.startup_time_s, throughput_interval_s=p.throughput_interval_s,
        load_interval_s=p.load_interval_s, min_endpoint=p.min_endpoint, max_gpu_budget=p.max_gpu_budget,
        sla_ttft_ms=config.sla.ttft_ms, sla_itl_ms=config.sla.itl_ms,
    )


def _replay(config: ReplayConfig, stepping: DecodeStepping, progress: bool) -> Report:
    started = time.perf_counter()
    if not isinstance(config, ReplayConfig):
        raise TypeError(f"run() takes a ReplayConfig (docs/config.md), got {type(config).__name__}: "
                        "build one with ReplayConfig(...) or ReplayConfig.from_values({...})")
    if config.cluster.mode is ClusterMode.AGG:
        return _replay_agg(config, stepping, progress, started)
    # ---- what the configuration alone cannot check: user code, the trace's lines ----------
    prefill_args, decode_args = config.engine_args()
    order: HandoffOrder = order_for_engine(prefill_args.engine)
    router_spec = parse_router(config.router.name)
    routing = config.router.kv.validate()
    planner_opts = _planner_options(config)
    workload = _workload(config)
    prefill_workers, decode_workers = config.cluster.prefill_workers, config.cluster.decode_workers
    hooks = _end.prepare(
        config.faults, config.coordinator, prefill_args=prefill_args, decode_args=decode_args,
        prefill_workers=prefill_workers, decode_workers=decode_workers, num_requests=workload.num_requests,
        clocks=config.transfer, order=order,
    )
    sla = SlaThresholds(config.sla.ttft_ms, config.sla.itl_ms, config.sla.e2e_ms)
    report_config = config.to_json(outputs=False)
    derived = config.derived()
    if derived:
        report_config["derived"] = derived
    per_request, events = config.outputs.per_request, config.outputs.events

    # ---- run: the runtime, its workers, routers and collector, driven by the config ---------
    admission = AdmissionQueue(workload, max_in_flight=config.limits.max_in_flight)
    routers = tuple(
        router_spec.build(RouterContext(pool, config.router.seed, args.page_tokens, args.max_num_batched_tokens),
                          routing)
        for pool, args in ((Pool.PREFILL, prefill_args), (Pool.DECODE, decode_args))
    )
    kv_feed = routers[0].wants_kv_events
    p_workers: list[EngineWorker] = [
        make_worker(prefill_args, i, record_kv_events=kv_feed) for i in range(prefill_workers)
    ]
    d_workers: list[EngineWorker] = [make_worker(decode_args, i) for i in range(decode_workers)]
    collector = Collector(workload.num_requests)
    planner_loop = None
    if planner_opts is not None:
        from .planner.wiring import build_planner_loop

        planner_loop = build_planner_loop(planner_opts, prefill_args, decode_args, (prefill_workers, decode_workers))
    records_w = AtomicFile(per_request) if per_request is not None else None
    events_w = AtomicFile(events) if events is not None else None
    bar = _progress_bar(workload.num_requests) if progress else None
    recorder = TimeSeriesRecorder() if config.outputs.timeseries else None
    series: TimeSeries | None = None
    try:
        runtime = DisaggRuntime(
            admission=admission,
            prefill_args=prefill_args,
            decode_args=decode_args,
            prefill_workers=p_workers,
            decode_workers=d_workers,
            order=order,
            collector=collector,
            max_sim_time_ms=config.limits.max_sim_time_ms,
            records=_as_io(records_w),
            events=_as_io(events_w),
            on_retired=bar.retired if bar is not None else None,
            planner=planner_loop,
            bulk=stepping is DecodeStepping.BULK,
            sampler=recorder,
            coordinator_factory=hooks.factory,
            prefill_router=routers[0],
            decode_router=routers[1],
        )
        if planner_loop is not None:
            planner_loop.attach(runtime.control)
        hooks.attach(runtime)
        if recorder is not None:
            table = runtime.table
            add_standard_gauges(recorder, lambda: table.in_flight, p_workers, d_workers)
            if planner_loop is not None:
                recorder.add_gauge("workers", planner_loop.worker_counts)
        result = hooks.run(runtime)
        runtime.lifecycle.write_incomplete_records()
        summary = build_summary(collector, handoff_order=order.value, sla=sla)
        if router_spec.mode != "round_robin":
            summary["router_mode"] = router_spec.mode
            summary.update(runtime.routing.summary())
        if recorder is not None:
            series = finish_timeseries(recorder, collector, result.now_ms)
    except BaseException:
        for w in (records_w, events_w):
            if w is not None:
                w.abort()
        raise
    finally:
        if bar is not None:
            bar.close()
        close = getattr(workload, "close", None)
        if close is not None:
            close()
    for w in (records_w, events_w):
        if w is not None:
            w.commit()
    hooks.finish(runtime, collector, summary, order=order, capped=result.capped, events_path=events)
    report_config["capped"] = result.capped
    return Report(
        summary=summary,
        config=report_config,
        records_path=per_request,
        events_path=events,
        wall_seconds=time.perf_counter() - started,
        planner=planner_loop.report() if planner_loop is not None else None,
        timeseries=series,
    )


def _replay_agg(config: ReplayConfig, stepping: DecodeStepping, progress: bool, started: float) -> Report:
    """An aggregated run (``cluster.mode = agg``): one pool of workers, no handoff."""
    args = config.agg_engine_args()
    router_spec = parse_router(config.router.name)
    routing = config.router.kv.validate()
    workload = _workload(config)
    sla = SlaThresholds(config.sla.ttft_ms, config.sla.itl_ms, config.sla.e2e_ms)
    report_config = config.to_json(outputs=False)
    derived = config.derived()
    if derived:
        report_config["derived"] = derived
    per_request = config.outputs.per_request

    admission = AdmissionQueue(workload, max_in_flight=config.limits.max_in_flight)
    # The pool's router routes arrivals as the disaggregated replay's prefill router does.
    router = router_spec.build(
        RouterContext(Pool.PREFILL, config.router.seed, args.page_tokens, args.max_num_batched_tokens,
                      aggregated=True), routing)
    workers: list[EngineWorker] = [
        make_worker(args, i, record_kv_events=router.wants_kv_events) for i in range(config.cluster.workers)
    ]
    collector = Collector(workload.num_requests)
    records_w = AtomicFile(per_request) if per_request is not None else None
    bar = _progress_bar(workload.num_requests) if progress else None
    recorder = TimeSeriesRecorder() if config.outputs.timeseries else None
    series: TimeSeries | None = None
    try:
        runtime = AggRuntime(
            admission=admission, workers=workers, router=router, collector=collector,
            trace_block=admission.trace_block_size, block_size=args.page_tokens,
            max_sim_time_ms=config.limits.max_sim_time_ms, records=_as_io(records_w),
            on_retired=bar.retired if bar is not None else None, sampler=recorder,
            bulk=stepping is DecodeStepping.BULK,
        )
        if recorder is not None:
            add_standard_gauges(recorder, lambda: runtime.in_flight, [], workers)
        result = runtime.run()
        runtime.write_incomplete_records()
        summary = build_summary(collector, handoff_order="none", sla=sla)
        summary["cluster_mode"] = ClusterMode.AGG.value
        if router_spec.mode != "round_robin":
            summary["router_mode"] = router_spec.mode
            summary.update(runtime.summary())
        if recorder is not None:
            series = finish_timeseries(recorder, collector, result.now_ms)
    except BaseException:
        if records_w is not None:
            records_w.abort()
        raise
    finally:
        if bar is not None:
            bar.close()
        close = getattr(workload, "close", None)
        if close is not None:
            close()
    if records_w is not None:
        records_w.commit()
    _end.finish_agg(runtime, collector, summary, order=HandoffOrder.SOURCE_FIRST, capped=result.capped)
    report_config["capped"] = result.capped
    return Report(summary=summary, config=report_config, records_path=per_request, events_path=None,
                  wall_seconds=time.perf_counter() - started, planner=None, timeseries=series)


class _WriterIO:
    """The slice of ``IO[str]`` the runtime uses, over an AtomicFile."""

    def __init__(self, w: AtomicFile) -> None:
        self.write = w.write


def _as_io(w: AtomicFile | None) -> IO[str] | None:
    return None if w is None else _WriterIO(w)  # type: ignore[return-value]


class _Bar:
    def __init__(self, total: int) -> None:
        from tqdm import tqdm

        self._bar = tqdm(total=total, unit="req", delay=2.0, dynamic_ncols=True, leave=False)
        self._n = 0

    def retired(self, _request_id: int) -> None:
        self.update(1)

    def update(self, n: int) -> None:
        self._n += n
        if self._n >= 256:
            self._bar.update(self._n)
            self._n = 0

    def close(self) -> None:
        if self._n:
            self._bar.update(self._n)
        self._bar.close()


def _progress_bar(total: int) -> _Bar:
    return _Bar(total)

