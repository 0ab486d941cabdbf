"""``dmocker.replay.run``: the Python entry point of the disaggregated replay.

Why one function with keyword arguments: it mirrors the CLI flag for flag (the CLI is a thin
parser over it), and it is where every argument is checked, so bad input from either surface
fails with one ``ValueError`` naming the argument, before any simulation work and before any
output file exists.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import os
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING

from dmocker._atomic import AtomicFile
from dmocker.handoff import HandoffOrder, TransferTimingMode, order_for_engine
from dmocker.engines.interface import Backend, EngineArgs, EngineWorker, WorkerType, make_worker

from .collector import Collector
from .report import JsonValue, Report, SlaThresholds, build_summary
from .routing import Pool, RouterConfig, RouterContext, parse_router
from .runtime import DisaggRuntime
from . import end_of_run as _end
from .faults import FaultPlan
from .gc_quiet import collect_rarely
from .timeseries import TimeSeries, TimeSeriesRecorder, add_standard_gauges, finish as finish_timeseries
from .workload import AdmissionQueue, MooncakeTrace, SyntheticSpec, SyntheticWorkload, Workload, WorkloadError

if TYPE_CHECKING:
    from .planner.wiring import PlannerOptions

__all__ = ["run", "DEFAULT_SYNTHETIC", "resolve_engine_args"]

DEFAULT_SYNTHETIC = SyntheticSpec(requests=300, rate=15.0, isl_mean=2000, osl_mean=200, seed=0)
"""The built-in default workload (``dmocker replay`` with no arguments): small and quick."""

def _check_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


def _check_float(name: str, value: object, *, positive: bool = False, allow_zero: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if positive and (value < 0 or (value == 0 and not allow_zero)):
        raise ValueError(f"{name} must be {'> 0' if not allow_zero else '>= 0'}, got {value!r}")
    return float(value)


def _timing_mode(value: str | TransferTimingMode | None) -> TransferTimingMode | None:
    if value is None or isinstance(value, TransferTimingMode):
        return value
    text = str(value).strip().lower().replace("_", "-")
    for mode in TransferTimingMode:
        if mode.value == text:
            return mode
    raise ValueError(
        f"kv_transfer_timing_mode must be 'full-prompt' or 'destination-missing', got {value!r}"
    )


def resolve_engine_args(
    engine: str,
    *,
    prefill_engine_args: EngineArgs | None,
    decode_engine_args: EngineArgs | None,
    overrides: dict[str, object],
) -> tuple[EngineArgs, EngineArgs]:
    """Build (and validate) the two pools' args; ``overrides`` apply to both when given."""
    if isinstance(engine, str) and engine.strip().lower() in ("trtllm", "trt-llm", "trt_llm"):
        # The reference rejects it too: its mock has no destination-side handoff.
        raise ValueError("engine 'trtllm' is not supported by the disaggregated replay "
                         "(TRT-LLM has no destination handoff): use 'vllm' or 'sglang'")
    backend = Backend.parse(engine) if isinstance(engine, str) else engine
    if not isinstance(backend, Backend):
        raise ValueError(f"unknown engine {engine!r}: expected 'vllm' or 'sglang'")
    sides: list[EngineArgs] = []
    for given, role in ((prefill_engine_args, WorkerType.PREFILL), (decode_engine_args, WorkerType.DECODE)):
        args = given if given is not None else EngineArgs(backend=backend, worker_type=role)
        if not isinstance(args, EngineArgs):
            raise ValueError(f"{role.value}_engine_args must be an EngineArgs, got {type(args).__name__}")
        changes = {k: v for k, v in overrides.items() if v is not None}
        args = dataclasses.replace(args, worker_type=role, **changes)  # type: ignore[arg-type]
        sides.append(args.validate())
    prefill, decode = sides
    if prefill.backend is not decode.backend:
        raise ValueError(
            f"prefill and decode engines must match: prefill is {prefill.backend.value}, "
            f"decode is {decode.backend.value}"
        )
    if prefill.page_tokens != decode.page_tokens:
        raise ValueError(
            f"prefill and decode block sizes must match: {prefill.page_tokens} vs {decode.page_tokens}"
        )
    return prefill, decode


def _args_json(args: EngineArgs) -> dict[str, JsonValue]:
    out: dict[str, JsonValue] = {}
    for f in dataclasses.fields(args):
        v = getattr(args, f.name)
        out[f.name] = v.value if isinstance(v, enum.Enum) else v
    out["block_size"] = args.page_tokens
    return out


