"""The workers' own clocks in a replay: the source-first source's hold expiry.

vLLM's NixlConnector frees a finished prefill's held blocks by itself once
VLLM_NIXL_ABORT_REQUEST_TIMEOUT (480 s by default) has passed without a read
(``vllm-project/vllm`` ``vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py``,
``get_finished``).  In the replay a transfer starts as soon as the destination is reserved, and
the timeout outlasts every transfer, so the race left is the one the spec's ``hold_expiry``
names: the destination is not reserved in time (its pool is full).  The replay follows the
spec's reference semantics (``workers.configurations.dmocker``): the expiry fails the handoff
with ``TimedOut`` — a read of the freed blocks would fail — instead of vLLM's silent free.

Exists in a run only for a source-first engine with a timeout; a run where no hold expires
writes exactly what it wrote before (the summary gains ``worker_timers`` only when one fired).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from dmocker.engines.interface import LifecycleEvent
from dmocker.handoff import SourceHeld, TimedOut

from .faults import FaultCause
from .report import JsonValue
from .runtime import DisaggRuntime

__all__ = ["WorkerTimers"]


class WorkerTimers:
    """Arms each held source's expiry and fires it when its destination was never reserved."""

    def __init__(self, abort_timeout_s: float, block_tokens: int) -> None:
        self.abort_timeout_ms = abort_timeout_s * 1000.0
        self.block_tokens = block_tokens
        self.expirations = 0
        self.stranded_block_seconds = 0.0  # blocks x seconds held by sources that were never read
        self.causes: dict[int, FaultCause] = {}
        self._runtime: DisaggRuntime | None = None

    def attach(self, runtime: DisaggRuntime) -> None:
        self._runtime = runtime
        previous = runtime.effects.held_sink

        def held(events: tuple[LifecycleEvent, ...], now_ms: float) -> None:
            if previous is not None:
                previous(events, now_ms)
            for ev in events:
                if isinstance(ev, SourceHeld):
                    rid = ev.handoff_id
                    assert isinstance(rid, int)  # the replay's handoff ids are its request ids
                    runtime.control.at_idle(now_ms + self.abort_timeout_ms, self._expiry(rid, now_ms))

        runtime.effects.held_sink = held

    def _expiry(self, request_id: int, held_ms: float) -> Callable[[], None]:
        def fire() -> None:
            runtime = self._runtime
            assert runtime is not None
            req = runtime.table.live.get(request_id)
            # read in time (its destination was reserved and the transfer started), or over
            if req is None or req.destination_reserved_ms is not None or req.terminal_ms is not None:
                return
            tokens = req.held_tokens or 0
            live, recorded = runtime.control.deliver(request_id, TimedOut)
            if not live:
                return
            self.expirations += 1
            self.stranded_block_seconds += math.ceil(tokens / self.block_tokens) * (runtime.now_ms - held_ms) / 1000.0
            if recorded:
                self.causes[request_id] = FaultCause.TRANSFER_TIMEOUT

        return fire

    def summary_fields(self) -> dict[str, JsonValue]:
        """The summary's ``worker_timers`` section (only added when a timer fired)."""
        return {
            "kv_abort_timeout_s": self.abort_timeout_ms / 1000.0,
            "source_expirations": self.expirations,
            "stranded_block_seconds": round(self.stranded_block_seconds, 6),
        }
