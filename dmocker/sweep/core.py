"""A sweep from start to end: validate everything, run every configuration, rank the results.

Why validation first and in one place: a sweep may run for hours on a cluster, so every bad
input -- a malformed range, an unknown key, an engine setting no worker accepts, a bad SLA, a
bad trace line -- must fail before the first replay starts (``ValueError``: the CLI's exit 2).
Once running, a configuration that fails is recorded with its error and the sweep goes on.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dmocker.replay.api import DEFAULT_SYNTHETIC, resolve_engine_args, run as replay_run
from dmocker.replay.report import JsonValue
from dmocker.replay.routing import parse_router
from dmocker.replay.workload import MooncakeTrace, SyntheticSpec

from .grid import ConfigValue, GridError, expand
from .rank import Row, build_rows, sweep_document
from .runners import Backend, run_tasks
from .task import SearchSpec, SweepTask, TaskResult

__all__ = ["SweepPlan", "SweepOutcome", "plan_sweep", "run_sweep"]

_DEFAULTS = {k: p.default for k, p in inspect.signature(replay_run).parameters.items()}
_ENGINE_KEYS = ("block_size", "num_gpu_blocks", "max_num_seqs", "max_num_batched_tokens", "max_model_len",
                "speedup_ratio", "decode_speedup_ratio", "kv_transfer_bandwidth", "kv_bytes_per_token",
                "fixed_prefill_ms", "fixed_decode_ms")
_SYNTHETIC_KEYS = ("rate", "isl_mean", "osl_mean", "spread", "prefix_groups", "prefix_ratio", "turns")
_SLA_KEYS = ("sla_ttft_ms", "sla_itl_ms", "sla_e2e_ms")


@dataclass(frozen=True)
class SweepPlan:
    """A validated sweep: the base replay arguments, the axes and their expansion."""

    trace: str | None
    base: dict[str, Any]
    axes: dict[str, tuple[ConfigValue, ...]]
    configs: list[dict[str, ConfigValue]]
    target: float
    search: SearchSpec | None = None

    def tasks(self) -> list[SweepTask]:
        return [SweepTask(i, cfg, self.base, self.search) for i, cfg in enumerate(self.configs)]

    @property
    def sla(self) -> dict[str, float | None]:
        return {k.removeprefix("sla_"): self.base.get(k) for k in _SLA_KEYS}


@dataclass(frozen=True)
class SweepOutcome:
    rows: list[Row]
    document: dict[str, JsonValue] = field(repr=False)

    @property
    def failed(self) -> int:
        return sum(1 for r in self.rows if not r.ok)


def _default(key: str) -> Any:
    return _DEFAULTS.get(key)


def plan_sweep(
    trace: str | None,
    base: dict[str, Any],
    axes: dict[str, tuple[ConfigValue, ...]],
    *,
    sla_attainment: float = 0.99,
    max_rate: bool = False,
    search_steps: int = 8,
) -> SweepPlan:
    """Validate the whole sweep (``ValueError`` naming the flag or field) and expand it."""
    unknown = sorted(k for k in base if k not in _DEFAULTS or k == "trace")
    if unknown:
        raise GridError(f"not a replay argument: {', '.join(unknown)}")
    clash = sorted(set(base) & set(axes))
    if clash:
        raise GridError(f"given both as a base argument and as an axis: {', '.join(clash)}")
    if isinstance(sla_attainment, bool) or not isinstance(sla_attainment, (int, float)) \
            or not math.isfinite(sla_attainment) or not 0 < sla_attainment <= 1:
        raise ValueError(f"--sla-attainment must be a number in (0, 1], got {sla_attainment!r}")
    for key in _SLA_KEYS:
        v = base.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0):
            raise ValueError(f"--{key.replace('_', '-')} must be a number > 0 (ms), got {v!r}")
    configs = expand(axes)
    if not configs:
        raise GridError("the sweep is empty")

    routers = axes.get("router", (base["router"],) if "router" in base else ())
    for value in routers:
        try:
            parse_router(str(value))
        except ValueError as exc:
            raise GridError(f"--router: {exc}") from None

    # Engine settings: every combination that reaches the engines must validate.
    engine_keys = [k for k in ("engine", *_ENGINE_KEYS) if k in axes]
    seen: set[tuple[ConfigValue, ...]] = set()
    for cfg in configs:
        sig = tuple(cfg[k] for k in engine_keys)
        if sig in seen:
            continue
        seen.add(sig)
        merged = {**base, **cfg}
        overrides: dict[str, object] = {k: merged.get(k) for k in _ENGINE_KEYS}
        bw = overrides.get("kv_transfer_bandwidth")
        if bw is not None:
            overrides["kv_transfer_bandwidth"] = float(bw)  # type: ignore[arg-type]
        try:
            resolve_engine_args(str(merged.get("engine", _default("engine"))), prefill_engine_args=None,
                                decode_engine_args=None, overrides=overrides)
        except (TypeError, ValueError) as exc:
            where = ", ".join(f"{k}={cfg[k]}" for k in engine_keys)
            raise ValueError(f"configuration {where or '(base)'}: {exc}") from None

    # Workload: parse and validate the trace now (every line), or the synthetic spec per rate.
    if trace is not None:
        if any(k in base for k in _SYNTHETIC_KEYS) or "rate" in axes or base.get("synthetic") is not None:
            raise ValueError("give either a trace or synthetic workload flags (--synthetic, --rate, ...), not both")
        MooncakeTrace(trace, trace_block_size=int(base.get("trace_block_size", 512)),
                      clamp_input_length=bool(base.get("clamp_input_length", False)))
    else:
        for rate in axes.get("rate", (base.get("rate"),)):
            _synthetic_spec(base, rate).validate()

    search: SearchSpec | None = None
    if max_rate:
        if not any(base.get(k) is not None for k in _SLA_KEYS):
            raise ValueError("--max-rate needs at least one SLA bound (--sla-ttft-ms, --sla-itl-ms, --sla-e2e-ms)")
        variable = "arrival_speedup_ratio" if trace is not None else "rate"
        if variable in axes:
            raise ValueError(f"--max-rate searches {variable}: do not sweep --{variable.replace('_', '-')} with it")
        start = base.get(variable)
        if start is None:
            start = 1.0 if variable == "arrival_speedup_ratio" else _synthetic_spec(base, None).rate
        if isinstance(search_steps, bool) or not isinstance(search_steps, int) or search_steps < 0:
            raise ValueError(f"--search-steps must be an integer >= 0, got {search_steps!r}")
        search = SearchSpec(variable, float(start), float(sla_attainment), steps=search_steps)
    return SweepPlan(trace, dict(base), dict(axes), configs, float(sla_attainment), search)


def _synthetic_spec(base: dict[str, Any], rate: ConfigValue | None) -> SyntheticSpec:
    synthetic = base.get("synthetic")
    changes: dict[str, Any] = {k: base.get(k) for k in _SYNTHETIC_KEYS}
    changes["rate"] = rate
    changes["seed"] = base.get("seed", 0)
    changes["trace_block_size"] = base.get("trace_block_size", 512)
    if synthetic is not None:
        changes["requests"] = synthetic
    return dataclasses.replace(DEFAULT_SYNTHETIC, **{k: v for k, v in changes.items() if v is not None})


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
    gpu_base = {
        "prefill_workers": plan.base.get("prefill_workers", _default("prefill_workers")),
        "decode_workers": plan.base.get("decode_workers", _default("decode_workers")),
    }
    rows = build_rows(results, plan.configs, gpu_base, plan.target)
    doc = sweep_document(rows, base={"trace": plan.trace, **plan.base} if plan.trace else plan.base,
                         axes=plan.axes, sla=plan.sla, target=plan.target, max_rate=plan.search is not None)
    return SweepOutcome(rows, doc)

