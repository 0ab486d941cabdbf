"""Seeded fault injection for the replay: what goes wrong, to whom, and when.

Why a plan value and a separate driver: the plan (:class:`FaultPlan`) is plain, validated data
that the CLI, the Python API and fuzz scenarios all build the same way; the driver
(:class:`FaultDriver`) is the only thing the runtime talks to, and only when a plan is given,
so a replay without faults runs exactly the code it ran before.

Two kinds of faults:

* per-request faults (client cancel, a handoff action failing, the transfer timing out) drawn
  independently for each request with the given probabilities.  Each lands at a seeded random
  *step* of the request's handoff: after the coordinator's k-th input (``start()``, each fact,
  each acknowledgement), k uniform over a nominal life of :data:`NOMINAL_STEPS` inputs; a k past
  the coordinator's completion lands right after it completes (the post-success window, while
  the request still decodes).  Counting steps rather than milliseconds puts faults before,
  during and after the handoff with the same odds whatever the engine's timing.  Explicit
  schedules (:class:`ScheduledFault`, exact times; fuzz scenarios) are delivered as given.
* worker crashes (:class:`WorkerCrash`): at ``t_ms`` the worker dies — its pass stops, its KV
  is gone, every handoff involving it gets ``Failed``, routing skips it — and with
  ``restart_s`` it comes back empty that many seconds later.
* faults the workers' own clocks answer (docs/faults.md#the-workers-own-clocks): a transfer
  that stalls (``stall_rate``: per request, seeded as above; its bytes stop for ``stall_s``
  seconds) and a prefill worker whose heartbeats are lost for a while (:class:`HeartbeatLoss`).

Every draw comes from a generator seeded with ``(seed, request id)``, so a request's faults do
not depend on the order requests are processed in, nor on ``PYTHONHASHSEED``.
"""

from __future__ import annotations

import enum
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Final

from dmocker.handoff import Failed, SpecError, TerminalFact, load_spec, terminal_fact_classes

from .routing.protocol import Pool

__all__ = [
    "FaultKind",
    "FaultCause",
    "FaultPlan",
    "ScheduledFault",
    "WorkerCrash",
    "HeartbeatLoss",
    "Pool",
    "NOMINAL_STEPS",
    "parse_worker_crash",
    "parse_heartbeat_loss",
    "draw_request_faults",
    "draws_stall",
]

NOMINAL_STEPS = 10
"""Coordinator inputs in a nominal handoff life (start, 4 acknowledgements and 2 facts per
side, the transfer's acknowledgement and completion) plus one slot for "after success"."""


class FaultKind(enum.Enum):
    """A per-request fault: it delivers one of the spec's terminal facts to the request's
    coordinator.  The members are the spec's fault names (``facts.*.fault.name`` in
    spec/handoff.json, checked when this module loads); the fact each delivers and the cause
    it records are read from the spec (:attr:`fact`, :attr:`cause`)."""

    CANCEL = "cancel"
    FAIL = "fail"
    TIMEOUT = "timeout"

    @property
    def fact(self) -> type[TerminalFact]:
        """The terminal fact this fault delivers."""
        return _SPEC_FAULTS[self.value][0]

    @property
    def cause(self) -> FaultCause:
        """Why a request this fault ended ended (its ``failures_by_cause`` key)."""
        return FaultCause(_SPEC_FAULTS[self.value][1])

    @property
    def fails_acquire(self) -> bool:
        """Whether the fault may also land as a FAILED outcome of an acquiring command (it
        delivers Failed, the fact a failed action stands for)."""
        return self.fact is Failed


class FaultCause(enum.Enum):
    """Why a request failed or was canceled (the summary's ``failures_by_cause``): a fault's
    cause (the spec's ``facts.*.fault.cause``, checked when this module loads), a worker crash,
    or the engine itself (a command error or a rejection, no fault injected)."""

    CLIENT_CANCEL = "client_cancel"
    ACTION_FAILED = "action_failed"
    TRANSFER_TIMEOUT = "transfer_timeout"
    WORKER_CRASH = "worker_crash"
    HEARTBEAT_LOSS = "heartbeat_loss"
    ENGINE = "engine"


