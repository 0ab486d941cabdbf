"""``ReplayConfig``: everything one replay needs, as one frozen, validated value.

Why one object: the CLI, ``dmocker sweep``, ``dmocker fuzz``, the benches and the tests all
describe a replay; with one value they build it the same way, check it in one place and write it
in one form (the report's ``config`` section, which ``dmocker replay --config`` reads back).

The sections (:mod:`.config_sections`; docs/config.md lists every field, its default and its
flag): ``cluster`` (engine and pool sizes), ``prefill`` and ``decode`` (each pool's engine
arguments), ``transfer`` (the KV link), ``router``, ``planner``, ``faults``
(:class:`~dmocker.replay.faults.FaultPlan`), ``workload`` (a trace, the synthetic generator or
a Python workload object), ``sla``, ``limits`` (time cap, concurrency), ``outputs`` (per-request
records, event log, time series) and ``coordinator``.

A ``ReplayConfig`` is checked when it is built: a bad value raises :class:`ConfigError`
naming the field by its dotted path.  Loading user code (``MODULE:CLASS`` routers, planners,
coordinators) waits for :func:`dmocker.replay.run`, which reports a failure before anything
runs or is written.

Fields are reached by dotted path (``decode.max_num_seqs``) or by a flag name that may set
several (``max_num_seqs`` sets both pools; :data:`NAMES`): :meth:`ReplayConfig.with_values`
is how the CLI applies flags over a file and how ``dmocker sweep`` varies fields.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

from dmocker.engines.engine_args import EngineArgs, WorkerType
from dmocker.engines.registry import engine_spec
from dmocker.handoff import HandoffOrder, order_for_engine

from .config_schema import Bound, ConfigError, ConfigValue, FieldInfo, JsonValue, PythonObject
from .config_sections import (
    DEFAULT_SYNTHETIC,
    SCHEMA,
    ClusterConfig,
    ClusterMode,
    KvLoadFailurePolicy,
    LimitsConfig,
    ModelConfig,
    OutputsConfig,
    PlannerConfig,
    PoolConfig,
    RoutingConfig,
    SlaConfig,
    TraceFile,
    TransferConfig,
    WorkloadConfig,
    WorkloadKind,
)
from .faults import FaultPlan
from .routing.config import RouterConfig
from .workload.types import WorkloadError

if TYPE_CHECKING:
    from dmocker.models.kv_size import KvSize

    CoordinatorFactory: TypeAlias = Callable[..., object]

__all__ = [
    "ClusterConfig",
    "ClusterMode",
    "ConfigError",
    "ConfigValue",
    "DEFAULT_SYNTHETIC",
    "LimitsConfig",
    "ModelConfig",
    "NAMES",
    "OutputsConfig",
    "REPORT_ONLY",
    "PlannerConfig",
    "PoolConfig",
    "ReplayConfig",
    "RoutingConfig",
    "SlaConfig",
    "TraceFile",
    "TransferConfig",
    "WorkloadConfig",
    "WorkloadKind",
    "axis_field",
    "field_paths",
    "headline",
    "parse_value",
    "resolve_name",
]


_DEFAULT_GPU_BLOCKS = EngineArgs().num_gpu_blocks  # a pool's KV blocks when nothing says otherwise

REPORT_ONLY = ("capped", "derived")
"""Keys the report adds to its ``config`` section about the run (``capped``: the time cap
stopped the run; ``derived``: where numbers not given came from, :meth:`ReplayConfig.derived`);
read back, they are skipped."""


@dataclass(frozen=True)
class ReplayConfig:
    """One replay, every input of it (see the module docstring; docs/config.md for each field).

    Built from Python (``ReplayConfig(cluster=ClusterConfig(prefill_workers=4), ...)``), from a
    file (:func:`dmocker.replay.load_config`) or by names (:meth:`with_values`).  Checked on
    construction: :class:`ConfigError` names the field.
    """

    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    prefill: PoolConfig = field(default_factory=PoolConfig)
    decode: PoolConfig = field(default_factory=PoolConfig)
    transfer: TransferConfig = field(default_factory=TransferConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    router: RoutingConfig = field(default_factory=RoutingConfig)
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    faults: FaultPlan = field(default_factory=FaultPlan)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    sla: SlaConfig = field(default_factory=SlaConfig)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    outputs: OutputsConfig = field(default_factory=OutputsConfig)
    coordinator: str | CoordinatorFactory | None = None

    def __post_init__(self) -> None:
        for f in SCHEMA.fields(ReplayConfig):
            object.__setattr__(self, f.name, SCHEMA.value(ReplayConfig, f, getattr(self, f.name), f.name))
        _check_across(self)

    # ---- reading and writing ---------------------------------------------------------------

    @staticmethod
    def from_json(data: object) -> ReplayConfig:
        """The configuration from its file form (a parsed TOML or JSON object; a report's
        ``config`` section too: its :data:`REPORT_ONLY` keys are skipped)."""
        if isinstance(data, Mapping):
            data = {k: v for k, v in data.items() if k not in REPORT_ONLY}
        config = SCHEMA.build(ReplayConfig, data)
        assert isinstance(config, ReplayConfig)
        return config

    def to_json(self, *, outputs: bool = True) -> dict[str, JsonValue]:
        """The file form: every field, resolved (the engine's block size, the default workload),
        Python objects by their ``MODULE:CLASS``.  :meth:`from_json` reads it back.
        ``outputs=False`` leaves out the ``outputs`` table (where files go changes no result:
        the report's form, so that a rerun writes only what it is asked to)."""
        out = SCHEMA.dump(self.resolved())
        assert isinstance(out, dict)
        if not outputs:
            del out["outputs"]
        return out

    def resolved(self) -> ReplayConfig:
        """The same run with the defaults that depend on other fields written in."""
        transfer, prefill, decode = self._resolved_link_and_pools()
        workload = self.workload
        if workload.kind is WorkloadKind.SYNTHETIC and workload.synthetic is None:
            workload = dataclasses.replace(workload, synthetic=DEFAULT_SYNTHETIC)
        return dataclasses.replace(self, prefill=prefill, decode=decode, transfer=transfer, workload=workload)

    def _resolved_link_and_pools(self) -> tuple[TransferConfig, PoolConfig, PoolConfig]:
        """``transfer``, ``prefill`` and ``decode`` with their derived defaults written in (the
        engine's block size, the model's KV bytes per token, the KV blocks that fit)."""
        block_size = EngineArgs(engine=self.engine).page_tokens  # the engine's default
        transfer = self._transfer()

        def pool(p: PoolConfig) -> PoolConfig:
            if p.block_size is None:
                p = dataclasses.replace(p, block_size=block_size)
            if p.num_gpu_blocks is None:
                assert p.block_size is not None
                blocks = (self._gpu_blocks(p.block_size, transfer)[0] if self.model.gpu_memory_gb is not None
                          else _DEFAULT_GPU_BLOCKS)
                p = dataclasses.replace(p, num_gpu_blocks=blocks)
            return p

        return transfer, pool(self.prefill), pool(self.decode)

    def _transfer(self) -> TransferConfig:
        """``transfer`` with the model's KV bytes per token when none is given."""
        t = self.transfer
        if t.kv_bytes_per_token is None and self.model.name is not None:
            t = dataclasses.replace(t, kv_bytes_per_token=self.model_kv_size().bytes_per_token)
        return t

    def model_kv_size(self) -> KvSize:
        """The KV cache per token of ``model`` (which must be set) on one tensor-parallel rank."""
        from dmocker.models.kv_size import kv_size  # the readers load only with a model
        from dmocker.models.load import load_model

        m = self.model
        assert m.name is not None
        return kv_size(load_model(m.name), m.kv_cache_dtype, m.tensor_parallel_size)

    def _gpu_blocks(self, block_size: int, transfer: TransferConfig) -> tuple[int, str]:
        """KV blocks of ``block_size`` tokens that fit on one GPU of ``model.gpu_memory_gb`` after
        the weights, and the arithmetic; checked when the configuration is built."""
        from dmocker.models.kv_size import weights_size
        from dmocker.models.load import load_model

        m = self.model
        assert m.gpu_memory_gb is not None and m.name is not None and transfer.kv_bytes_per_token
        if m.weights_gb is not None:
            weights = round(m.weights_gb * 1e9 / m.tensor_parallel_size)
            how = f"{m.weights_gb:g} GB weights" + (f" / TP {m.tensor_parallel_size}" if m.tensor_parallel_size > 1 else "")
        else:
            w = weights_size(load_model(m.name), m.tensor_parallel_size)
            weights = w.bytes_per_rank
            how = f"weights {w.arithmetic}"
        budget = int(m.gpu_memory_gb * 1e9 * m.gpu_memory_utilization) - weights
        per_block = block_size * transfer.kv_bytes_per_token
        blocks = budget // per_block
        arithmetic = (f"({m.gpu_memory_gb:g} GB x {m.gpu_memory_utilization:g} - {weights:,} B of weights) "
                      f"// ({block_size} tokens x {transfer.kv_bytes_per_token:,} B) = {blocks:,} blocks; {how}")
        return blocks, arithmetic

    def derived(self) -> dict[str, JsonValue]:
        """Where the numbers not given explicitly came from (the report's ``derived`` entry in
        its ``config`` section): with a model, its KV bytes per token and, with a GPU memory
        size, each pool's KV blocks, with the arithmetic."""
        out: dict[str, JsonValue] = {}
        if self.model.name is None:
            return out
        from dmocker.models.load import load_model

        arch = load_model(self.model.name)
        if self.transfer.kv_bytes_per_token is None:
            size = self.model_kv_size()
            entry: dict[str, JsonValue] = {
                "value": size.bytes_per_token, "model": arch.name, "source": arch.source,
                "arithmetic": size.arithmetic,
            }
            if size.window is not None:
                entry["note"] = (f"sliding-window layers are counted at every token: exact for prompts up to "
                                 f"{size.window} tokens, an upper bound beyond")
            out["transfer.kv_bytes_per_token"] = entry
        if self.model.gpu_memory_gb is not None:
            transfer, prefill, decode = self._resolved_link_and_pools()
            for name, given, pool in (("prefill", self.prefill, prefill), ("decode", self.decode, decode)):
                if given.num_gpu_blocks is None:
                    assert pool.block_size is not None
                    blocks, arithmetic = self._gpu_blocks(pool.block_size, transfer)
                    out[f"{name}.num_gpu_blocks"] = {"value": blocks, "model": arch.name, "arithmetic": arithmetic}
        return out

    # ---- by name -----------------------------------------------------------------------------

    @staticmethod
    def from_values(values: Mapping[str, object]) -> ReplayConfig:
        """``ReplayConfig().with_values(values)``: the defaults with these fields set."""
        return ReplayConfig().with_values(values)

    def with_values(self, values: Mapping[str, object]) -> ReplayConfig:
        """A copy with fields set by name: a dotted path (``decode.max_num_seqs``) or a flag name
        of :data:`NAMES` (``max_num_seqs``: both pools).  Values are typed (a flag's text goes
        through :func:`parse_value` first); a table may be given as its object (``faults`` as a
        ``FaultPlan``).  ``trace``, ``synthetic`` and ``workload.explicit`` pick the workload
        (applied first); the generator's settings need a synthetic workload."""
        return _apply(self, values)

    # ---- what the run uses -------------------------------------------------------------------

    @property
    def engine(self) -> str:
        """The mock engine's name (``cluster.engine`` as the registry spells it)."""
        return engine_spec(self.cluster.engine).name

    def agg_engine_args(self) -> EngineArgs:
        """The aggregated workers' :class:`EngineArgs` (the decode section's settings), validated."""
        engine = self.engine
        t, _, decode = self._resolved_link_and_pools()
        return EngineArgs(
            engine=engine, worker_type=WorkerType.AGGREGATED, kv_bytes_per_token=t.kv_bytes_per_token,
            kv_transfer_bandwidth=t.bandwidth_gb_s, kv_transfer_timing_mode=t.timing_mode,
            **{f.name: getattr(decode, f.name) for f in dataclasses.fields(PoolConfig)},
        ).validate()

    def engine_args(self) -> tuple[EngineArgs, EngineArgs]:
        """Both pools' :class:`EngineArgs` (prefill, decode), validated."""
        engine = self.engine
        t, prefill, decode = self._resolved_link_and_pools()
        out = []
        for pool, role in ((prefill, WorkerType.PREFILL), (decode, WorkerType.DECODE)):
            args = EngineArgs(
                engine=engine, worker_type=role, kv_bytes_per_token=t.kv_bytes_per_token,
                kv_transfer_bandwidth=t.bandwidth_gb_s, kv_transfer_timing_mode=t.timing_mode,
                **{f.name: getattr(pool, f.name) for f in dataclasses.fields(PoolConfig)},
            )
            out.append(args.validate())
        return out[0], out[1]


def headline(config: Mapping[str, JsonValue]) -> str:
    """``vllm 2P+2D, synthetic 300 requests @ 15.0 req/s (seed 0)``: what a report's ``config``
    section (the file form) ran, in one line."""

    def table(value: JsonValue | None) -> Mapping[str, JsonValue]:
        return value if isinstance(value, dict) else {}

    cluster, workload, router = (table(config.get(k)) for k in ("cluster", "workload", "router"))
    trace, synthetic = table(workload.get("trace")), table(workload.get("synthetic"))
    if trace:
        what = f"trace {trace.get('path')}"
    elif synthetic:
        what = (f"synthetic {synthetic.get('requests')} requests @ {synthetic.get('rate')} req/s "
                f"(seed {synthetic.get('seed')})")
    else:
        what = "an explicit workload"
    name = router.get("name", "round-robin")
    if cluster.get("mode") == ClusterMode.AGG.value:
        shape = f"{cluster.get('workers')} aggregated"
    else:
        shape = f"{cluster.get('prefill_workers')}P+{cluster.get('decode_workers')}D"
    return f"{cluster.get('engine')} {shape}, {what}" + (f", router {name}" if name != "round-robin" else "")


# ---- checks across fields ----------------------------------------------------------------------


def _check_across(c: ReplayConfig) -> None:
    if c.coordinator is not None and not isinstance(c.coordinator, str) and not callable(c.coordinator):
        raise ConfigError(f"expected MODULE:CLASS or a coordinator factory, got {c.coordinator!r}", field="coordinator")
    planner = c.planner.policy is not None
    if c.cluster.mode is ClusterMode.AGG:
        _check_agg(c)
    for name in ("prefill_workers", "decode_workers"):
        if getattr(c.cluster, name) < 1 and not planner and c.cluster.mode is ClusterMode.DISAGG:
            raise ConfigError(f"must be >= 1 (0 only with a planner), got {getattr(c.cluster, name)}",
                              field=f"cluster.{name}")
    w = c.workload
    given = [k.value for k in WorkloadKind if getattr(w, k.value) is not None]
    if len(given) > 1:
        raise ConfigError(f"give one workload: {' and '.join(given)} are both set", field="workload")
    if w.explicit is not None and w.arrival_speedup_ratio != 1.0:
        raise ConfigError("applies to a trace or the generator, not to an explicit workload object",
                          field="workload.arrival_speedup_ratio")
    if w.synthetic is not None:
        try:
            w.synthetic.validate()
        except WorkloadError as exc:
            raise ConfigError(exc.detail, field=f"workload.synthetic.{exc.field}" if exc.field else "workload.synthetic") from None
    for name in ("prefill", "decode"):
        pool: PoolConfig = getattr(c, name)
        if (pool.fixed_prefill_ms is None) != (pool.fixed_decode_ms is None):
            raise ConfigError("fixed timing needs both fixed_prefill_ms and fixed_decode_ms",
                              field=f"{name}.{'fixed_decode_ms' if pool.fixed_decode_ms is None else 'fixed_prefill_ms'}")
    if c.model.gpu_memory_gb is not None and any(p.num_gpu_blocks is None for p in (c.prefill, c.decode)):
        if c.model.name is None:
            raise ConfigError("needs a model (model.name) to size the KV cache from", field="model.gpu_memory_gb")
        from dmocker.models.kv_size import ModelConfigError

        try:
            transfer, prefill_pool, decode_pool = c._resolved_link_and_pools()
        except ModelConfigError as exc:
            raise ConfigError(str(exc), field="model.weights_gb") from None
        for stated, pool in ((c.prefill, prefill_pool), (c.decode, decode_pool)):
            assert pool.block_size is not None and pool.num_gpu_blocks is not None
            if stated.num_gpu_blocks is None and pool.num_gpu_blocks < 1:
                arithmetic = c._gpu_blocks(pool.block_size, transfer)[1]
                raise ConfigError(f"no room for the KV cache: {arithmetic}", field="model.gpu_memory_gb")
    try:
        prefill, decode = c.engine_args()
    except ValueError as exc:  # every field was checked above: what is left is the two together
        raise ConfigError(str(exc), field="prefill") from None
    if prefill.page_tokens != decode.page_tokens:
        raise ConfigError(f"prefill and decode block sizes must match: {prefill.page_tokens} vs {decode.page_tokens}",
                          field="decode.block_size")
    try:
        c.faults.check_heartbeat_losses(c.cluster.prefill_workers)
    except ValueError as exc:
        raise ConfigError(str(exc), field="faults.heartbeat_losses") from None
    try:
        c.faults.check_pools(c.cluster.prefill_workers, c.cluster.decode_workers)
    except ValueError as exc:
        raise ConfigError(str(exc), field="faults.crashes") from None
    _check_clocks(c)
    p = c.planner
    if planner and p.max_gpu_budget >= 0 and p.max_gpu_budget < 2 * p.min_endpoint:
        raise ConfigError(f"{p.max_gpu_budget} is below the min_endpoint footprint ({2 * p.min_endpoint} GPUs)",
                          field="planner.max_gpu_budget")


def _check_clocks(c: ReplayConfig) -> None:
    """The workers' own clocks and the faults they answer exist in one order each: refuse a
    setting that the cluster's engines would silently ignore."""
    order = order_for_engine(c.engine)
    t = c.transfer
    if t.kv_load_failure_policy is KvLoadFailurePolicy.RECOMPUTE and order is not HandoffOrder.SOURCE_FIRST:
        raise ConfigError(f"recompute is vLLM's kv_load_failure_policy (source-first); {c.engine} fails a "
                          "request whose KV did not arrive", field="transfer.kv_load_failure_policy")
    if c.faults.heartbeat_losses and order is not HandoffOrder.DESTINATION_FIRST:
        raise ConfigError(f"heartbeats are SGLang's (destination-first): {c.engine}'s workers send none that could "
                          "be lost", field="faults.heartbeat_losses")


def _check_agg(c: ReplayConfig) -> None:
    """An aggregated run has no handoff and one pool: refuse what only a disaggregated one has."""
    why = "an aggregated cluster (cluster.mode = agg) has no handoff"
    if c.planner.policy is not None:
        raise ConfigError("the planner scales the prefill and decode pools: disaggregated runs only",
                          field="planner.policy")
    f = c.faults
    for name in ("cancel_rate", "fail_rate", "timeout_rate"):
        if getattr(f, name) > 0:
            raise ConfigError(f"handoff faults need a handoff: {why}", field=f"faults.{name}")
    if f.crashes:
        raise ConfigError("worker crashes are injected on the prefill and decode pools: disaggregated runs only",
                          field="faults.crashes")
    if f.stall_rate > 0:
        raise ConfigError(f"transfer stalls need a transfer: {why}", field="faults.stall_rate")
    if f.heartbeat_losses:
        raise ConfigError(f"heartbeats run between prefill and decode workers: {why}", field="faults.heartbeat_losses")
    if c.coordinator is not None:
        raise ConfigError(f"a coordinator drives handoffs: {why}", field="coordinator")
    if c.outputs.events is not None:
        raise ConfigError(f"the event log records handoffs: {why}", field="outputs.events")
    # One pool: its workers take the decode section, so a prefill section that says otherwise
    # would be silently ignored.
    for f_ in dataclasses.fields(PoolConfig):
        p, d = getattr(c.prefill, f_.name), getattr(c.decode, f_.name)
        if p != d:
            raise ConfigError(f"aggregated workers take the decode section's settings; set {f_.name} for both "
                              f"pools or in decode (prefill {p!r}, decode {d!r})", field=f"prefill.{f_.name}")


# ---- names ---------------------------------------------------------------------------------------

SOURCE = "workload.source."
"""In :data:`NAMES`, the active workload's table: ``workload.trace`` or ``workload.synthetic``."""

_SYNTHETIC_FIELDS = ("rate", "isl_mean", "osl_mean", "spread", "prefix_groups", "prefix_ratio", "turns", "turn_delay_ms")

NAMES: dict[str, tuple[str, ...]] = {
    "trace": ("workload.trace.path",),
    "synthetic": ("workload.synthetic.requests",),
    **{n: (f"workload.synthetic.{n}",) for n in _SYNTHETIC_FIELDS},
    "seed": ("router.seed", SOURCE + "seed"),
    "trace_block_size": (SOURCE + "trace_block_size",),
    "clamp_input_length": ("workload.trace.clamp_input_length",),
    "trace_format": ("workload.trace.format",),
    "arrival_speedup_ratio": ("workload.arrival_speedup_ratio",),
    "engine": ("cluster.engine",),
    "prefill_workers": ("cluster.prefill_workers",),
    "decode_workers": ("cluster.decode_workers",),
    "mode": ("cluster.mode",),
    "workers": ("cluster.workers",),
    **{f.name: (f"prefill.{f.name}", f"decode.{f.name}") for f in dataclasses.fields(PoolConfig)},
    "kv_transfer_bandwidth": ("transfer.bandwidth_gb_s",),
    "kv_bytes_per_token": ("transfer.kv_bytes_per_token",),
    "kv_transfer_timing_mode": ("transfer.timing_mode",),
    "kv_abort_timeout_s": ("transfer.kv_abort_timeout_s",),
    "disaggregation_waiting_timeout_s": ("transfer.disaggregation_waiting_timeout_s",),
    "kv_load_failure_policy": ("transfer.kv_load_failure_policy",),
    "disaggregation_bootstrap_timeout_s": ("transfer.disaggregation_bootstrap_timeout_s",),
    "disaggregation_heartbeat_interval_s": ("transfer.disaggregation_heartbeat_interval_s",),
    "disaggregation_heartbeat_max_failure": ("transfer.disaggregation_heartbeat_max_failure",),
    "model": ("model.name",),
    "kv_cache_dtype": ("model.kv_cache_dtype",),
    "tensor_parallel_size": ("model.tensor_parallel_size",),
    "gpu_memory_gb": ("model.gpu_memory_gb",),
    "gpu_memory_utilization": ("model.gpu_memory_utilization",),
    "weights_gb": ("model.weights_gb",),
    "router": ("router.name",),
    **{f.name: (f"router.kv.{f.name}",) for f in dataclasses.fields(RouterConfig)},
    "planner": ("planner.policy",),
    **{n: (f"planner.{n}",) for n in ("startup_time_s", "throughput_interval_s", "load_interval_s",
                                       "min_endpoint", "max_gpu_budget")},
    "fault_cancel_rate": ("faults.cancel_rate",),
    "fault_fail_rate": ("faults.fail_rate",),
    "fault_timeout_rate": ("faults.timeout_rate",),
    "fault_seed": ("faults.seed",),
    "worker_crash": ("faults.crashes",),
    "worker_restart_s": ("faults.restart_s",),
    "fault_stall_rate": ("faults.stall_rate",),
    "fault_stall_s": ("faults.stall_s",),
    "heartbeat_loss": ("faults.heartbeat_losses",),
    "coordinator": ("coordinator",),
    "sla_ttft_ms": ("sla.ttft_ms",),
    "sla_itl_ms": ("sla.itl_ms",),
    "sla_e2e_ms": ("sla.e2e_ms",),
    "max_sim_time_ms": ("limits.max_sim_time_ms",),
    "max_in_flight": ("limits.max_in_flight",),
    "per_request": ("outputs.per_request",),
    "events": ("outputs.events",),
    "timeseries": ("outputs.timeseries",),
}
"""Flag names (``--max-num-seqs`` is ``max_num_seqs``) and the dotted paths each one sets."""

#: Setting one of these picks the workload's kind (trace, synthetic or explicit; the others are cleared).
_SELECTORS = ("workload.trace", "workload.trace.path", "workload.synthetic", "workload.synthetic.requests",
              "workload.explicit")


def field_paths() -> list[str]:
    """Every leaf field's dotted path, in declaration order."""
    return [path for path, _, _ in SCHEMA.leaves(ReplayConfig)]


def _leaf(path: str) -> tuple[type, FieldInfo] | None:
    """(owning class, field info) of a dotted path, or None when there is no such field."""
    cls: type = ReplayConfig
    parts = path.split(".")
    for i, part in enumerate(parts):
        f = SCHEMA.field(cls, part)
        if f is None:
            return None
        if i == len(parts) - 1:
            return cls, f
        inner = SCHEMA.table_type(f.hint)
        if inner is None:
            return None
        cls = inner
    return None


def resolve_name(name: str) -> tuple[str, ...]:
    """The dotted paths a name sets (a path names itself); :class:`ConfigError` if unknown."""
    key = name.strip()
    if key in NAMES:
        return NAMES[key]
    dashed = key.lstrip("-").replace("-", "_")
    if dashed in NAMES:
        return NAMES[dashed]
    if _leaf(key) is not None:
        return (key,)
    raise ConfigError("no such configuration field or flag name (docs/config.md lists them)", field=name)


def axis_field(path: str) -> tuple[str, Bound | None]:
    """What a sweep may vary at ``path``: its kind (``int``, ``float``, ``bool`` or ``name``)
    and its range; :class:`ConfigError` for a table, a list or a Python object."""
    leaf = _leaf(path.replace(SOURCE, "workload.synthetic."))
    if leaf is None:
        raise ConfigError("no such configuration field", field=path)
    owner, f = leaf
    hint = f.hint
    args = [a for a in getattr(hint, "__args__", (hint,)) if a is not type(None)]
    for kind, types in (("int", (int,)), ("float", (float,)), ("bool", (bool,))):
        if args == list(types):
            return kind, SCHEMA.bound(owner, f.name)
    if all(a is str or a is PythonObject or (isinstance(a, type) and issubclass(a, enum.Enum)) for a in args) \
            and any(a is not PythonObject for a in args):
        return "name", None
    raise ConfigError("a table, a list or a Python object cannot be swept", field=path)


def parse_value(name: str, text: str) -> object:
    """A flag's or ``--vary``'s text as the typed value of field ``name`` (its first path)."""
    path = resolve_name(name)[0].replace(SOURCE, "workload.synthetic.")
    leaf = _leaf(path)
    assert leaf is not None
    owner, f = leaf
    return SCHEMA.parse_text(owner, f, text, path)


# ---- applying values ---------------------------------------------------------------------------


def _tree(value: object) -> dict[str, object]:
    """A configuration table as nested dicts of its field values (what :meth:`Schema.build`
    reads back); only the fields that are tables are opened, Python objects stay as they are."""
    out: dict[str, object] = {}
    for f in SCHEMA.fields(type(value)):
        v = getattr(value, f.name)
        out[f.name] = _tree(v) if v is not None and SCHEMA.table_type(f.hint) is not None else v
    return out


def _apply(config: ReplayConfig, values: Mapping[str, object]) -> ReplayConfig:
    tree = _tree(config)
    settings: list[tuple[str, str, object]] = []  # (name given, path, value)
    for name, value in values.items():
        settings.extend((name, path, value) for path in resolve_name(name))
    picked = [(n, p) for n, p, _ in settings if p in _SELECTORS]
    if len({p.split(".")[1] for _, p in picked}) > 1:
        raise ConfigError(f"give one workload, not {' and '.join(n for n, _ in picked)}", field="workload")
    settings.sort(key=lambda s: s[1] not in _SELECTORS)  # stable: the others keep their order
    for name, path, value in settings:
        _set(tree, name, path, value)
    return ReplayConfig.from_json(tree)


def _kind(workload: dict[str, object]) -> WorkloadKind:
    if workload["trace"] is not None:
        return WorkloadKind.TRACE
    return WorkloadKind.EXPLICIT if workload["explicit"] is not None else WorkloadKind.SYNTHETIC


def _set(tree: dict[str, object], name: str, path: str, value: object) -> None:
    workload = tree["workload"]
    assert isinstance(workload, dict)
    kind = _kind(workload)
    if path.startswith(SOURCE):
        rest = path[len(SOURCE):]
        if kind is WorkloadKind.EXPLICIT:
            if len(resolve_name(name)) > 1:
                return  # ``seed``: the router's part still applies
            raise ConfigError("does not apply to an explicit workload object", field=name)
        if kind is WorkloadKind.TRACE and SCHEMA.field(TraceFile, rest) is None:
            return  # ``seed`` has no trace part
        path = f"workload.{kind.value}.{rest}"
    if path in _SELECTORS:
        mine = WorkloadKind(path.split(".")[1])
        for other in WorkloadKind:
            if other is not mine:
                workload[other.value] = None
        if mine is WorkloadKind.TRACE and workload["trace"] is None:
            workload["trace"] = {"path": value}
        if mine is WorkloadKind.SYNTHETIC and workload["synthetic"] is None:
            workload["synthetic"] = _tree(DEFAULT_SYNTHETIC)
    elif path.startswith("workload.trace.") and kind is not WorkloadKind.TRACE:
        raise ConfigError(f"applies to a trace, and the workload is {kind.value}", field=path)
    elif path.startswith("workload.synthetic."):
        if kind is not WorkloadKind.SYNTHETIC:
            raise ConfigError(f"the workload is {'a trace' if kind is WorkloadKind.TRACE else 'an explicit object'}: "
                              "the synthetic generator's settings do not apply", field=path)
        if workload["synthetic"] is None:
            workload["synthetic"] = _tree(DEFAULT_SYNTHETIC)
    leaf = _leaf(path)
    assert leaf is not None
    owner, f = leaf
    checked = SCHEMA.value(owner, f, value, path)
    node = tree
    parts = path.split(".")
    for part in parts[:-1]:
        child = node[part]
        assert isinstance(child, dict), path
        node = child
    node[parts[-1]] = _tree(checked) if dataclasses.is_dataclass(checked) and SCHEMA.table_type(f.hint) else checked
