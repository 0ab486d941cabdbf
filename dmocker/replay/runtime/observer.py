"""What the runtime reports to an observer of the cluster (the planner) as requests move.

Why an interface: the planner needs per-request observations (routed, admitted, reserved,
completed, gone) from parts that sit below it; they call this small protocol, and the planner
implements it, so those parts never import the planner.
"""

from __future__ import annotations

from typing import Protocol

from dmocker.engines.interface import PassPlan

__all__ = ["ClusterObserver", "ClusterPlanner"]


class ClusterObserver(Protocol):
    def on_pass(self, stage: int, idx: int, plan: PassPlan) -> None:
        """Worker ``idx`` of ``stage`` started a pass (or a bulk run of passes)."""

    def on_routed(self, stage: int, rid: int, idx: int, tokens: int) -> None:
        """Request ``rid`` was routed to worker ``idx`` with ``tokens`` prompt tokens."""

    def on_decode_reserved(self, rid: int) -> None:
        """The request's destination was reserved."""

    def on_prefill_admit(self, rid: int, reused: int, input_length: int) -> None:
        """The request's prefill was admitted, ``reused`` prompt tokens from the prefix cache."""

    def on_completed(self, rid: int, arrival_ms: float, input_length: int, output_length: int) -> None:
        """The request finished decoding."""

    def on_request_gone(self, rid: int) -> None:
        """The request left the cluster (finished, failed or canceled)."""


class ClusterPlanner(ClusterObserver, Protocol):
    """A planner in the loop (dmocker.replay.planner.loop.PlannerLoop): it observes the
    requests, and the event loop gives it its turns; it acts through the runtime's
    :class:`~.control.ClusterControl` (handed to it by whoever builds the run)."""

    @property
    def draining(self) -> int:
        """Workers being drained (the loop then asks ``after_sweep`` at every sweep)."""

    def start(self) -> None:
        """The run starts: schedule the first tick."""

    def apply_ready(self, now_ms: float) -> bool:
        """Workers whose start-up ends now become ready; True if any did."""

    def after_sweep(self, now_ms: float) -> bool:
        """End of a sweep: remove drained workers, run the ticks due now; True if anything changed."""

    def worker_seconds(self, end_ms: float) -> tuple[float, float]:
        """Worker-seconds provisioned per pool over the run, prefill then decode."""