def _spec_faults() -> dict[str, tuple[type[TerminalFact], str]]:
    """Fault name -> (the terminal fact it delivers, its cause), from the spec; the enums above
    must name exactly the spec's faults."""
    spec = load_spec()
    facts = dict(zip(spec.terminal_facts, terminal_fact_classes(spec.terminal_facts)))
    out = {f.fault.name: (facts[f.name], f.fault.cause) for f in spec.fault_facts if f.fault is not None}
    if set(out) != {k.value for k in FaultKind}:
        raise SpecError(f"the spec's faults {sorted(out)} are not dmocker.replay.faults.FaultKind's "
                        f"{sorted(k.value for k in FaultKind)}")
    causes = {c.value for c in FaultCause}
    for name, (_, cause) in out.items():
        if cause not in causes:
            raise SpecError(f"the spec's fault {name!r} has cause {cause!r}, not one of FaultCause's {sorted(causes)}")
    return out


_SPEC_FAULTS: Final = _spec_faults()


@dataclass(frozen=True, slots=True)
class ScheduledFault:
    """A fault delivered to ``request_id`` at exactly ``t_ms`` (ignored if it is no longer live)."""

    t_ms: float
    request_id: int
    kind: FaultKind


@dataclass(frozen=True, slots=True)
class WorkerCrash:
    """Worker ``index`` of ``pool`` dies at ``t_ms``."""

    pool: Pool
    index: int
    t_ms: float

    def label(self) -> str:
        return f"{self.pool.value}:{self.index}@{_num(self.t_ms)}"


@dataclass(frozen=True, slots=True)
class HeartbeatLoss:
    """Prefill worker ``index`` answers no heartbeat probe from ``t_ms`` for ``duration_ms`` (a
    network partition, a forward pass that starves the bootstrap server); it keeps working."""

    pool: Pool
    index: int
    t_ms: float
    duration_ms: float

    def label(self) -> str:
        return f"{self.pool.value}:{self.index}@{_num(self.t_ms)}+{_num(self.duration_ms)}"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _rate(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value!r}")
    return float(value)


