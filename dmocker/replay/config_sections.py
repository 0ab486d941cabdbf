"""The sections of :class:`~dmocker.replay.config.ReplayConfig`, their ranges and their schema.

Each section is a frozen dataclass; its fields' annotations say what a file or a flag may give
and :data:`SCHEMA` holds the ranges (:class:`~dmocker.replay.config_schema.Bound`) and the
rules of single fields.  Checks that read several fields live with ``ReplayConfig``.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias

from dmocker.engines.engine_args import DecodeKvAccounting
from dmocker.engines.registry import engine_names, engine_spec
from dmocker.handoff import TransferTimingMode, load_spec
from dmocker.models.dtypes import KvCacheDtype

from .config_schema import Bound, Check, PythonObject, Schema
from .faults import FaultPlan, HeartbeatLoss, ScheduledFault, WorkerCrash, parse_heartbeat_loss, parse_worker_crash
from .routing.config import RouterConfig
from .workload.formats import TraceFormat
from .workload.synthetic import SyntheticSpec

if TYPE_CHECKING:  # for the type checker only: at run time these fields are PythonObject
    from .planner.protocol import Planner
    from .workload.types import Workload

    CoordinatorFactory: TypeAlias = Callable[..., object]

__all__ = [
    "ClusterConfig",
    "ClusterMode",
    "DEFAULT_SYNTHETIC",
    "KvLoadFailurePolicy",
    "LimitsConfig",
    "ModelConfig",
    "OutputsConfig",
    "PlannerConfig",
    "PoolConfig",
    "RoutingConfig",
    "SCHEMA",
    "SlaConfig",
    "TraceFile",
    "TransferConfig",
    "WorkloadConfig",
    "WorkloadKind",
]

DEFAULT_SYNTHETIC = SyntheticSpec(requests=300, rate=15.0, isl_mean=2000, osl_mean=200, seed=0)
"""The built-in default workload (``dmocker replay`` with no arguments): small and quick."""


class ClusterMode(enum.Enum):
    """How the cluster serves a request: prefilled and decoded on different workers with a KV
    handoff between them, or both on one worker (the aggregated baseline)."""

    DISAGG = "disagg"
    AGG = "agg"


@dataclass(frozen=True)
class ClusterConfig:
    """The engine the workers run (a mock engine of :mod:`dmocker.engines.registry`) and how many:
    ``prefill_workers`` and ``decode_workers`` disaggregated, ``workers`` aggregated (``mode``)."""

    engine: str = "vllm"
    prefill_workers: int = 2
    decode_workers: int = 2
    mode: ClusterMode = ClusterMode.DISAGG
    workers: int = 4


@dataclass(frozen=True)
class PoolConfig:
    """One pool's engine arguments (names and defaults of the reference's ``MockEngineArgs``;
    :class:`~dmocker.engines.interface.EngineArgs` documents each).  ``block_size`` None: the
    engine's default (the spec's ``engines`` table).  ``num_gpu_blocks`` None: derived from
    ``model.gpu_memory_gb`` when that is given, else 16384.  The KV link's settings are in
    ``transfer``."""

    block_size: int | None = None
    num_gpu_blocks: int | None = None
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int | None = None
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    speedup_ratio: float = 1.0
    decode_speedup_ratio: float = 1.0
    fixed_prefill_ms: float | None = None
    fixed_decode_ms: float | None = None
    timing_profile: str | None = None
    decode_kv_accounting: DecodeKvAccounting = DecodeKvAccounting.LOGICAL
    max_prefill_tokens: int = 16384
    chunked_prefill_size: int = 8192
    schedule_conservativeness: float = 1.0
    clip_max_new_tokens: int = 4096
    new_token_ratio_decay_steps: int = 600
    min_new_token_ratio_factor: float = 0.14


class KvLoadFailurePolicy(enum.Enum):
    """What a source-first (vLLM) destination does when loading the KV fails because the source
    freed it (``kv_load_failure_policy`` in ``vllm-project/vllm`` ``vllm/config/kv_transfer.py``):
    fail the request, or recompute the prompt itself."""

    FAIL = "fail"
    RECOMPUTE = "recompute"


@dataclass(frozen=True)
class TransferConfig:
    """The prefill-to-decode KV link: ``bandwidth_gb_s`` (decimal GB/s) and ``kv_bytes_per_token``
    (both needed for a transfer to take time), and which tokens a transfer is charged for; and
    the workers' own clocks around it (docs/faults.md#the-workers-own-clocks; None: never).

    Source-first (vLLM):

    - ``kv_abort_timeout_s``: a source frees a hold whose read has not completed this long after
      its prefill (its destination was not reserved in time, or the transfer stalled), as vLLM's
      NixlConnector after VLLM_NIXL_ABORT_REQUEST_TIMEOUT (480 s, vllm/envs.py).
    - ``kv_load_failure_policy``: what the destination then does (vLLM's default ``fail``: the
      handoff fails; ``recompute``: it recomputes the prompt and the request goes on).

    Destination-first (SGLang, ``python/sglang/srt/environ.py``):

    - ``disaggregation_bootstrap_timeout_s``: the source gives up on a request whose destination
      has not made room for it this long after accepting it (SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT,
      300 s).
    - ``disaggregation_waiting_timeout_s``: a destination fails a reservation whose KV has not
      fully arrived this long after it was reserved (SGLANG_DISAGGREGATION_WAITING_TIMEOUT, 300 s).
    - ``disaggregation_heartbeat_interval_s`` and ``disaggregation_heartbeat_max_failure``: a
      destination probes each prefill worker every interval and, after that many failed probes
      in a row, fails the transfers from it (SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL, 5 s;
      SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE, 2); probes fail only under a heartbeat-loss
      fault."""

    bandwidth_gb_s: float | None = None
    kv_bytes_per_token: int | None = None
    timing_mode: TransferTimingMode = TransferTimingMode.FULL_PROMPT
    kv_abort_timeout_s: float | None = 480.0
    kv_load_failure_policy: KvLoadFailurePolicy = KvLoadFailurePolicy.FAIL
    disaggregation_bootstrap_timeout_s: float | None = 300.0
    disaggregation_waiting_timeout_s: float | None = 300.0
    disaggregation_heartbeat_interval_s: float = 5.0
    disaggregation_heartbeat_max_failure: int = 2


@dataclass(frozen=True)
class ModelConfig:
    """The model served (docs/models.md): ``name`` is a bundled preset or the path of a Hugging
    Face style ``config.json`` (or its folder); with it, ``transfer.kv_bytes_per_token`` when not
    given is the model's KV cache per token on one of ``tensor_parallel_size`` ranks, in
    ``kv_cache_dtype`` (``auto``: the model's own dtype).  With ``gpu_memory_gb`` (decimal GB a
    GPU has), a pool's ``num_gpu_blocks`` when not given is what fits in ``gpu_memory_utilization``
    of it after the weights (estimated from the config, or ``weights_gb``), on one rank."""

    name: str | None = None
    kv_cache_dtype: KvCacheDtype = KvCacheDtype.AUTO
    tensor_parallel_size: int = 1
    gpu_memory_gb: float | None = None
    gpu_memory_utilization: float = 0.9
    weights_gb: float | None = None


@dataclass(frozen=True)
class RoutingConfig:
    """Worker selection for both pools: ``name`` is ``round-robin``, ``kv`` or ``MODULE:CLASS``
    (a class implementing :class:`dmocker.replay.routing.Router`); ``kv`` holds the KV router's
    settings; ``seed`` seeds its sampling (``router_temperature`` > 0)."""

    name: str = "round-robin"
    seed: int = 0
    kv: RouterConfig = field(default_factory=RouterConfig)


@dataclass(frozen=True)
class PlannerConfig:
    """Autoscaling in the loop.  ``policy``: None (fixed pools), ``throughput`` or ``load``
    (built-in; their SLA targets are ``sla.ttft_ms`` / ``sla.itl_ms``), ``MODULE:CLASS`` (built
    with no arguments) or, from Python, an object with ``initial_tick_ms()`` and
    ``on_tick(metrics)``.  New workers are ready ``startup_time_s`` after a scale-up."""

    policy: str | Planner | None = None
    startup_time_s: float = 0.0
    throughput_interval_s: float = 180.0
    load_interval_s: float = 5.0
    min_endpoint: int = 1
    max_gpu_budget: int = 8  # < 0: no cap


@dataclass(frozen=True)
class TraceFile:
    """A trace file: Mooncake JSONL, or the Azure LLM inference or BurstGPT CSV traces
    (``format``; ``auto``: told by the file's first line).  ``trace_block_size`` tokens per hash
    id; ``clamp_input_length`` (Mooncake) reproduces the reference's silent clamp of
    ``input_length`` to what the hash ids hold."""

    path: str
    trace_block_size: int = 512
    clamp_input_length: bool = False
    format: TraceFormat = TraceFormat.AUTO


class WorkloadKind(enum.Enum):
    """The three workload sources (their values name :class:`WorkloadConfig`'s fields)."""

    TRACE = "trace"
    SYNTHETIC = "synthetic"
    EXPLICIT = "explicit"


@dataclass(frozen=True)
class WorkloadConfig:
    """What arrives: a ``trace``, the ``synthetic`` generator (None with no trace: the built-in
    :data:`DEFAULT_SYNTHETIC`) or, from Python, an ``explicit``
    :class:`~dmocker.replay.workload.Workload` object; give one.  ``arrival_speedup_ratio``
    divides arrival times and think times (for the generator: multiplies its rate)."""

    trace: TraceFile | None = None
    synthetic: SyntheticSpec | None = None
    explicit: Workload | None = None
    arrival_speedup_ratio: float = 1.0

    @property
    def kind(self) -> WorkloadKind:
        """``trace``, ``synthetic`` or ``explicit`` (see :class:`WorkloadKind`)."""
        if self.trace is not None:
            return WorkloadKind.TRACE
        if self.explicit is not None:
            return WorkloadKind.EXPLICIT
        return WorkloadKind.SYNTHETIC

    @property
    def synthetic_spec(self) -> SyntheticSpec:
        """The generator's parameters (the built-in default when none were given)."""
        return self.synthetic if self.synthetic is not None else DEFAULT_SYNTHETIC

    @property
    def workload_object(self) -> Workload:
        """The explicit workload (only for kind ``explicit``)."""
        if self.explicit is None:
            raise ValueError("this workload is not an explicit Workload object")
        return self.explicit


@dataclass(frozen=True)
class SlaConfig:
    """Goodput bounds (ms; None: not checked): a completed request is good when within all."""

    ttft_ms: float | None = None
    itl_ms: float | None = None
    e2e_ms: float | None = None


@dataclass(frozen=True)
class LimitsConfig:
    """``max_sim_time_ms``: a soft cap on simulated time; ``max_in_flight``: concurrency mode
    (at most this many sessions in flight) instead of the trace's arrival times."""

    max_sim_time_ms: float | None = None
    max_in_flight: int | None = None


@dataclass(frozen=True)
class OutputsConfig:
    """JSONL files written atomically (nothing appears on error) and the HTML report's series."""

    per_request: str | None = None
    events: str | None = None
    timeseries: bool = False


def _known_engine(value: object) -> str | None:
    text = str(value).strip().lower()
    try:
        engine_spec(text)
    except ValueError as exc:
        try:  # an engine the spec knows (its handoff order) that dmocker does not mock
            load_spec().engine(text)
        except ValueError:
            return str(exc)
        return f"engine {text!r} is not supported by the disaggregated replay (the spec knows its handoff " \
               f"order, but dmocker has no mock of it): use {' or '.join(map(repr, engine_names()))}"
    return None


def _model_name(value: object) -> str | None:
    if value is None:
        return None
    from dmocker.models.kv_size import ModelConfigError  # the readers load only with a model
    from dmocker.models.load import load_model

    try:
        load_model(str(value))
    except ModelConfigError as exc:
        return str(exc)
    return None


def _router_name(value: object) -> str | None:
    text = str(value).strip()
    key = text.lower().replace("_", "-")
    if key in ("round-robin", "roundrobin", "rr", "kv", "kv-router"):
        return None
    module, colon, cls = text.partition(":")
    if colon and module and cls:
        return None
    return f"unknown router {value!r}: expected 'round-robin', 'kv' or MODULE:CLASS"


def _planner_policy(value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        module, colon, cls = text.partition(":")
        if text in ("throughput", "load") or (colon and module and cls):
            return None
        return f"expected 'throughput', 'load' or MODULE:CLASS, got {value!r}"
    missing = [m for m in ("initial_tick_ms", "on_tick") if not callable(getattr(value, m, None))]
    if missing:
        return (f"a planner object needs initial_tick_ms() and on_tick(metrics): a {type(value).__name__} "
                f"has no {' and no '.join(missing)}")
    return None


def _explicit_workload(value: object) -> str | None:
    needed = ("session_starts", "load", "delay_of", "num_requests", "trace_block_size")
    missing = [n for n in needed if not hasattr(value, n)]
    if missing:
        return f"a Workload object needs {', '.join(missing)} (dmocker.replay.workload.Workload)"
    return None


def _spread(value: object) -> str | None:
    return None if isinstance(value, float) and value < 1.0 else "must be < 1"


_AT_LEAST_0 = Bound(0)
_AT_LEAST_1 = Bound(1)
_ABOVE_0 = Bound(0, exclusive=True)
_PROBABILITY = Bound(0, maximum=1)

_BOUNDS: dict[tuple[type, str], Bound] = {
    (ClusterConfig, "prefill_workers"): _AT_LEAST_0,
    (ClusterConfig, "decode_workers"): _AT_LEAST_0,
    (ClusterConfig, "workers"): _AT_LEAST_1,
    **{(PoolConfig, n): _AT_LEAST_1 for n in (
        "block_size", "num_gpu_blocks", "max_num_seqs", "max_num_batched_tokens", "max_model_len",
        "max_prefill_tokens", "chunked_prefill_size", "clip_max_new_tokens", "new_token_ratio_decay_steps")},
    (PoolConfig, "schedule_conservativeness"): _ABOVE_0,
    (PoolConfig, "fixed_prefill_ms"): _AT_LEAST_0,
    (PoolConfig, "fixed_decode_ms"): _AT_LEAST_0,
    (TransferConfig, "bandwidth_gb_s"): _AT_LEAST_0,
    (TransferConfig, "kv_bytes_per_token"): _AT_LEAST_0,
    (TransferConfig, "kv_abort_timeout_s"): _ABOVE_0,
    (TransferConfig, "disaggregation_waiting_timeout_s"): _ABOVE_0,
    (TransferConfig, "disaggregation_bootstrap_timeout_s"): _ABOVE_0,
    (TransferConfig, "disaggregation_heartbeat_interval_s"): _ABOVE_0,
    (TransferConfig, "disaggregation_heartbeat_max_failure"): _AT_LEAST_1,
    (ModelConfig, "tensor_parallel_size"): _AT_LEAST_1,
    (ModelConfig, "gpu_memory_gb"): _ABOVE_0,
    (ModelConfig, "gpu_memory_utilization"): Bound(0, maximum=1, exclusive=True),
    (ModelConfig, "weights_gb"): _AT_LEAST_0,
    (RoutingConfig, "seed"): _AT_LEAST_0,
    **{(RouterConfig, f.name): _AT_LEAST_0 for f in dataclasses.fields(RouterConfig)},
    (PlannerConfig, "startup_time_s"): _AT_LEAST_0,
    (PlannerConfig, "throughput_interval_s"): _ABOVE_0,
    (PlannerConfig, "load_interval_s"): _ABOVE_0,
    (PlannerConfig, "min_endpoint"): _AT_LEAST_0,
    (FaultPlan, "cancel_rate"): _PROBABILITY,
    (FaultPlan, "fail_rate"): _PROBABILITY,
    (FaultPlan, "timeout_rate"): _PROBABILITY,
    (FaultPlan, "seed"): _AT_LEAST_0,
    (FaultPlan, "restart_s"): _AT_LEAST_0,
    (FaultPlan, "stall_rate"): _PROBABILITY,
    (FaultPlan, "stall_s"): _ABOVE_0,
    (HeartbeatLoss, "index"): _AT_LEAST_0,
    (HeartbeatLoss, "t_ms"): _AT_LEAST_0,
    (HeartbeatLoss, "duration_ms"): _ABOVE_0,
    (WorkerCrash, "index"): _AT_LEAST_0,
    (WorkerCrash, "t_ms"): _AT_LEAST_0,
    (ScheduledFault, "t_ms"): _AT_LEAST_0,
    (ScheduledFault, "request_id"): _AT_LEAST_0,
    (TraceFile, "trace_block_size"): _AT_LEAST_1,
    **{(SyntheticSpec, n): _AT_LEAST_1 for n in ("requests", "isl_mean", "osl_mean", "turns", "trace_block_size")},
    (SyntheticSpec, "rate"): _ABOVE_0,
    (SyntheticSpec, "spread"): _AT_LEAST_0,
    (SyntheticSpec, "prefix_groups"): _AT_LEAST_0,
    (SyntheticSpec, "prefix_ratio"): _PROBABILITY,
    (SyntheticSpec, "turn_delay_ms"): _AT_LEAST_0,
    (SyntheticSpec, "seed"): _AT_LEAST_0,
    (WorkloadConfig, "arrival_speedup_ratio"): _ABOVE_0,
    (SlaConfig, "ttft_ms"): _ABOVE_0,
    (SlaConfig, "itl_ms"): _ABOVE_0,
    (SlaConfig, "e2e_ms"): _ABOVE_0,
    (LimitsConfig, "max_sim_time_ms"): _AT_LEAST_0,
    (LimitsConfig, "max_in_flight"): _AT_LEAST_1,
}

_CHECKS: dict[tuple[type, str], Check] = {
    (ClusterConfig, "engine"): _known_engine,
    (ModelConfig, "name"): _model_name,
    (RoutingConfig, "name"): _router_name,
    (PlannerConfig, "policy"): _planner_policy,
    (WorkloadConfig, "explicit"): _explicit_workload,
    (SyntheticSpec, "spread"): _spread,
}


def _text_of(value: object) -> str:
    """The file form of a Python object in the configuration: ``MODULE:CLASS``, what
    ``--planner`` and ``--coordinator`` take (read back, the class is built with no arguments);
    a coordinator adapter gives its target's name.  A workload object's text is not read back
    (``workload.explicit`` takes Python objects only): a file must give a trace or a generator."""
    name = getattr(value, "name", None)
    if isinstance(name, str) and callable(value) and ":" in name:
        return name
    cls = value if isinstance(value, type) else type(value)
    return f"{cls.__module__}:{cls.__qualname__}"


def _crash_label(crash: object) -> str:
    assert isinstance(crash, WorkerCrash)
    return crash.label()


def _loss_label(loss: object) -> str:
    assert isinstance(loss, HeartbeatLoss)
    return loss.label()


SCHEMA = Schema(
    bounds=_BOUNDS,
    checks=_CHECKS,
    namespace={"Planner": PythonObject, "Workload": PythonObject, "CoordinatorFactory": PythonObject},
    text_of=_text_of,
    # A crash is written as the --worker-crash text (``decode:0@2500``); a table is read too.
    text_forms={WorkerCrash: (parse_worker_crash, _crash_label), HeartbeatLoss: (parse_heartbeat_loss, _loss_label)},
    # A file's [workload.synthetic] table changes the built-in default workload.
    table_defaults={SyntheticSpec: DEFAULT_SYNTHETIC},
)
