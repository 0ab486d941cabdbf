"""The checker's safety properties: the spec's invariants, plus the checker's ``api_contract``.

The spec's invariants (``spec/handoff.json`` → ``invariants``) are evaluated by the one shared
evaluator, :class:`dmocker.handoff.Monitor` — the same one the Hypothesis kit uses.  Its
state is part of every search state.

``api_contract`` stays here, out of the spec, because it is about the Python API rather than the
protocol: every call returns a list of :class:`IssuedAction` for our handoff id with consecutive
ids from 0, raises nothing but ``HandoffError``, and ``is_complete`` / ``completion`` have their
declared types.  Only a driver that makes the calls can judge that (:mod:`dmocker.check.env`
puts what it found in :attr:`StepEvent.api_problem`); it needs no state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable

from dmocker.handoff import Completion, HandoffErrorKind, IssuedAction
from dmocker.handoff import InvariantError, Monitor, MonitorState, StepEvent, Violation

from dmocker.check.inputs import DeliverFact, DeliverOutcome, EnvInput


@dataclass(frozen=True, slots=True)
class SafetyProperty:
    """One safety property as reported: its id, what it means, and who declares it."""

    id: str
    doc: str
    source: str  # "spec" or "checker"


API_CONTRACT = SafetyProperty(
    "api_contract",
    "every call returns a list of IssuedAction for our handoff id with consecutive ids from 0, "
    "raises nothing but HandoffError, and is_complete/completion have their declared types",
    "checker",
)


def safety_properties(monitor: Monitor) -> tuple[SafetyProperty, ...]:
    """Report order: the spec's invariants for the monitor's order, then ``api_contract``."""
    return tuple(SafetyProperty(inv.id, inv.doc, "spec") for inv in monitor.invariants) + (API_CONTRACT,)


def step_event(
    inp: EnvInput,
    handoff_id: Hashable,
    answered: str | None,
    issued: tuple[IssuedAction, ...],
    error: HandoffErrorKind | None,
    api_problem: str | None,
    changed: bool,
    completion: Completion | None,
) -> StepEvent:
    """The monitor's view of one environment input and the coordinator's reaction."""
    return StepEvent(
        handoff_id,
        inp.fact if isinstance(inp, DeliverFact) else None,
        inp.outcome if isinstance(inp, DeliverOutcome) else None,
        answered,
        issued,
        error,
        changed,
        completion,
        api_problem,
    )


def safety_step(monitor: Monitor, state: MonitorState, ev: StepEvent) -> tuple[MonitorState, list[Violation]]:
    """``monitor.step`` plus ``api_contract`` (reported after the spec's invariants)."""
    state, violations = monitor.step(state, ev)
    if ev.api_problem is not None:
        violations.append(Violation(API_CONTRACT.id, ev.api_problem))
    return state, violations


__all__ = [
    "API_CONTRACT",
    "InvariantError",
    "Monitor",
    "MonitorState",
    "SafetyProperty",
    "StepEvent",
    "Violation",
    "safety_properties",
    "safety_step",
    "step_event",
]
