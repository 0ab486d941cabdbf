"""Any coordinator in the replay's loop: load a user's class, drive it through the public API only.

Why an adapter: the runtime talks to coordinators through a few fast paths of our own
:class:`~dmocker.handoff.HandoffCoordinator` (its table state for the event log, the lean
``on_outcome_kind``).  A user's class has only the public contract ``dmocker check`` accepts
(``start``, ``on_fact``, ``on_action_outcome``, ``is_complete``, ``completion``); the adapter
gives the runtime what it reads and, at every step, holds the user's coordinator to the
protocol:

* what it returns must be a list of issued actions for this handoff, with fresh ids;
* each step goes through the spec's invariant monitor (:class:`dmocker.handoff.Monitor`), so an
  action the protocol forbids is caught at the step it is issued;
* raising, rejecting an input the cluster legitimately produced, or a Complete without a
  completion is a fault too.

A fault stops the run with :class:`CoordinatorFault` naming the request, the step (1-based
count of inputs delivered to that request's coordinator) and the input.  A coordinator that
never completes is found at the end (a dead end, or the end-of-run checks).

The event log is derived as for our coordinator, from the spec's table, by following the
inputs the runtime delivered (their names), not the user's internals: it records what the
cluster did, and conforms whenever the user's coordinator behaves as the protocol says.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Protocol, cast, get_args

from dmocker.check.target import DEFAULT_TARGET, Target, TargetError, load_target, target_from_factory
from dmocker.handoff import (
    Action,
    Complete,
    Completion,
    Fact,
    HandoffCoordinator,
    HandoffError,
    HandoffOrder,
    STEP_TAG,
    IssuedAction,
    Monitor,
    MonitorState,
    Outcome,
    OutcomeKind,
    ProtocolSpec,
    Step,
    StepEvent,
    load_spec,
)

from .errors import ReplayInvariantError
from .fault_driver import StepHook

_ACTION_CLASSES: tuple[type, ...] = get_args(Action)

__all__ = ["CoordinatorFault", "ForeignCoordinator", "ForeignFactory", "resolve_coordinator"]


#: Told every step of a user's coordinator: (request id, step, input, actions issued).
StepRecorder = Callable[[int, int, str, list[IssuedAction]], None]


class CoordinatorFault(ReplayInvariantError):
    """A user's coordinator broke the contract at one step of one request."""

    def __init__(self, request_id: int, step: int, what_input: str, problem: str, invariant: str | None = None) -> None:
        self.request_id = request_id
        self.step = step
        self.input = what_input
        self.problem = problem
        self.invariant = invariant
        tag = f" [{invariant}]" if invariant else ""
        super().__init__(f"coordinator fault{tag}: request {request_id}, step {step} ({what_input}): {problem}")


class _UserCoordinator(Protocol):
    def start(self) -> object: ...

    def on_fact(self, fact: Fact) -> object: ...

    def on_action_outcome(self, action_id: int, outcome: Outcome) -> object: ...

    @property
    def is_complete(self) -> object: ...

    @property
    def completion(self) -> object: ...


