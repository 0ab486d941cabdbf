"""The KV router's knobs, with the reference's names and defaults, checked once.

Why a frozen dataclass of its own: the CLI flags and the replay configuration's ``router.kv``
table both land here, so every value is validated in one place and bad input fails with a message
naming the field before any simulation work.  Names and defaults are those of the reference's
``KvRouterConfig`` (``ai-dynamo/dynamo`` ``lib/kv-router/src/scheduling/config.rs``, Dynamo
1.6.1): overlap credit 1.0, no credit decay, prefill load scale 1.0, no per-request decode
weight, temperature 0, queueing off (threshold ``None``), queue policy ``fcfs``.  Run against
Dynamo 1.6.1, passing no router config, ``KvRouterConfig()`` and a threshold of 1e9 give
byte-identical replays, so the default threshold is "no queue".
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

__all__ = ["QueuePolicy", "RouterConfig"]


class QueuePolicy(enum.Enum):
    """Order in which the router queue releases requests once a worker frees up."""

    FCFS = "fcfs"  # first come, first served
    LCFS = "lcfs"  # last come, first served
    WSPT = "wspt"  # weighted shortest processing time: fewest uncached prompt tokens first

    @classmethod
    def parse(cls, value: str | QueuePolicy) -> QueuePolicy:
        if isinstance(value, QueuePolicy):
            return value
        text = str(value).strip().lower()
        for policy in cls:
            if policy.value == text:
                return policy
        raise ValueError(f"router_queue_policy must be 'fcfs', 'lcfs' or 'wspt', got {value!r}")


def _number(name: str, value: object, *, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class RouterConfig:
    """Settings of the KV-aware router (both pools; the decode pool forces its overrides).

    * ``overlap_score_credit``: blocks of prefill cost credited per cached prefix block.
    * ``overlap_score_credit_decay``: > 0 shrinks that credit on workers whose in-flight
      prefill exceeds the least-loaded worker's (0: off).
    * ``prefill_load_scale``: weight of the (credited) prefill blocks in the cost.
    * ``decode_active_request_weight``: block-equivalents added per active request.
    * ``router_temperature``: 0 picks the cheapest worker; > 0 samples a softmax over
      min-max-normalised costs.
    * ``router_queue_threshold``: ``None`` never queues; a number queues arrivals while every
      worker has more than ``threshold x max_num_batched_tokens`` prefill tokens in flight.
    * ``router_queue_policy``: ``fcfs``, ``lcfs`` or ``wspt``.
    * ``kv_event_lag_ms``: the prefill router sees the engines' KV events this much later.
    """

    overlap_score_credit: float = 1.0
    overlap_score_credit_decay: float = 0.0
    prefill_load_scale: float = 1.0
    decode_active_request_weight: float = 0.0
    router_temperature: float = 0.0
    router_queue_threshold: float | None = None
    router_queue_policy: QueuePolicy = QueuePolicy.FCFS
    kv_event_lag_ms: float = 0.0

    def validate(self) -> RouterConfig:
        """Return a normalised copy (floats, enum policy) or raise ``ValueError`` naming the field."""
        return RouterConfig(
            overlap_score_credit=_number("overlap_score_credit", self.overlap_score_credit) or 0.0,
            overlap_score_credit_decay=_number("overlap_score_credit_decay", self.overlap_score_credit_decay) or 0.0,
            prefill_load_scale=_number("prefill_load_scale", self.prefill_load_scale) or 0.0,
            decode_active_request_weight=_number(
                "decode_active_request_weight", self.decode_active_request_weight
            ) or 0.0,
            router_temperature=_number("router_temperature", self.router_temperature) or 0.0,
            router_queue_threshold=_number("router_queue_threshold", self.router_queue_threshold, allow_none=True),
            router_queue_policy=QueuePolicy.parse(self.router_queue_policy),
            kv_event_lag_ms=_number("kv_event_lag_ms", self.kv_event_lag_ms) or 0.0,
        )

    def as_json(self) -> dict[str, float | str | None]:
        return {
            "overlap_score_credit": self.overlap_score_credit,
            "overlap_score_credit_decay": self.overlap_score_credit_decay,
            "prefill_load_scale": self.prefill_load_scale,
            "decode_active_request_weight": self.decode_active_request_weight,
            "router_temperature": self.router_temperature,
            "router_queue_threshold": self.router_queue_threshold,
            "router_queue_policy": self.router_queue_policy.value,
            "kv_event_lag_ms": self.kv_event_lag_ms,
        }
