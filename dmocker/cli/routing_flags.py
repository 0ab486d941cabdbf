"""``dmocker replay``'s routing flags (names and defaults of the reference's router options).

Kept apart from ``cli/replay.py`` so the replay command only adds the group and forwards
:func:`router_kwargs` to ``dmocker.replay.run``; values are validated by
``RouterConfig.validate`` (a bad one is a clear error, exit 2).
"""

from __future__ import annotations

import argparse

from dmocker.replay.routing import QueuePolicy, RouterConfig

__all__ = ["add_router_arguments", "router_kwargs"]

_DEFAULT = RouterConfig()


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def add_router_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("routing")
    g.add_argument("--router", default="round-robin", metavar="round-robin|kv|MODULE:CLASS",
                   help="worker selection for both pools (default round-robin); MODULE:CLASS names a "
                        "class implementing dmocker.replay.routing.Router")
    g.add_argument("--overlap-score-credit", type=_float, default=_DEFAULT.overlap_score_credit,
                   help=f"kv: prefill blocks credited per cached prefix block (default {_DEFAULT.overlap_score_credit})")
    g.add_argument("--overlap-score-credit-decay", type=_float, default=_DEFAULT.overlap_score_credit_decay,
                   help="kv: shrink the credit on workers with excess prefill in flight (default 0: off)")
    g.add_argument("--prefill-load-scale", type=_float, default=_DEFAULT.prefill_load_scale,
                   help=f"kv: weight of prefill blocks in the cost (default {_DEFAULT.prefill_load_scale})")
    g.add_argument("--decode-active-request-weight", type=_float, default=_DEFAULT.decode_active_request_weight,
                   help="kv: block-equivalents per active request (default 0)")
    g.add_argument("--router-temperature", type=_float, default=_DEFAULT.router_temperature,
                   help="kv: 0 picks the cheapest worker, > 0 samples a softmax (default 0)")
    g.add_argument("--router-queue-threshold", type=_float, default=None,
                   help="kv: hold arrivals while every worker has more than this x max_num_batched_tokens "
                        "prefill tokens in flight (default: no queue)")
    g.add_argument("--router-queue-policy", choices=[p.value for p in QueuePolicy],
                   default=_DEFAULT.router_queue_policy.value, help="kv: queue order (default fcfs)")
    g.add_argument("--kv-event-lag-ms", type=_float, default=_DEFAULT.kv_event_lag_ms,
                   help="kv: delay before the router sees the engines' KV events (default 0)")


def router_kwargs(args: argparse.Namespace) -> tuple[str, RouterConfig]:
    """``router`` and ``router_config`` for ``dmocker.replay.run`` (ValueError on bad values)."""
    config = RouterConfig(
        overlap_score_credit=args.overlap_score_credit,
        overlap_score_credit_decay=args.overlap_score_credit_decay,
        prefill_load_scale=args.prefill_load_scale,
        decode_active_request_weight=args.decode_active_request_weight,
        router_temperature=args.router_temperature,
        router_queue_threshold=args.router_queue_threshold,
        router_queue_policy=QueuePolicy.parse(args.router_queue_policy),
        kv_event_lag_ms=args.kv_event_lag_ms,
    ).validate()
    return str(args.router), config
