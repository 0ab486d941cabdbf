"""Hypothesis kit for the workers' own clocks: random move sequences through the coordinator
composed with the spec's worker machines, every property judged, failures shrunk.

``find_clock_violation(workers, configuration, order)`` searches sequences of the workers' moves
(progress, timers that may fire, faults, the client's cancel), each step choosing among the
moves enabled there; after every move it judges the transition properties and, at the state
reached, ``held_kv_freed_within_bound`` and ``fair_timers_liveness``.  Hypothesis shrinks a
failing sequence to a minimal one.  The same :class:`dmocker.check.clocks.ClockSystem` drives
``dmocker check --clocks``, so the two cannot disagree about what a property means.

Usage::

    from dmocker.handoff import HandoffOrder, load_workers
    from dmocker.testing.clocks import find_clock_violation
    w = load_workers()
    assert find_clock_violation(w, w.configurations["dmocker"], HandoffOrder.SOURCE_FIRST) is None
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from dmocker.check.clocks import ClockSystem, ClockViolation
from dmocker.check.target import Target
from dmocker.handoff import Configuration, HandoffOrder, MoveKind, WorkersSpec

__all__ = ["ClockFinding", "find_clock_violation", "run_choices"]

_MAX_MOVES = 10
_KIND_OF_CHOICE = [MoveKind.PROGRESS] * 3 + [MoveKind.TIMER] * 2 + [MoveKind.FAULT] * 2 + [MoveKind.CLIENT]


@dataclass(frozen=True, slots=True)
class ClockFinding:
    moves: tuple[str, ...]  # the move ids, after start()
    violations: tuple[ClockViolation, ...]


def run_choices(system: ClockSystem, choices: list[int]) -> ClockFinding:
    """Play ``choices``: each picks a kind of move (progress, a timer, a fault, rarely the
    client's cancel, which ends most runs at once) and then one of the enabled moves of that
    kind, modulo their number.  Stops at the first step that breaks something; the fair run is
    judged from the last state reached."""
    obj, ws, violations, _ = system.initial()
    moves: list[str] = []
    found = list(violations) + system.state_violations(obj, ws, fair=False)
    for c in choices:
        if found:
            break
        enabled = system.enabled(ws)
        if not enabled:
            break
        wanted = _KIND_OF_CHOICE[c]
        pool = [r for r in enabled if r.kind is wanted] or [r for r in enabled if r.kind is not MoveKind.CLIENT] or enabled
        move = pool[(c * 7 + len(moves)) % len(pool)]
        moves.append(move.name)
        ws, vs, _ = system.apply(obj, ws, move)
        found.extend(vs)
        found.extend(system.state_violations(obj, ws, fair=False))
    if not found:
        found.extend(system.state_violations(obj, ws))
    return ClockFinding(tuple(moves), tuple(found))


def find_clock_violation(workers: WorkersSpec, configuration: Configuration, order: HandoffOrder, *,
                         target: Target | None = None, max_examples: int = 3000, derandomize: bool = True) -> ClockFinding | None:
    """A minimal move sequence that breaks a property, or None when Hypothesis finds none."""
    system = ClockSystem(workers, configuration, order, target)
    try:
        choices = find(
            st.lists(st.integers(0, len(_KIND_OF_CHOICE) - 1), max_size=_MAX_MOVES),
            lambda cs: bool(run_choices(system, cs).violations),
            settings=settings(max_examples=max_examples, database=None, derandomize=derandomize,
                              suppress_health_check=list(HealthCheck), phases=[Phase.generate, Phase.shrink]),
        )
    except NoSuchExample:
        return None
    return run_choices(system, choices)
