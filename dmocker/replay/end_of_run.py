"""The replay's optional machinery around one run: faults, a user's coordinator, the final checks.

Why one object: :func:`dmocker.replay.run` needs four touch points (the coordinator factory,
attaching the fault plan, running, and the end-of-run summary fields); keeping them here keeps
the entry point a straight line and leaves the plain run (no faults, our coordinator) on exactly
the code it ran before — the factory is then None and nothing is attached.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from dmocker.engines.interface import EngineArgs
from dmocker.handoff import HandoffOrder

from .collector import Collector
from .config_sections import TransferConfig
from .errors import DeadEndError
from .faults import FaultCause, FaultKind, FaultPlan
from .invariants import EndState, InvariantBreak, check_end_of_run, dead_end_breaks, failures_by_cause, leaked_blocks_at_dead_end
from .report import JsonValue
from .runtime import CoordinatorFactory, DisaggRuntime, RuntimeResult

if TYPE_CHECKING:  # imported when used: a plain run loads neither (the checker pulls in networkx)
    from .coordinators import ForeignFactory
    from .fault_driver import FaultDriver
    from .worker_timers import WorkerTimers

__all__ = ["RunHooks", "add_end_fields", "empty_faults_injected", "finish_agg", "prepare"]


def empty_faults_injected() -> dict[str, JsonValue]:
    out: dict[str, JsonValue] = {k.value: 0 for k in FaultKind}
    out["worker_crash"] = 0
    out["worker_restart"] = 0
    return out


class RunHooks:
    """What one run adds around the runtime (see the module docstring)."""

    def __init__(self, driver: FaultDriver | None, foreign: ForeignFactory | None,
                 timers: WorkerTimers | None = None) -> None:
        self.driver = driver
        self.foreign = foreign
        self.timers = timers
        self.dead_end: DeadEndError | None = None
        self.breaks: tuple[InvariantBreak, ...] = ()

    @property
    def factory(self) -> CoordinatorFactory | None:
        if self.driver is not None:
            return self.driver.factory
        return self.foreign

    def attach(self, runtime: DisaggRuntime) -> None:
        if self.foreign is not None:
            clock = runtime.clock
            self.foreign.clock = lambda: clock.now_ms
        if self.driver is not None:
            self.driver.attach(runtime.control)
            self.driver.attach_transfers(runtime.executor, runtime.handoffs.event_log)
        if self.timers is not None:
            self.timers.attach(runtime)

    def run(self, runtime: DisaggRuntime) -> RuntimeResult:
        """Run; with faults or a user's coordinator a dead end is an invariant break, not a crash."""
        try:
            return runtime.run()
        except DeadEndError as exc:
            if self.driver is None and self.foreign is None:
                raise
            self.dead_end = exc
            return RuntimeResult(runtime.now_ms, False, 0)

    def finish(
        self,
        runtime: DisaggRuntime,
        collector: Collector,
        summary: dict[str, JsonValue],
        *,
        order: HandoffOrder,
        capped: bool,
        events_path: str | os.PathLike[str] | None,
    ) -> None:
        """Check the end state and add its summary fields."""
        finished = not capped and self.dead_end is None
        # Whenever a native event log is written it is validated against the spec.
        eor = check_end_of_run(runtime.control, collector, summary, order=order, finished=finished, events_path=events_path)
        breaks = list(eor.breaks)
        leaked = eor.leaked_kv_blocks
        if self.dead_end is not None:
            breaks = dead_end_breaks(runtime.control, self.dead_end.stuck) + breaks
            leaked = leaked_blocks_at_dead_end(runtime.control)
        self.breaks = tuple(breaks)
        d = self.driver
        injected: dict[str, JsonValue] = empty_faults_injected()
        if d is not None:
            injected.update(d.injected)
        causes = dict(d.causes) if d is not None else {}
        timers = self.timers
        if timers is not None and timers.fired:
            for rid, cause in timers.causes.items():
                causes.setdefault(rid, cause)
            summary["worker_timers"] = timers.summary_fields()
        add_end_fields(summary, collector, leaked, breaks, injected, causes)


def finish_agg(runtime: EndState, collector: Collector, summary: dict[str, JsonValue], *, order: HandoffOrder,
               capped: bool) -> None:
    """The end-of-run checks of an aggregated run (no faults, coordinators or event log)."""
    eor = check_end_of_run(runtime, collector, summary, order=order, finished=not capped)
    add_end_fields(summary, collector, eor.leaked_kv_blocks, list(eor.breaks), empty_faults_injected(), {})


def add_end_fields(summary: dict[str, JsonValue], collector: Collector, leaked: int, breaks: list[InvariantBreak],
                   injected: dict[str, JsonValue], causes: dict[int, FaultCause]) -> None:
    """The summary's end-of-run fields, in their order."""
    summary["leaked_kv_blocks"] = leaked
    summary["faults_injected"] = injected
    summary["failures_by_cause"] = failures_by_cause(collector, causes)
    summary["invariants_ok"] = not breaks
    listed: list[JsonValue] = [b.to_json() for b in breaks]
    summary["invariant_breaks"] = listed


def prepare(
    faults: FaultPlan | None,
    coordinator: str | Callable[..., object] | None,
    *,
    prefill_args: EngineArgs,
    decode_args: EngineArgs,
    prefill_workers: int,
    decode_workers: int,
    num_requests: int,
    clocks: TransferConfig | None = None,
    order: HandoffOrder | None = None,
    bootstrap: bool = True,
) -> RunHooks:
    """Validate the fault plan and the coordinator (ValueError: bad input) and build the hooks.

    ``clocks``: the workers' own timers (None: none); each order runs its own: the source's hold
    (vLLM), the destination's bootstrap, wait and heartbeats (SGLang); ``bootstrap`` False
    leaves out the bootstrap timeout (a live cluster whose destinations come with their decode
    requests times bootstraps itself)."""
    if faults is not None and not isinstance(faults, FaultPlan):
        raise ValueError(f"faults must be a FaultPlan, got {type(faults).__name__}")
    if faults is not None:
        faults.check_pools(prefill_workers, decode_workers, num_requests)
    foreign = None
    if coordinator is not None:
        from .coordinators import resolve_coordinator

        foreign = resolve_coordinator(coordinator)
    driver = None
    if faults is not None and not faults.is_empty:
        from .fault_driver import FaultDriver

        driver = FaultDriver(faults, prefill_args=prefill_args, decode_args=decode_args, inner_factory=foreign)
    timers = None
    if clocks is not None and order is not None:
        from .worker_timers import WorkerTimers, timer_settings

        settings = timer_settings(clocks, order, bootstrap=bootstrap,
                                  losses=faults.heartbeat_losses if faults is not None else ())
        if settings.any_armed:
            timers = WorkerTimers(settings, prefill_args=prefill_args, decode_args=decode_args)
    return RunHooks(driver, foreign, timers)