def _time(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite time >= 0, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class FaultPlan:
    """What to inject into a replay.  Validated on construction (``ValueError`` naming the field).

    ``cancel_rate`` / ``fail_rate`` / ``timeout_rate``: per-request probabilities; ``seed``
    seeds their draws; ``crashes`` and ``restart_s`` (None: crashed workers stay down);
    ``schedule``: exact per-request faults (fuzz scenarios, tests); ``stall_rate``: per-request
    probability that the transfer stalls for ``stall_s`` seconds; ``heartbeat_losses``: prefill
    workers that stop answering heartbeats for a while.
    """

    cancel_rate: float = 0.0
    fail_rate: float = 0.0
    timeout_rate: float = 0.0
    seed: int = 0
    crashes: tuple[WorkerCrash, ...] = ()
    restart_s: float | None = None
    schedule: tuple[ScheduledFault, ...] = field(default=())
    stall_rate: float = 0.0
    stall_s: float = 600.0
    heartbeat_losses: tuple[HeartbeatLoss, ...] = ()

    def __post_init__(self) -> None:
        _rate("fault_cancel_rate", self.cancel_rate)
        _rate("fault_fail_rate", self.fail_rate)
        _rate("fault_timeout_rate", self.timeout_rate)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"fault_seed must be an integer >= 0, got {self.seed!r}")
        if self.restart_s is not None:
            _time("worker_restart_s", self.restart_s)
        for c in self.crashes:
            if not isinstance(c, WorkerCrash):
                raise ValueError(f"worker_crash: expected a WorkerCrash, got {c!r}")
            if isinstance(c.index, bool) or not isinstance(c.index, int) or c.index < 0:
                raise ValueError(f"worker_crash {c!r}: index must be an integer >= 0")
            _time(f"worker_crash {c.pool.value}:{c.index} time", c.t_ms)
        for f in self.schedule:
            if not isinstance(f, ScheduledFault):
                raise ValueError(f"fault schedule: expected a ScheduledFault, got {f!r}")
            _time(f"fault for request {f.request_id} time", f.t_ms)
            if isinstance(f.request_id, bool) or not isinstance(f.request_id, int) or f.request_id < 0:
                raise ValueError(f"fault schedule: request id must be an integer >= 0, got {f.request_id!r}")
        _rate("fault_stall_rate", self.stall_rate)
        if _time("fault_stall_s", self.stall_s) <= 0:
            raise ValueError(f"fault_stall_s must be > 0, got {self.stall_s!r}")
        for h in self.heartbeat_losses:
            if not isinstance(h, HeartbeatLoss):
                raise ValueError(f"heartbeat_loss: expected a HeartbeatLoss, got {h!r}")
            if h.pool is not Pool.PREFILL:
                raise ValueError(f"heartbeat_loss {h.label()}: the decode side probes the prefill side, so "
                                 "heartbeats are lost from a prefill worker")
            if isinstance(h.index, bool) or not isinstance(h.index, int) or h.index < 0:
                raise ValueError(f"heartbeat_loss {h!r}: index must be an integer >= 0")
            _time(f"heartbeat_loss {h.label()} time", h.t_ms)
            if _time(f"heartbeat_loss {h.label()} duration", h.duration_ms) <= 0:
                raise ValueError(f"heartbeat_loss {h.label()}: the duration must be > 0")

    @property
    def rates(self) -> tuple[tuple[FaultKind, float], ...]:
        return (
            (FaultKind.CANCEL, self.cancel_rate),
            (FaultKind.FAIL, self.fail_rate),
            (FaultKind.TIMEOUT, self.timeout_rate),
        )

    @property
    def is_empty(self) -> bool:
        return not (self.cancel_rate or self.fail_rate or self.timeout_rate or self.crashes or self.schedule
                    or self.stall_rate or self.heartbeat_losses)

    def check_heartbeat_losses(self, prefill_workers: int) -> None:
        """Heartbeat losses name existing prefill workers."""
        for h in self.heartbeat_losses:
            if h.index >= prefill_workers:
                raise ValueError(f"heartbeat_loss {h.label()}: the prefill pool has {prefill_workers} worker(s)")

    def check_pools(self, prefill_workers: int, decode_workers: int, num_requests: int | None = None) -> None:
        """Crashes name existing workers; scheduled faults name existing requests."""
        sizes = {Pool.PREFILL: prefill_workers, Pool.DECODE: decode_workers}
        for c in self.crashes:
            if c.index >= sizes[c.pool]:
                raise ValueError(
                    f"worker_crash {c.label()}: the {c.pool.value} pool has {sizes[c.pool]} worker(s) "
                    f"(indexes 0..{sizes[c.pool] - 1})"
                )
        self.check_heartbeat_losses(prefill_workers)
        if num_requests is not None:
            for f in self.schedule:
                if f.request_id >= num_requests:
                    raise ValueError(f"fault schedule: request {f.request_id} does not exist ({num_requests} requests)")



def parse_worker_crash(text: str) -> WorkerCrash:
    """``POOL:INDEX@T_MS`` (``decode:1@2500``) -> WorkerCrash; ValueError naming the part at fault."""
    head, at, t = text.partition("@")
    pool_s, colon, idx_s = head.partition(":")
    if not at or not colon:
        raise ValueError(f"--worker-crash {text!r}: expected POOL:INDEX@T_MS (e.g. decode:0@2500)")
    try:
        pool = Pool(pool_s.strip().lower())
    except ValueError:
        raise ValueError(f"--worker-crash {text!r}: unknown pool {pool_s!r} (prefill or decode)") from None
    try:
        index = int(idx_s)
    except ValueError:
        raise ValueError(f"--worker-crash {text!r}: index {idx_s!r} is not an integer") from None
    try:
        t_ms = float(t)
    except ValueError:
        raise ValueError(f"--worker-crash {text!r}: time {t!r} is not a number") from None
    if index < 0:
        raise ValueError(f"--worker-crash {text!r}: index must be >= 0")
    if not math.isfinite(t_ms) or t_ms < 0:
        raise ValueError(f"--worker-crash {text!r}: time must be a finite number >= 0")
    return WorkerCrash(pool, index, t_ms)