@collect_rarely
def run(
    trace: str | os.PathLike[str] | None = None,
    *,
    synthetic: int | SyntheticSpec | None = None,
    rate: float | None = None,
    isl_mean: int | None = None,
    osl_mean: int | None = None,
    spread: float | None = None,
    prefix_groups: int | None = None,
    prefix_ratio: float | None = None,
    turns: int | None = None,
    seed: int = 0,
    engine: str = "vllm",
    prefill_workers: int = 2,
    decode_workers: int = 2,
    prefill_engine_args: EngineArgs | None = None,
    decode_engine_args: EngineArgs | None = None,
    block_size: int | None = None,
    num_gpu_blocks: int | None = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    max_model_len: int | None = None,
    speedup_ratio: float | None = None,
    decode_speedup_ratio: float | None = None,
    kv_transfer_bandwidth: float | None = None,
    kv_bytes_per_token: int | None = None,
    kv_transfer_timing_mode: str | TransferTimingMode | None = None,
    fixed_prefill_ms: float | None = None,
    fixed_decode_ms: float | None = None,
    trace_block_size: int = 512,
    arrival_speedup_ratio: float = 1.0,
    clamp_input_length: bool = False,
    max_in_flight: int | None = None,
    sla_ttft_ms: float | None = None,
    sla_itl_ms: float | None = None,
    sla_e2e_ms: float | None = None,
    max_sim_time_ms: float | None = None,
    per_request: str | os.PathLike[str] | None = None,
    events: str | os.PathLike[str] | None = None,
    progress: bool = False,
    on_retired: Callable[[int], None] | None = None,
    planner: object | str | None = None,
    startup_time_s: float = 0.0,
    throughput_interval_s: float = 180.0,
    load_interval_s: float = 5.0,
    min_endpoint: int = 1,
    max_gpu_budget: int = 8,
    bulk: bool = True,
    timeseries: bool = False,
    faults: FaultPlan | None = None,
    coordinator: str | Callable[..., object] | None = None,
    workload: Workload | None = None,
    router: str = "round-robin",
    router_config: RouterConfig | None = None,
) -> Report:
    """Replay a Mooncake trace (``trace``) or a synthetic workload and return the Report.

    With neither ``trace`` nor ``synthetic``, runs :data:`DEFAULT_SYNTHETIC`.  Engine flags
    (``block_size`` ... ``kv_transfer_timing_mode``, and the fixed-timing pair
    ``fixed_prefill_ms`` / ``fixed_decode_ms``) override both pools' args; pass
    ``prefill_engine_args`` / ``decode_engine_args`` for per-pool settings.  ``per_request``
    and ``events`` are JSONL paths written atomically (nothing appears on error).
    ``bulk=False`` simulates every decode pass one by one instead of computing runs of
    determined passes at once (same outputs; the oracle the bulk path is tested against).
    ``timeseries`` records the series of the HTML report (``Report.timeseries``; off: no cost).
    ``clamp_input_length`` reproduces the reference's silent clamp of ``input_length`` to
    ``len(hash_ids) * trace_block_size``; by default exceeding it is a ``WorkloadError``.
    ``faults`` injects a :class:`~dmocker.replay.faults.FaultPlan`; ``coordinator`` (``"module:Class"``
    or a factory with the public coordinator API) drives every handoff instead of ours; ``workload``
    is any :class:`~dmocker.replay.workload.Workload` (fuzz scenarios), instead of a trace or
    ``synthetic``.  End-of-run invariants are always checked (:mod:`dmocker.replay.invariants`):
    the summary says ``invariants_ok`` and lists what broke.
    ``router`` picks both pools' routing: ``"round-robin"`` (default), ``"kv"`` (the KV-aware
    router, tuned by ``router_config``) or ``"MODULE:CLASS"`` (a user class implementing
    :class:`dmocker.replay.routing.Router`).
    Raises ``ValueError`` (``WorkloadError`` for trace problems) on bad input.

    ``planner``: an object with ``initial_tick_ms()`` and ``on_tick(metrics)`` (see
    :mod:`dmocker.replay.planner`), ``"throughput"`` / ``"load"`` (built-in policies, targets
    from ``sla_ttft_ms`` / ``sla_itl_ms``, then the intervals, ``min_endpoint`` and
    ``max_gpu_budget``), or ``"MODULE:CLASS"``; new workers are ready ``startup_time_s``
    after a scale-up.  A planner failing mid-run raises ``PlannerError``.
    """
    started = time.perf_counter()
    # ---- arguments -------------------------------------------------------------------------
    # ---- planner (None: fixed pools, exactly as before) -----------------------------------
    _check_float("startup_time_s", startup_time_s, positive=True)
    planner_opts: PlannerOptions | None = None
    if planner is not None:
        # (imported here: a replay without a planner never loads the planner's modules)
        from .planner import wiring

        planner_opts = wiring.PlannerOptions.check(
            planner, startup_time_s=startup_time_s, throughput_interval_s=throughput_interval_s,
            load_interval_s=load_interval_s, min_endpoint=min_endpoint, max_gpu_budget=max_gpu_budget,
            sla_ttft_ms=sla_ttft_ms, sla_itl_ms=sla_itl_ms,
        )
    _check_int("prefill_workers", prefill_workers, 0 if planner_opts is not None else 1)
    _check_int("decode_workers", decode_workers, 0 if planner_opts is not None else 1)
    _check_int("trace_block_size", trace_block_size, 1)
    _check_int("seed", seed, 0)
    _check_float("arrival_speedup_ratio", arrival_speedup_ratio, positive=True, allow_zero=False)
    if max_in_flight is not None:
        _check_int("max_in_flight", max_in_flight, 1)
    if max_sim_time_ms is not None:
        _check_float("max_sim_time_ms", max_sim_time_ms, positive=True)
    for name, value in (("sla_ttft_ms", sla_ttft_ms), ("sla_itl_ms", sla_itl_ms), ("sla_e2e_ms", sla_e2e_ms)):
        if value is not None:
            _check_float(name, value, positive=True)
    if kv_transfer_bandwidth is not None and (
        isinstance(kv_transfer_bandwidth, bool)
        or not isinstance(kv_transfer_bandwidth, (int, float))
        or not math.isfinite(kv_transfer_bandwidth)
        or kv_transfer_bandwidth < 0
    ):
        raise ValueError(f"kv_transfer_bandwidth must be a finite number >= 0 (GB/s), got {kv_transfer_bandwidth!r}")
    if block_size is not None:
        _check_int("block_size", block_size, 1)
    overrides: dict[str, object] = {
        "block_size": block_size,
        "num_gpu_blocks": num_gpu_blocks,
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": max_num_batched_tokens,
        "max_model_len": max_model_len,
        "speedup_ratio": speedup_ratio,
        "decode_speedup_ratio": decode_speedup_ratio,
        "kv_transfer_bandwidth": float(kv_transfer_bandwidth) if kv_transfer_bandwidth is not None else None,
        "kv_bytes_per_token": kv_bytes_per_token,
        "kv_transfer_timing_mode": _timing_mode(kv_transfer_timing_mode),
        "fixed_prefill_ms": fixed_prefill_ms,
        "fixed_decode_ms": fixed_decode_ms,
    }
    try:
        prefill_args, decode_args = resolve_engine_args(
            engine, prefill_engine_args=prefill_engine_args, decode_engine_args=decode_engine_args,
            overrides=overrides,
        )
    except TypeError as exc:
        raise ValueError(f"bad engine argument: {exc}") from None
    order: HandoffOrder = order_for_engine(prefill_args.backend.value)
    router_spec = parse_router(router)
    if router_config is not None and not isinstance(router_config, RouterConfig):
        raise ValueError(f"router_config must be a RouterConfig, got {type(router_config).__name__}")
    routing = (router_config or RouterConfig()).validate()

    # ---- workload ----------------------------------------------------------------------------
    workload_config: dict[str, JsonValue]
    if trace is not None and synthetic is not None:
        raise ValueError("give either a trace file or synthetic, not both")
    if workload is not None:
        if trace is not None or synthetic is not None:
            raise ValueError("give either a workload, a trace file or synthetic, not several")
        workload_config = {"kind": "explicit", "requests": workload.num_requests,
                           "trace_block_size": workload.trace_block_size}
    elif trace is not None:
        mooncake = MooncakeTrace(
            trace, trace_block_size=trace_block_size, arrival_speedup_ratio=arrival_speedup_ratio,
            clamp_input_length=clamp_input_length,
        )
        workload = mooncake
        workload_config = {
            "kind": "mooncake",
            "path": os.fspath(trace),
            "trace_block_size": trace_block_size,
            "arrival_speedup_ratio": arrival_speedup_ratio,
            "clamp_input_length": clamp_input_length,
            "requests": mooncake.num_requests,
        }
    else:
        base = synthetic if isinstance(synthetic, SyntheticSpec) else DEFAULT_SYNTHETIC
        changes: dict[str, object] = {
            "rate": rate, "isl_mean": isl_mean, "osl_mean": osl_mean, "spread": spread,
            "prefix_groups": prefix_groups, "prefix_ratio": prefix_ratio, "turns": turns,
        }
        if isinstance(synthetic, int) and not isinstance(synthetic, bool):
            changes["requests"] = synthetic
        elif synthetic is not None and not isinstance(synthetic, SyntheticSpec):
            raise WorkloadError(f"must be a request count or a SyntheticSpec, got {synthetic!r}", field="synthetic")
        if not isinstance(synthetic, SyntheticSpec):
            changes["seed"] = seed
            changes["trace_block_size"] = trace_block_size
        spec = dataclasses.replace(base, **{k: v for k, v in changes.items() if v is not None})  # type: ignore[arg-type]
        if arrival_speedup_ratio != 1.0:
            # As for traces: arrivals and think times are divided by the ratio.
            spec = dataclasses.replace(
                spec, rate=spec.rate * arrival_speedup_ratio,
                turn_delay_ms=spec.turn_delay_ms / arrival_speedup_ratio,
            )
        workload = SyntheticWorkload(spec)
        workload_config = {"kind": "synthetic", **{f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}}
    admission = AdmissionQueue(workload, max_in_flight=max_in_flight)
    hooks = _end.prepare(
        faults, coordinator, prefill_args=prefill_args, decode_args=decode_args,
        prefill_workers=prefill_workers, decode_workers=decode_workers, num_requests=workload.num_requests,
    )

    sla = SlaThresholds(sla_ttft_ms, sla_itl_ms, sla_e2e_ms)
    config: dict[str, JsonValue] = {
        "engine": prefill_args.backend.value,
        "handoff_order": order.value,
        "prefill_workers": prefill_workers,
        "decode_workers": decode_workers,
        "prefill_engine_args": _args_json(prefill_args),
        "decode_engine_args": _args_json(decode_args),
        "router": router_spec.mode,
        "mode": "trace" if max_in_flight is None else "concurrency",
        "max_in_flight": max_in_flight,
        "max_sim_time_ms": max_sim_time_ms,
        "sla_ttft_ms": sla_ttft_ms,
        "sla_itl_ms": sla_itl_ms,
        "sla_e2e_ms": sla_e2e_ms,
        "seed": seed,
        "workload": workload_config,
    }
    if router_spec.mode != "round_robin":
        config["router_config"] = dict(routing.as_json())

    # ---- run ---------------------------------------------------------------------------------
    routers = tuple(
        router_spec.build(RouterContext(pool, seed, args.page_tokens, args.max_num_batched_tokens), routing)
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
        config.update(planner_opts.config_json())
    records_w = AtomicFile(per_request) if per_request is not None else None
    events_w = AtomicFile(events) if events is not None else None
    bar = _progress_bar(workload.num_requests) if progress else None
    recorder = TimeSeriesRecorder() if timeseries else None
    series: TimeSeries | None = None

    def retired(rid: int) -> None:
        if bar is not None:
            bar.update(1)
        if on_retired is not None:
            on_retired(rid)

    try:
        runtime = DisaggRuntime(
            admission=admission,
            prefill_args=prefill_args,
            decode_args=decode_args,
            prefill_workers=p_workers,
            decode_workers=d_workers,
            order=order,
            collector=collector,
            max_sim_time_ms=max_sim_time_ms,
            records=_as_io(records_w),
            events=_as_io(events_w),
            on_retired=retired if (bar is not None or on_retired is not None) else None,
            planner=planner_loop,
            bulk=bulk,
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
    hooks.finish(runtime, collector, summary, config, order=order, capped=result.capped, events_path=events)
    config["capped"] = result.capped
    return Report(
        summary=summary,
        config=config,
        records_path=os.fspath(per_request) if per_request is not None else None,
        events_path=os.fspath(events) if events is not None else None,
        wall_seconds=time.perf_counter() - started,
        planner=planner_loop.report() if planner_loop is not None else None,
        timeseries=series,
    )


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