class ForeignCoordinator(HandoffCoordinator):
    """A user's coordinator, seen by the runtime as a HandoffCoordinator.

    The base class's state is the spec-table state reached by the inputs delivered so far (the
    event log reads it); every decision comes from the user's object.
    """

    __slots__ = ("_user", "_rid", "_monitor", "_mstate", "_snap", "_names", "_seen_ids", "_steps", "_hook", "_recorder")

    def __init__(
        self,
        user: _UserCoordinator,
        request_id: int,
        order: HandoffOrder,
        monitor: Monitor,
        snapshot: Callable[[object], Hashable],
        *,
        spec: ProtocolSpec | None = None,
        recorder: StepRecorder | None = None,
    ) -> None:
        super().__init__(request_id, order, spec=spec)
        self._user = user
        self._rid = request_id
        self._monitor = monitor
        self._mstate: MonitorState = monitor.initial
        self._snap = snapshot
        self._names: dict[int, str] = {}
        self._seen_ids: set[int] = set()
        self._steps = 0
        self._hook: StepHook | None = None
        self._recorder = recorder

    def set_step_hook(self, hook: StepHook) -> None:
        self._hook = hook

    @property
    def steps(self) -> int:
        """Inputs delivered so far (the step a fault or a stuck coordinator is reported at)."""
        return self._steps

    # --- what the runtime reads ------------------------------------------------------------------

    @property
    def is_complete(self) -> bool:
        return bool(self._user.is_complete)

    @property
    def completion(self) -> Completion | None:
        value = self._user.completion
        return value if isinstance(value, Completion) else None

    # --- inputs ------------------------------------------------------------------------------------

    def start(self) -> list[IssuedAction]:
        return self._drive("start()", "start", self._user.start, None, None, None)

    def on_fact(self, fact: Fact) -> list[IssuedAction]:
        name = type(fact).__name__
        return self._drive(f"fact {name}", name, lambda: self._user.on_fact(fact), fact, None, None)

    def on_action_outcome(self, action_id: int, outcome: Outcome) -> list[IssuedAction]:
        answered = self._names.get(action_id)
        label = f"outcome {outcome.kind.value} for {answered or '?'} #{action_id}"
        event = f"{answered}.{outcome.kind.value}" if answered is not None else ""
        return self._drive(
            label, event, lambda: self._user.on_action_outcome(action_id, outcome), None, outcome, answered
        )

    def on_outcome_kind(self, action_id: int, kind: OutcomeKind) -> list[IssuedAction]:
        return self.on_action_outcome(action_id, Outcome(kind))

    # --- the step -------------------------------------------------------------------------------

    def _fault(self, label: str, problem: str, invariant: str | None = None) -> CoordinatorFault:
        if self._recorder is not None:
            self._recorder(self._rid, self._steps, label, [])
        return CoordinatorFault(self._rid, self._steps, label, problem, invariant)

    def _drive(
        self,
        label: str,
        event: str,
        call: Callable[[], object],
        fact: Fact | None,
        outcome: Outcome | None,
        answered: str | None,
    ) -> list[IssuedAction]:
        self._steps += 1
        before = self._snap(self._user)
        try:
            raw = call()
        except HandoffError as exc:
            raise self._fault(label, f"rejected an input the cluster produced: {exc.kind.name}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - user code fails in every shape; report it
            raise self._fault(label, f"raised {type(exc).__name__}: {exc}") from None
        issued = self._check_issued(label, raw)
        completion = self.completion
        for ia in issued:
            if isinstance(ia.action, Complete) and completion is None:
                raise self._fault(label, "issued Complete but its completion is None")
        changed = bool(issued) or self._snap(self._user) != before
        ev = StepEvent(self._rid, fact, outcome, answered, tuple(issued), None, changed, completion)
        self._mstate, violations = self._monitor.step(self._mstate, ev)
        if violations:
            v = violations[0]
            raise self._fault(label, v.message, v.invariant)
        self._follow(event)
        if self._recorder is not None:
            self._recorder(self._rid, self._steps, label, issued)
        if self._hook is not None:
            self._hook(self._rid, self._steps, completion is Completion.SUCCESS)
        return issued

    def _check_issued(self, label: str, raw: object) -> list[IssuedAction]:
        if not isinstance(raw, (list, tuple)):
            raise self._fault(label, f"returned {type(raw).__name__}, not a list of IssuedAction")
        out: list[IssuedAction] = []
        for ia in raw:
            if not isinstance(ia, IssuedAction) or not isinstance(ia.action, _ACTION_CLASSES):
                raise self._fault(label, f"returned {ia!r}, not an IssuedAction")
            if isinstance(ia.id, bool) or not isinstance(ia.id, int) or ia.id in self._seen_ids:
                raise self._fault(label, f"issued {type(ia.action).__name__} with a reused or invalid id {ia.id!r}")
            if not (ia.action.handoff_id == self._rid):
                raise self._fault(label, f"issued {type(ia.action).__name__} for handoff {ia.action.handoff_id!r}")
            self._seen_ids.add(ia.id)
            self._names[ia.id] = type(ia.action).__name__
            out.append(ia)
        return out

    def _follow(self, event: str) -> None:
        """Advance the spec-table state by the input's name (the event log's view)."""
        table = self.table
        try:
            index = table.event_index(event)
        except (KeyError, ValueError):
            return
        entry = table.rows[self.state][index]
        if entry.tag == STEP_TAG:
            assert isinstance(entry, Step)
            self._state = entry.next


class ForeignFactory:
    """The runtime's coordinator factory for a user's class (one monitor per order, shared).

    ``recorder`` (optional) is told every step: (request id, step, input, issued actions).
    """

    def __init__(self, target: Target, spec: ProtocolSpec | None = None, recorder: StepRecorder | None = None) -> None:
        self.target = target
        self.recorder = recorder
        #: the run's clock (set when the run starts), for recorders that want times
        self.clock: Callable[[], float] | None = None
        self._spec = spec if spec is not None else load_spec()
        self._monitors = {o: Monitor.for_order(self._spec, o) for o in HandoffOrder}
        self._snapshot = cast(Callable[[object], Hashable], target.snapshot_function())

    @property
    def name(self) -> str:
        return self.target.name

    def __call__(
        self,
        request_id: int,
        order: HandoffOrder,
        *,
        fallback_transfer_delay_ms: float = 0.0,
        spec: ProtocolSpec | None = None,
    ) -> HandoffCoordinator:
        try:
            user = self.target.factory(request_id, order, fallback_transfer_delay_ms=fallback_transfer_delay_ms)
        except Exception as exc:  # noqa: BLE001
            raise CoordinatorFault(request_id, 0, "construction", f"raised {type(exc).__name__}: {exc}") from None
        return ForeignCoordinator(
            cast(_UserCoordinator, user), request_id, order, self._monitors[order], self._snapshot, spec=spec,
            recorder=self.recorder,
        )


def resolve_coordinator(coordinator: str | Callable[..., object] | None) -> ForeignFactory | None:
    """``MODULE:CLASS`` or a factory -> the adapter factory; None (or ours) -> None: the fast path.

    Raises ValueError (the CLI's exit 2) for a class that cannot be loaded or lacks the API.
    """
    if coordinator is None or coordinator is HandoffCoordinator or coordinator == DEFAULT_TARGET:
        return None
    if isinstance(coordinator, ForeignFactory):
        return coordinator
    try:
        if isinstance(coordinator, str):
            target = load_target(coordinator)
        elif callable(coordinator):
            target = target_from_factory(coordinator)
        else:
            raise TargetError(f"coordinator must be 'module:Class' or a factory, got {coordinator!r}")
    except TargetError as exc:
        raise ValueError(f"coordinator: {exc}") from None
    return ForeignFactory(target)
