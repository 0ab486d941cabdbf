"""A sweep from start to end: validate everything, run every configuration, rank the results.

Why validation first and in one place: a sweep may run for hours on a cluster, so every bad
input -- a malformed range, an unknown key, an engine setting no worker accepts, a bad SLA, a
bad trace line -- must fail before the first replay starts (``ValueError``: the CLI's exit 2).
Once running, a configuration that fails is recorded with its error and the sweep goes on.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from dmocker.replay.config import ClusterMode, ConfigError, ReplayConfig, WorkloadKind, resolve_name
from dmocker.replay.report import JsonValue
from dmocker.replay.routing import parse_router
from dmocker.replay.workload.traces import open_trace

from .grid import SHAPE_KEYS, ConfigValue, GridError, config_label, expand, gpu_shapes
from .rank import Row, build_rows, sweep_document
from .runners import Backend, run_tasks
from .task import SearchSpec, SweepTask, TaskResult

__all__ = ["SweepPlan", "SweepOutcome", "plan_sweep", "run_sweep"]


@dataclass(frozen=True)
class SweepPlan:
    """A validated sweep: the base configuration, the axes and their expansion."""

    base: ReplayConfig
    axes: dict[str, tuple[ConfigValue, ...]]
    configs: list[dict[str, ConfigValue]]
    target: float
    search: SearchSpec | None = None
    gpus: tuple[ConfigValue, ...] = ()  # the GPU counts whose shapes were crossed with the axes

    def tasks(self) -> list[SweepTask]:
        return [SweepTask(i, cfg, self.base, self.search) for i, cfg in enumerate(self.configs)]

    @property
    def trace(self) -> str | None:
        """The trace file every configuration reads (None for a synthetic workload)."""
        t = self.base.workload.trace
        return t.path if t is not None else None

    @property
    def sla(self) -> dict[str, float | None]:
        s = self.base.sla
        return {"ttft_ms": s.ttft_ms, "itl_ms": s.itl_ms, "e2e_ms": s.e2e_ms}


@dataclass(frozen=True)
class SweepOutcome:
    rows: list[Row]
    document: dict[str, JsonValue] = field(repr=False)

    @property
    def failed(self) -> int:
        return sum(1 for r in self.rows if not r.ok)


def plan_sweep(
    base: ReplayConfig,
    axes: dict[str, tuple[ConfigValue, ...]],
    *,
    sla_attainment: float = 0.99,
    max_rate: bool = False,
    search_steps: int = 8,
    gpus: tuple[ConfigValue, ...] = (),
) -> SweepPlan:
    """Validate the whole sweep (``ValueError`` naming the flag or field) and expand it: every
    configuration is built (and so checked), the routers loaded, a trace read.  ``gpus``: for
    each GPU count, the aggregated cluster and every prefill/decode split of it
    (:func:`~.grid.gpu_shapes`), crossed with the axes."""
    if isinstance(sla_attainment, bool) or not isinstance(sla_attainment, (int, float)) \
            or not math.isfinite(sla_attainment) or not 0 < sla_attainment <= 1:
        raise ValueError(f"--sla-attainment must be a number in (0, 1], got {sla_attainment!r}")
    configs = expand(axes)
    if gpus:
        clash = sorted({k for k in axes for p in _paths(k) for s in SHAPE_KEYS if p in _paths(s)})
        if clash:
            raise GridError(f"--gpus sets the cluster's shape: do not also sweep {', '.join(clash)}")
        shapes = gpu_shapes(gpus, base.model.tensor_parallel_size)
        configs = [{**shape, **values} for shape in shapes for values in configs]
    if not configs:
        raise GridError("the sweep is empty")
    routers: set[str] = set()
    for values in configs:
        try:
            config = base.with_values(values)
        except ConfigError as exc:
            raise ValueError(f"configuration {config_label(values) if values else '(base)'}: {exc}") from None
        routers.add(config.router.name)
    for name in sorted(routers):
        try:
            parse_router(name)
        except ValueError as exc:
            raise GridError(f"--router: {exc}") from None

    # The trace: every line is read and checked now, once.
    trace = base.workload.trace
    if trace is not None:
        checked = open_trace(trace.path, trace.format, trace_block_size=trace.trace_block_size,
                             clamp_input_length=trace.clamp_input_length)
        close = getattr(checked, "close", None)
        if close is not None:
            close()

    search: SearchSpec | None = None
    if max_rate:
        if base.sla.ttft_ms is None and base.sla.itl_ms is None and base.sla.e2e_ms is None:
            raise ValueError("--max-rate needs at least one SLA bound (--sla-ttft-ms, --sla-itl-ms, --sla-e2e-ms)")
        variable = "arrival_speedup_ratio" if trace is not None else "rate"
        if base.workload.kind is WorkloadKind.EXPLICIT:
            raise ValueError("--max-rate needs a trace or a synthetic workload")
        swept = {p for key in axes for p in _paths(key)}
        if _paths(variable) & swept:
            raise ValueError(f"--max-rate searches {variable}: do not sweep --{variable.replace('_', '-')} with it")
        start = base.workload.arrival_speedup_ratio if trace is not None else base.workload.synthetic_spec.rate
        if isinstance(search_steps, bool) or not isinstance(search_steps, int) or search_steps < 0:
            raise ValueError(f"--search-steps must be an integer >= 0, got {search_steps!r}")
        search = SearchSpec(variable, float(start), float(sla_attainment), steps=search_steps)
    return SweepPlan(base, dict(axes), configs, float(sla_attainment), search, tuple(gpus))


def gpu_count(config: ReplayConfig) -> int:
    """The GPUs a configuration uses: its workers, times the model's tensor-parallel size."""
    c = config.cluster
    workers = c.workers if c.mode is ClusterMode.AGG else c.prefill_workers + c.decode_workers
    return workers * config.model.tensor_parallel_size


def _paths(name: str) -> set[str]:
    return set(resolve_name(name))


def run_sweep(
    plan: SweepPlan,
    *,
    jobs: int = 1,
    backend: Backend = Backend.LOCAL,
    ray_address: str | None = None,
    on_done: Callable[[TaskResult], None] | None = None,
) -> SweepOutcome:
    """Run every configuration of ``plan`` and rank the results (rows in sweep order)."""
    results = run_tasks(plan.tasks(), trace=plan.trace, jobs=jobs, backend=backend,
                        ray_address=ray_address, on_done=on_done)
    gpus = [gpu_count(plan.base.with_values(values)) for values in plan.configs]
    base_json = plan.base.to_json()
    rows = build_rows(results, plan.configs, gpus, base_json, plan.target)
    axes = {**plan.axes, "gpus": plan.gpus} if plan.gpus else plan.axes
    doc = sweep_document(rows, base=base_json, axes=axes, sla=plan.sla, target=plan.target,
                         max_rate=plan.search is not None)
    return SweepOutcome(rows, doc)