def parse_heartbeat_loss(text: str) -> HeartbeatLoss:
    """``prefill:INDEX@T_MS+DURATION_MS`` (``prefill:0@2500+20000``) -> HeartbeatLoss; ValueError
    naming the part at fault."""
    head, plus, duration = text.partition("+")
    if not plus:
        raise ValueError(f"--heartbeat-loss {text!r}: expected prefill:INDEX@T_MS+DURATION_MS (e.g. prefill:0@2500+20000)")
    try:
        at = parse_worker_crash(head)
    except ValueError as exc:
        raise ValueError(str(exc).replace("--worker-crash", "--heartbeat-loss").replace(
            "POOL:INDEX@T_MS (e.g. decode:0@2500)", "prefill:INDEX@T_MS+DURATION_MS (e.g. prefill:0@2500+20000)")) from None
    try:
        d_ms = float(duration)
    except ValueError:
        raise ValueError(f"--heartbeat-loss {text!r}: duration {duration!r} is not a number") from None
    if not math.isfinite(d_ms) or d_ms <= 0:
        raise ValueError(f"--heartbeat-loss {text!r}: the duration must be a finite number > 0")
    if at.pool is not Pool.PREFILL:
        raise ValueError(f"--heartbeat-loss {text!r}: the decode side probes the prefill side, so heartbeats "
                         "are lost from a prefill worker (prefill:INDEX)")
    return HeartbeatLoss(at.pool, at.index, at.t_ms, d_ms)


def draws_stall(plan: FaultPlan, request_id: int) -> bool:
    """Whether the request's transfer stalls: its own generator (seeded with the seed and the
    request id, apart from :func:`draw_request_faults`), so a stall rate moves no other fault."""
    return random.Random((plan.seed * 0x9E3779B1 + request_id) ^ 0x5A17).random() < plan.stall_rate


def draw_request_faults(plan: FaultPlan, request_id: int) -> list[tuple[int, FaultKind]]:
    """The (step, kind) faults of one request, in kind order; empty for most requests.

    A fresh generator per request, seeded with (seed, request id): the draws of one request
    never depend on another's.  A step >= 0 delivers the kind's fact after that many
    coordinator inputs.  A failure is, half the time, a FAILED outcome of the request's first
    (step -1) or second (step -2) acquiring command (SubmitPrefill / ReserveDestination)
    instead of a Failed fact; every draw is made whatever the rates, so changing one rate
    does not move another kind's faults.
    """
    rng = random.Random(plan.seed * 0x9E3779B1 + request_id)
    out: list[tuple[int, FaultKind]] = []
    for kind, p in plan.rates:
        u = rng.random()
        step = rng.randrange(NOMINAL_STEPS)
        if kind.fails_acquire:
            as_outcome = rng.random() < 0.5
            which = rng.randrange(2)
            if as_outcome:
                step = -1 - which
        if u < p:
            out.append((step, kind))
    return out


def crash_events(plan: FaultPlan) -> Sequence[tuple[float, bool, WorkerCrash]]:
    """(time, is_restart, crash) for every crash and (if restarting) its restart, in plan order."""
    out: list[tuple[float, bool, WorkerCrash]] = []
    for c in plan.crashes:
        out.append((c.t_ms, False, c))
        if plan.restart_s is not None:
            out.append((c.t_ms + plan.restart_s * 1000.0, True, c))
    return out
