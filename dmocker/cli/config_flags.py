"""The flags that set :class:`~dmocker.replay.config.ReplayConfig` fields (``dmocker replay``,
``dmocker sweep``).

Each flag's destination is a name of :data:`dmocker.replay.config.NAMES` (``--max-num-seqs`` is
``max_num_seqs``: both pools), and every default is None, meaning "not given": the given flags
are applied over the ``--config`` file (or the defaults) by ``ReplayConfig.with_values``, which
checks them.  The defaults shown in the help are the configuration's.  ``dmocker sweep`` adds
the same flags with ``axes``: those take a comma list or a range instead of one value.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from dmocker.models.dtypes import KvCacheDtype
from dmocker.replay.config import DEFAULT_SYNTHETIC, NAMES, SOURCE, ConfigError, ReplayConfig
from dmocker.replay.config_file import field_line, load_config
from dmocker.replay.config_sections import KvLoadFailurePolicy
from dmocker.replay.routing import QueuePolicy, RouterConfig
from dmocker.replay.workload.formats import TraceFormat

from .io import float_arg, int_arg

__all__ = ["AXIS_HELP", "FLAGS", "Flag", "add_config_flags", "config_from_args", "flag_of", "given_values"]

AXIS_HELP = "a value, a comma list or a range (A..B[:STEP])"

_ROUTER = RouterConfig()
_D = DEFAULT_SYNTHETIC


@dataclass(frozen=True, slots=True)
class Flag:
    """One configuration flag: its destination is ``flag`` without dashes (a name of NAMES)."""

    flag: str
    kind: Callable[[str], object]
    help: str
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    repeat: bool = False  # may be given several times (a list)

    @property
    def dest(self) -> str:
        return self.flag[2:].replace("-", "_")


#: The configuration flags by help group, in help order.
FLAGS: tuple[tuple[str, tuple[Flag, ...]], ...] = (
    ("synthetic workload", (
        Flag("--synthetic", int_arg, "generate this many requests instead of a trace", metavar="REQUESTS"),
        Flag("--rate", float_arg, f"Poisson arrival rate, req/s (default {_D.rate})"),
        Flag("--isl-mean", int_arg, f"mean input length (default {_D.isl_mean})"),
        Flag("--osl-mean", int_arg, f"mean output length (default {_D.osl_mean})"),
        Flag("--spread", float_arg, f"uniform +- fraction around the means (default {_D.spread})"),
        Flag("--prefix-groups", int_arg, f"shared-prefix groups (default {_D.prefix_groups})"),
        Flag("--prefix-ratio", float_arg, f"share of blocks in the group prefix (default {_D.prefix_ratio})"),
        Flag("--turns", int_arg, "turns per session (default 1)"),
        Flag("--seed", int_arg, "generator seed, and the KV router's sampling seed (default 0)"),
    )),
    ("engines", (
        Flag("--engine", str, "vllm (source-first) or sglang (destination-first)"),
        Flag("--mode", str, "disagg: prefill and decode pools with a KV handoff (default); agg: one pool whose "
             "workers prefill and decode (the aggregated baseline)", choices=("disagg", "agg")),
        Flag("--workers", int_arg, "--mode agg: pool size (default 4)"),
        Flag("--prefill-workers", int_arg, "prefill pool size (default 2)"),
        Flag("--decode-workers", int_arg, "decode pool size (default 2)"),
        Flag("--block-size", int_arg, "KV block (page) size in tokens (default: vllm 64, sglang 1)"),
        Flag("--num-gpu-blocks", int_arg, "KV blocks per worker (default 16384, or from --gpu-memory-gb)"),
        Flag("--max-num-seqs", int_arg, "running requests per worker (default 256)"),
        Flag("--max-num-batched-tokens", int_arg, "token budget per pass (default 8192)"),
        Flag("--max-model-len", int_arg, "longest sequence (default: no limit)"),
        Flag("--speedup-ratio", float_arg, "divide pass times by this (default 1)"),
        Flag("--decode-speedup-ratio", float_arg, "extra divisor for decode time (default 1)"),
        Flag("--timing-profile", str, "pass times from a measured profile instead of the polynomial: the "
             "mocker's perf_data.npz or a CSV phase,tokens,context_length,ms (docs/models.md)", metavar="FILE"),
        Flag("--kv-transfer-bandwidth", float_arg, "KV transfer bandwidth, decimal GB/s", metavar="GB_S"),
        Flag("--kv-bytes-per-token", int_arg, "KV bytes per token (reference: kv_transfer_bytes_per_token; "
             "default: from --model)"),
        Flag("--model", str, "the model served: a bundled preset or a config.json (or its folder); sets the KV "
             "bytes per token unless --kv-bytes-per-token is given (docs/models.md)", metavar="NAME|PATH"),
        Flag("--kv-cache-dtype", str, "with --model: KV cache element type (default auto: the model's dtype)",
             choices=tuple(d.value for d in KvCacheDtype)),
        Flag("--tensor-parallel-size", int_arg, "with --model: tensor-parallel ranks per worker; KV heads are "
             "split across them (default 1)", metavar="TP"),
        Flag("--gpu-memory-gb", float_arg, "with --model: a GPU's memory, decimal GB; the KV blocks per worker "
             "are what fits after the weights, unless --num-gpu-blocks is given", metavar="GB"),
        Flag("--gpu-memory-utilization", float_arg, "with --gpu-memory-gb: the share of it the engine uses "
             "(default 0.9, as vLLM)", metavar="FRACTION"),
        Flag("--weights-gb", float_arg, "with --gpu-memory-gb: the weights' size, decimal GB (default: estimated "
             "from a dense model's config)", metavar="GB"),
        Flag("--kv-transfer-timing-mode", str, "tokens a transfer is charged for (default full-prompt)",
             choices=("full-prompt", "destination-missing")),
        Flag("--kv-abort-timeout-s", float_arg, "source-first (vLLM): a source frees a hold nobody read this long "
             "after its prefill, as vLLM after VLLM_NIXL_ABORT_REQUEST_TIMEOUT (default 480): in a replay one whose "
             "destination was not reserved (the handoff fails); in dmocker serve --front workers one whose decode "
             "leg has not come", metavar="S"),
        Flag("--kv-load-failure-policy", str, "source-first (vLLM): when the source freed the KV before it was "
             "read, the destination fails the request or recomputes the prompt (vLLM's kv_load_failure_policy; "
             "default fail)", choices=tuple(p.value for p in KvLoadFailurePolicy)),
        Flag("--disaggregation-bootstrap-timeout-s", float_arg, "destination-first (SGLang): the source gives up on "
             "a request whose destination has not made room for it this long after accepting it, as SGLang after "
             "SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT (default 300); in dmocker serve --front workers, a prefill leg "
             "whose decode leg has not come", metavar="S"),
        Flag("--disaggregation-waiting-timeout-s", float_arg, "destination-first (SGLang): a destination fails a "
             "reservation whose KV has not fully arrived this long after it was reserved, as SGLang after "
             "SGLANG_DISAGGREGATION_WAITING_TIMEOUT (default 300)", metavar="S"),
        Flag("--disaggregation-heartbeat-interval-s", float_arg, "destination-first (SGLang): seconds between a "
             "destination's heartbeat probes of each prefill worker (SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL; "
             "default 5)", metavar="S"),
        Flag("--disaggregation-heartbeat-max-failure", int_arg, "destination-first (SGLang): failed probes in a row "
             "after which the transfers from that prefill worker fail (SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE; "
             "default 2)", metavar="N"),
    )),
    ("replay", (
        Flag("--trace-block-size", int_arg, "tokens per trace hash id (default 512)"),
        Flag("--trace-format", str, "how TRACE is read (default auto: Mooncake JSONL, or the Azure LLM "
             "inference or BurstGPT CSV traces, told by the first line)",
             choices=tuple(f.value for f in TraceFormat)),
        Flag("--arrival-speedup-ratio", float_arg, "divide arrival times by this (default 1)"),
        Flag("--max-in-flight", int_arg, "concurrency mode: sessions in flight"),
        Flag("--sla-ttft-ms", float_arg, "goodput bound on TTFT; built-in planners' TTFT target (default 500)"),
        Flag("--sla-itl-ms", float_arg, "goodput bound on mean ITL; built-in planners' ITL target (default 50)"),
        Flag("--sla-e2e-ms", float_arg, "goodput bound on end-to-end latency"),
        Flag("--max-sim-time-ms", float_arg, "soft cap on simulated time"),
    )),
    ("planner (autoscaling in the loop)", (
        Flag("--planner", str, "scale the pools during the replay: a class with initial_tick_ms() and "
             "on_tick(metrics) (built with no arguments) or a built-in policy",
             metavar="MODULE:CLASS|throughput|load"),
        Flag("--startup-time-s", float_arg, "seconds from a scale-up until the new worker is ready (default 0)"),
        Flag("--throughput-interval-s", float_arg, "throughput policy: seconds between adjustments (default 180)"),
        Flag("--load-interval-s", float_arg, "load policy: seconds between adjustments (default 5)"),
        Flag("--min-endpoint", int_arg, "built-in policies: workers per pool at least (default 1)"),
        Flag("--max-gpu-budget", int_arg, "built-in policies: GPUs of both pools at most, < 0 for no cap (default 8)"),
    )),
    ("faults and coordinators (docs/replay.md#faults)", (
        Flag("--fault-cancel-rate", float_arg, "per-request probability of a client cancel", metavar="P"),
        Flag("--fault-fail-rate", float_arg, "per-request probability of a failed handoff action", metavar="P"),
        Flag("--fault-timeout-rate", float_arg, "per-request probability of a transfer timeout", metavar="P"),
        Flag("--fault-seed", int_arg, "seed of the fault draws (default 0)", metavar="N"),
        Flag("--worker-crash", str, "worker INDEX of POOL (prefill|decode) dies at T_MS; repeatable",
             metavar="POOL:INDEX@T_MS", repeat=True),
        Flag("--worker-restart-s", float_arg, "crashed workers come back empty S seconds later", metavar="S"),
        Flag("--fault-stall-rate", float_arg, "per-request probability that the KV transfer stalls (its bytes stop "
             "for --fault-stall-s; the workers' timers decide what happens)", metavar="P"),
        Flag("--fault-stall-s", float_arg, "how long a stalled transfer stops (default 600, beyond the default "
             "timeouts)", metavar="S"),
        Flag("--heartbeat-loss", str, "SGLang: prefill worker INDEX answers no heartbeat probe from T_MS for "
             "DURATION_MS; repeatable", metavar="prefill:INDEX@T_MS+DURATION_MS", repeat=True),
        Flag("--coordinator", str, "drive every handoff with this class (the public coordinator API, as for "
             "dmocker check)", metavar="MODULE:CLASS"),
    )),
    ("routing", (
        Flag("--router", str, "worker selection for both pools (default round-robin); MODULE:CLASS names a "
             "class implementing dmocker.replay.routing.Router", metavar="round-robin|kv|MODULE:CLASS"),
        Flag("--overlap-score-credit", float_arg,
             f"kv: prefill blocks credited per cached prefix block (default {_ROUTER.overlap_score_credit})"),
        Flag("--overlap-score-credit-decay", float_arg,
             "kv: shrink the credit on workers with excess prefill in flight (default 0: off)"),
        Flag("--prefill-load-scale", float_arg,
             f"kv: weight of prefill blocks in the cost (default {_ROUTER.prefill_load_scale})"),
        Flag("--decode-active-request-weight", float_arg, "kv: block-equivalents per active request (default 0)"),
        Flag("--router-temperature", float_arg, "kv: 0 picks the cheapest worker, > 0 samples a softmax (default 0)"),
        Flag("--router-queue-threshold", float_arg,
             "kv: hold arrivals while every worker has more than this x max_num_batched_tokens prefill tokens "
             "in flight (default: no queue)"),
        Flag("--router-queue-policy", str, "kv: queue order (default fcfs)",
             choices=tuple(p.value for p in QueuePolicy)),
        Flag("--kv-event-lag-ms", float_arg, "kv: delay before the router sees the engines' KV events (default 0)"),
    )),
)

_DESTS = tuple(f.dest for _, flags in FLAGS for f in flags)
assert all(d in NAMES for d in _DESTS), [d for d in _DESTS if d not in NAMES]


def add_config_flags(parser: argparse.ArgumentParser, *, axes: Collection[str] = ()) -> None:
    """Add every configuration flag to ``parser`` (in help groups); the flags whose destination
    is in ``axes`` take their value as text: a list or a range (``dmocker sweep``)."""
    for title, flags in FLAGS:
        group = parser.add_argument_group(title)
        for f in flags:
            action = "append" if f.repeat else "store"
            if f.dest in axes:
                group.add_argument(f.flag, dest=f.dest, default=None, action=action, metavar=f.metavar,
                                   help=f"{f.help} -- {AXIS_HELP}")
            else:
                group.add_argument(f.flag, dest=f.dest, type=f.kind, default=None, action=action,
                                   metavar=f.metavar, choices=f.choices, help=f.help)


def given_values(args: argparse.Namespace) -> dict[str, object]:
    """The configuration values given on the command line (flags, the TRACE argument), by name."""
    ns = vars(args)
    return {name: ns[name] for name in NAMES if ns.get(name) is not None}


def flag_of(field: str | None, given: Collection[str]) -> str | None:
    """The given flag that set the dotted path ``field`` (``--max-num-seqs`` for
    ``decode.max_num_seqs``), or None."""
    if field is None:
        return None
    field = re.sub(r"\[\d+\]$", "", field)  # an item of a list: the list's flag
    for name in given:
        for path in NAMES.get(name, ()):
            tail = path.removeprefix(SOURCE)
            if field == path or (tail != path and field.startswith("workload.") and field.endswith("." + tail)):
                return "TRACE" if name == "trace" else "--" + name.replace("_", "-")
    return None


def config_from_args(args: argparse.Namespace, extra: Mapping[str, object] | None = None) -> ReplayConfig:
    """The ``--config`` file (or the defaults) with the given flags over it, and ``extra``
    values.  A :class:`ConfigError` names the flag at fault, or else the file (and line)."""
    path: str | None = getattr(args, "config", None)
    base = load_config(path) if path is not None else ReplayConfig()
    values = {**given_values(args), **(extra or {})}
    try:
        return base.with_values(values)
    except ConfigError as exc:
        flag = flag_of(exc.field, values)
        if flag is not None:
            raise ConfigError(f"{flag}: {exc}") from None
        if path is not None:
            raise exc.at(file=path, line=field_line(path, exc.field)) from None
        raise
