"""The planner hook: what a planner sees at each tick and what it answers.

Why a protocol and frozen values: a planner is user code run inside a deterministic replay.
It gets an immutable snapshot (it cannot reach into the runtime) and answers with a plain
value the loop validates, so a bad answer is reported against the tick that produced it and
the run stays reproducible.  The shape follows the reference's offline planner hook
(``ai-dynamo/dynamo`` ``lib/mocker/src/replay/offline/`` planner hook: ``initial_tick_ms`` /
``on_tick``; metrics = latest forward-pass snapshot per worker, traffic since the last tick,
worker counts, router pending counts).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from ..errors import PlannerError

__all__ = [
    "ScalingDecision",
    "WorkerState",
    "WorkerSnapshot",
    "PoolMetrics",
    "TrafficStats",
    "PlannerMetrics",
    "Planner",
    "PlannerError",
]


@dataclass(frozen=True, slots=True)
class ScalingDecision:
    """A planner's answer to one tick.

    ``prefill_workers`` / ``decode_workers``: the target number of *non-draining* workers of
    the pool (active + starting); ``None`` leaves that pool as it is.  ``next_tick_ms``: when to
    tick next (absolute simulated ms); the tick is re-armed only if it is finite, later than
    now, and work remains -- ``None`` stops ticking.
    """

    prefill_workers: int | None = None
    decode_workers: int | None = None
    next_tick_ms: float | None = None


class WorkerState(enum.Enum):
    """Where a worker is in its life (pools.py drives the transitions)."""

    STARTING = "starting"  # provisioned, not yet ready: no routing, no passes
    ACTIVE = "active"  # routed to and running passes
    DRAINING = "draining"  # out of routing, finishing what it holds
    REMOVED = "removed"  # drained and gone (its index is never reused)
    CANCELED = "canceled"  # scaled down while still starting


@dataclass(frozen=True, slots=True)
class WorkerSnapshot:
    """One active or draining worker as of the tick (its latest forward pass and current load).

    ``running_requests`` / ``waiting_requests``: requests in the engine's running batch and
    queue right now.  ``kv_used_blocks`` / ``kv_total_blocks`` / ``kv_usage``: KV blocks in use
    (running, held, reserved) over the pool size.  ``queued_tokens``: prompt tokens routed to
    this worker and still queued -- on a prefill worker, not yet admitted to a pass; on a
    decode worker, destination reservations accepted but not yet granted.  ``last_pass_*``: the
    worker's most recent forward pass (start, duration, uncached prompt tokens computed,
    requests decoded); ``None`` / 0 when it never ran one.
    """

    worker: int
    state: WorkerState
    running_requests: int
    waiting_requests: int
    kv_used_blocks: int
    kv_total_blocks: int
    kv_usage: float
    queued_tokens: int
    last_pass_start_ms: float | None
    last_pass_ms: float | None
    last_pass_prefill_tokens: int
    last_pass_decode_tokens: int


@dataclass(frozen=True, slots=True)
class PoolMetrics:
    """One pool (prefill or decode): worker counts and per-worker snapshots.

    ``workers`` lists active and draining workers by index; starting workers have no snapshot
    (they have run nothing).  ``router_pending``: requests waiting to be routed to this pool
    because it has no routable worker.
    """

    active: int
    starting: int
    draining: int
    workers: tuple[WorkerSnapshot, ...]
    router_pending: int

    @property
    def target(self) -> int:
        """The count a ScalingDecision compares against: active + starting."""
        return self.active + self.starting

    @property
    def provisioned(self) -> int:
        """Workers being paid for: active + starting + draining."""
        return self.active + self.starting + self.draining


@dataclass(frozen=True, slots=True)
class TrafficStats:
    """Traffic since the previous tick (the reference's TrafficAccumulator window).

    ``num_req``, ``avg_isl``, ``avg_osl``: requests that *completed* decode in the window (not
    rejected), with their input length and requested output length.  ``avg_ttft_ms`` /
    ``avg_itl_ms``: means over those requests that have the sample (positive TTFT; positive
    mean ITL, i.e. at least two tokens).  ``avg_kv_hit_rate``: mean over prefill admissions in
    the window of reused prompt tokens / prompt tokens.  Averages are 0.0 without samples.
    """

    duration_s: float
    num_req: int
    avg_isl: float
    avg_osl: float
    avg_ttft_ms: float
    avg_itl_ms: float
    avg_kv_hit_rate: float
    ttft_samples: int
    itl_samples: int
    kv_hit_samples: int

    @property
    def request_rate(self) -> float:
        """Completed requests per second over the window (0.0 for an empty window)."""
        return self.num_req / self.duration_s if self.duration_s > 0 else 0.0


@dataclass(frozen=True, slots=True)
class PlannerMetrics:
    """Everything a planner sees at one tick; ``tick`` counts ticks from 0."""

    now_ms: float
    tick: int
    prefill: PoolMetrics
    decode: PoolMetrics
    traffic: TrafficStats

    @property
    def router_pending(self) -> int:
        """Requests waiting for a routable worker, both pools."""
        return self.prefill.router_pending + self.decode.router_pending


@runtime_checkable
class Planner(Protocol):
    """Implement these two methods (any class; constructed by the caller)."""

    def initial_tick_ms(self) -> float | None:
        """Simulated ms of the first tick; ``None`` or non-finite: never tick."""
        ...

    def on_tick(self, metrics: PlannerMetrics) -> ScalingDecision:
        """Look at the cluster, return the target counts and the next tick time."""
        ...


