"""Delivers a :class:`~dmocker.replay.faults.FaultPlan` into a running replay.

Why here and not in the runtime: the runtime only offers hook points (timed callbacks, a
terminal fact delivered from outside, a worker leaving and rejoining its pool); what a fault
*is* — which requests it hits, at which step of their handoff, what a crash takes down — lives
in this module, which exists in a run only when a plan is given.

Per-request faults are placed by counting the coordinator's inputs: the coordinator of a
request that drew faults is built as :class:`StepCountingCoordinator` (our coordinator) or told
to report its steps (a user's coordinator, see :mod:`dmocker.replay.coordinators`); after its
k-th input the fault is scheduled for the same instant, so it lands between two steps of the
handoff, exactly as a real cancel or failure racing the handoff would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from dmocker.engines.interface import EngineArgs
from dmocker.engines.registry import make_worker
from dmocker.handoff import (
    Completion,
    EventLogWriter,
    Fact,
    Failed,
    HandoffCoordinator,
    HandoffOrder,
    IssuedAction,
    Outcome,
    OutcomeKind,
    ProtocolSpec,
)

from .collector import TerminalStatus
from .faults import FaultCause, FaultKind, FaultPlan, Pool, WorkerCrash, crash_events, draw_request_faults, draws_stall
from .runtime import ActionExecutor, ClusterControl, CoordinatorFactory

__all__ = ["FaultDriver", "StepCountingCoordinator", "StepHook"]

#: Called after each input a coordinator accepted: (request id, inputs so far, success-complete now).
StepHook = Callable[[int, int, bool], None]



class StepCountingCoordinator(HandoffCoordinator):
    """Our coordinator, reporting each accepted input to a hook (requests that drew faults only)."""

    __slots__ = ("_rid", "_hook", "_steps")

    def __init__(
        self,
        handoff_id: int,
        order: HandoffOrder,
        hook: StepHook,
        *,
        fallback_transfer_delay_ms: float = 0.0,
        spec: ProtocolSpec | None = None,
    ) -> None:
        super().__init__(handoff_id, order, fallback_transfer_delay_ms=fallback_transfer_delay_ms, spec=spec)
        self._rid = handoff_id
        self._hook = hook
        self._steps = 0

    def _stepped(self, out: list[IssuedAction]) -> list[IssuedAction]:
        self._steps += 1
        self._hook(self._rid, self._steps, self.completion is Completion.SUCCESS)
        return out

    def start(self) -> list[IssuedAction]:
        return self._stepped(super().start())

    def on_fact(self, fact: Fact) -> list[IssuedAction]:
        return self._stepped(super().on_fact(fact))

    def on_action_outcome(self, action_id: int, outcome: Outcome) -> list[IssuedAction]:
        return self._stepped(super().on_action_outcome(action_id, outcome))

    def on_outcome_kind(self, action_id: int, kind: OutcomeKind) -> list[IssuedAction]:
        # The documented equivalent; the lean path would call on_action_outcome itself for
        # some inputs and so count them twice.
        return self.on_action_outcome(action_id, Outcome(kind))


class _StepReporting(Protocol):
    def set_step_hook(self, hook: StepHook) -> None: ...


class FaultDriver:
    """Builds the coordinators of a faulty run and applies the plan through the runtime's hooks."""

    def __init__(
        self,
        plan: FaultPlan,
        *,
        prefill_args: EngineArgs,
        decode_args: EngineArgs,
        inner_factory: CoordinatorFactory | None = None,
    ) -> None:
        self.plan = plan
        self._args = (prefill_args, decode_args)
        self._inner = inner_factory
        self._runtime: ClusterControl | None = None
        self._due: dict[int, list[tuple[int, FaultKind]]] = {}
        self._draws = any(p > 0.0 for _, p in plan.rates)
        self._down: set[tuple[int, int]] = set()
        self.injected: dict[str, int] = {k.value: 0 for k in FaultKind}
        self.injected["worker_crash"] = 0
        self.injected["worker_restart"] = 0
        # counted only when planned, so a run without them reports what it reported before
        if plan.stall_rate > 0:
            self.injected["transfer_stall"] = 0
        if plan.heartbeat_losses:
            self.injected["heartbeat_loss"] = len(plan.heartbeat_losses)
        self.causes: dict[int, FaultCause] = {}
        self._log: EventLogWriter | None = None

    # --- wiring -------------------------------------------------------------------------------

    def factory(
        self, request_id: int, order: HandoffOrder, *, fallback_transfer_delay_ms: float = 0.0, spec: ProtocolSpec | None = None
    ) -> HandoffCoordinator:
        faults = draw_request_faults(self.plan, request_id) if self._draws else []
        if any(step < 0 for step, _ in faults):
            for step, _ in faults:
                if step < 0:  # a FAILED outcome of the request's (-step)-th acquiring command
                    assert self._runtime is not None
                    self._runtime.on_acquire(request_id, _bind_acquire(self, request_id, -step - 1))
            faults = [(step, kind) for step, kind in faults if step >= 0]
        if self._inner is None:
            if not faults:
                return HandoffCoordinator(request_id, order, fallback_transfer_delay_ms=fallback_transfer_delay_ms, spec=spec)
            self._due[request_id] = faults
            return StepCountingCoordinator(
                request_id, order, self._on_step, fallback_transfer_delay_ms=fallback_transfer_delay_ms, spec=spec
            )
        coord = self._inner(request_id, order, fallback_transfer_delay_ms=fallback_transfer_delay_ms, spec=spec)
        if faults:
            self._due[request_id] = faults
            reporting: _StepReporting = coord  # type: ignore[assignment]
            reporting.set_step_hook(self._on_step)
        return coord

    def attach(self, control: ClusterControl) -> None:
        """Schedule the plan's exact faults and crashes through ``control`` (before the run)."""
        self._runtime = control
        for f in self.plan.schedule:
            control.at(f.t_ms, _bind_land(self, f.request_id, f.kind))
        for t_ms, restart, crash in crash_events(self.plan):
            control.at(t_ms, _bind_crash(self, crash, restart))

    def attach_transfers(self, executor: ActionExecutor, event_log: EventLogWriter | None) -> None:
        """Stall the transfers the plan draws (only when it has a stall rate)."""
        if self.plan.stall_rate > 0:
            self._log = event_log
            executor.transfer_delay = self.stall

    def stall(self, request_id: int, delay_ms: float) -> float:
        """A transfer starts: the delay it takes, ``stall_s`` longer when it stalls."""
        if not draws_stall(self.plan, request_id):
            return delay_ms
        rt = self._runtime
        assert rt is not None
        self.injected["transfer_stall"] += 1
        if self._log is not None:
            self._log.log_worker(rt.now_ms, request_id, "transfer_stalled")
        return delay_ms + self.plan.stall_s * 1000.0

    # --- per-request faults -------------------------------------------------------------------

    def _on_step(self, request_id: int, steps: int, success: bool) -> None:
        due = self._due.get(request_id)
        if not due:
            return
        rt = self._runtime
        assert rt is not None
        keep: list[tuple[int, FaultKind]] = []
        for step, kind in due:
            if steps > step or success:
                rt.at(rt.now_ms, _bind_land(self, request_id, kind))
            else:
                keep.append((step, kind))
        if keep:
            self._due[request_id] = keep
        else:
            del self._due[request_id]

    def acquire_failed(self, request_id: int) -> None:
        rt = self._runtime
        assert rt is not None
        self.injected[FaultKind.FAIL.value] += 1  # the fault that fails acquires (FaultKind.fails_acquire)
        if rt.collector.status_of(request_id) is TerminalStatus.INCOMPLETE:  # this failure ends it
            self.causes[request_id] = FaultCause.ACTION_FAILED

    def land(self, request_id: int, kind: FaultKind) -> None:
        rt = self._runtime
        assert rt is not None
        live, recorded = rt.deliver(request_id, kind.fact)
        if live:
            self.injected[kind.value] += 1
        if recorded:
            self.causes[request_id] = kind.cause

    # --- worker crashes -------------------------------------------------------------------------

    def crash(self, crash: WorkerCrash, restart: bool) -> None:
        rt = self._runtime
        assert rt is not None
        stage, idx = crash.pool.stage, crash.index
        key = (stage, idx)
        if restart:
            if key in self._down:
                self._down.discard(key)
                rt.add_worker(stage, idx)
                self.injected["worker_restart"] += 1
            return
        if key in self._down:
            return
        self._down.add(key)
        self.injected["worker_crash"] += 1
        affected = rt.remove_worker(stage, idx, make_worker(self._args[stage], idx))
        pool_size = len(rt.workers(stage))
        if self.plan.restart_s is None and sum(1 for s, _ in self._down if s == stage) == pool_size:
            rt.set_pool_gone(stage)
        for rid in affected:
            _, recorded = rt.deliver(rid, Failed)
            if recorded:
                self.causes[rid] = FaultCause.WORKER_CRASH

    def down_workers(self) -> list[str]:
        return [f"{(Pool.PREFILL if s == 0 else Pool.DECODE).value}:{i}" for s, i in sorted(self._down)]


def _bind_land(driver: FaultDriver, request_id: int, kind: FaultKind) -> Callable[[], None]:
    return lambda: driver.land(request_id, kind)


def _bind_acquire(driver: FaultDriver, request_id: int, which: int) -> Callable[[], bool]:
    seen = [0]

    def hook() -> bool:
        n = seen[0]
        seen[0] = n + 1
        if n != which:
            return False
        driver.acquire_failed(request_id)
        return True

    return hook


def _bind_crash(driver: FaultDriver, crash: WorkerCrash, restart: bool) -> Callable[[], None]:
    return lambda: driver.crash(crash, restart)
