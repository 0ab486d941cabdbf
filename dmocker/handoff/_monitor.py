"""The one evaluator of the spec's safety invariants (``spec/handoff.json`` → ``invariants``).

Both drivers use it: the Hypothesis kit (:mod:`dmocker.testing`) after every rule, and the
exhaustive checker (:mod:`dmocker.check`) on every transition it generates.  The invariants are
read from the spec (this module keeps no list of its own); it only gives each *kind* its meaning.

It is functional: a monitor state is a small hashable tuple and :meth:`Monitor.step` returns the
next one, so the checker can make it part of a search state.  The state keeps only what some
future verdict depends on (one flag per ``precedes``, a count per ``at_most_between``, ...),
which lets the search merge every pair of states whose futures agree.

The coordinator is a black box: a :class:`StepEvent` is one input (``start()``, a fact, an
outcome) and what came of it.  Each step yields *atoms*, input atoms first:

- ``fact:X`` — a fact X **with our handoff id** was delivered, not rejected, and it changed the
  coordinator or made it issue something (a duplicate the coordinator ignores does not count
  twice, and a fact with a foreign id never counts);
- ``answer:A:K`` — outcome K for an issued action A was taken (not rejected, and the state
  changed);
- ``fact_after_success:terminal`` — a terminal fact (the spec's facts with ``terminal: true``)
  with our id, not rejected, while the last Complete issued was a SUCCESS and no terminal fact
  has been delivered since (the post-success reopen trigger);

then, per issued action in order, ``issue:A``, and right after an issued Complete
``complete:success`` or ``complete:canceled`` (the coordinator's ``completion`` after the step;
``complete:none`` if it has none — an API fault the driver reports on its own).

Kinds (parameter shapes in :data:`dmocker.handoff._spec.INVARIANT_PARAMS`):

- ``precedes`` (first, then): every ``then`` atom comes after some ``first`` atom;
- ``precedes_all`` (first: list, then): after every atom of the list;
- ``at_most_between`` (atom, count, reset?): at most ``count`` ``atom`` atoms between resets;
- ``once_between`` (atoms: list, reset): each atom of the list at most once between resets;
- ``after_only`` (after, allowed: list): once ``after`` was seen, only ``issue:`` atoms in
  ``allowed`` may follow;
- ``delay_finite_nonnegative`` (action): each issued ``action`` has a finite ``delay_ms`` >= 0;
- ``rejection_atomic``: a step that raised HandoffError left the coordinator unchanged (the
  driver compares snapshots and says so in :attr:`StepEvent.changed`);
- ``clean_at_cancel`` (sides: acquiring action -> cleaning actions): at ``complete:canceled``,
  every acquiring action issued so far has one of its cleaning actions answered Applied or Noop;
- ``responds`` (trigger, response): a step with the ``trigger`` atom issues ``response`` in the
  same step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Hashable, Mapping, Sequence, TypeAlias

from dmocker.handoff._spec import Invariant, ProtocolSpec, invariant_shape_problems
from dmocker.handoff._spec_load import load_spec
from dmocker.handoff._types import (
    Complete,
    Completion,
    Fact,
    HandoffErrorKind,
    HandoffOrder,
    IssuedAction,
    Outcome,
)

__all__ = [
    "InvariantError",
    "Monitor",
    "MonitorState",
    "StepEvent",
    "Violation",
]

#: A monitor state: ``(reopen_armed, one entry per invariant...)``; hashable, compared by value.
MonitorState: TypeAlias = tuple[Hashable, ...]

#: Terminal facts when a monitor is built without a spec (those of ``spec/handoff.json``).


@dataclass(frozen=True, slots=True)
class StepEvent:
    """One input delivered to a coordinator and its reaction, as the monitor sees it.

    The input is ``start()`` when neither ``fact`` nor ``outcome`` is set.  ``answered_action``
    is the name of the action the outcome's id was issued for (None: an id never issued).
    ``changed`` says whether the coordinator's snapshot differs after the input.
    ``api_problem`` is set by a driver that found the call broke the API contract (a stray
    exception, a malformed return); such a step contributes no input atoms.
    """

    handoff_id: Hashable
    fact: Fact | None = None
    outcome: Outcome | None = None
    answered_action: str | None = None
    issued: tuple[IssuedAction, ...] = ()
    error: HandoffErrorKind | None = None
    changed: bool = False
    completion: Completion | None = None
    api_problem: str | None = None


@dataclass(frozen=True, slots=True)
class Violation:
    """An invariant (by its spec id) broken at one step, and why."""

    invariant: str
    message: str


class InvariantError(ValueError):
    """An invariant the monitor cannot evaluate (unknown kind, malformed parameter)."""


# A compiled invariant: (state, atoms, number of input atoms, event) -> (next state, message).
_Stepper: TypeAlias = Callable[[Hashable, Sequence[str], int, StepEvent], "tuple[Hashable, str | None]"]


def _str(params: Mapping[str, object], key: str) -> str:
    return str(params[key])


def _strs(params: Mapping[str, object], key: str) -> tuple[str, ...]:
    value = params.get(key)
    assert isinstance(value, list)
    return tuple(str(v) for v in value)


def _precedes(p: Mapping[str, object]) -> tuple[Hashable, _Stepper]:
    first, then = _str(p, "first"), _str(p, "then")

    def step(st: Hashable, atoms: Sequence[str], n_in: int, ev: StepEvent) -> tuple[Hashable, str | None]:
        seen = bool(st)
        msg = None
        for a in atoms:
            if a == first:
                seen = True
            elif a == then and not seen and msg is None:
                msg = f"{then} without a prior {first}"
        return seen, msg

    return False, step


def _precedes_all(p: Mapping[str, object]) -> tuple[Hashable, _Stepper]:
    firsts, then = _strs(p, "first"), _str(p, "then")

    def step(st: Hashable, atoms: Sequence[str], n_in: int, ev: StepEvent) -> tuple[Hashable, str | None]:
        assert isinstance(st, tuple)
        flags = list(st)
        msg = None
        for a in atoms:
            if a in firsts:
                flags[firsts.index(a)] = True
            elif a == then and not all(flags) and msg is None:
                missing = [f for f, ok in zip(firsts, flags) if not ok]
                msg = f"{then} without a prior {', '.join(missing)}"
        return tuple(flags), msg

    return tuple(False for _ in firsts), step


def _at_most_between(p: Mapping[str, object]) -> tuple[Hashable, _Stepper]:
    atom = _str(p, "atom")
    count = p["count"]
    assert isinstance(count, int)
    reset = str(p["reset"]) if p.get("reset") is not None else None
    tail = f" without an intervening {reset}" if reset else ""

    def step(st: Hashable, atoms: Sequence[str], n_in: int, ev: StepEvent) -> tuple[Hashable, str | None]:
        assert isinstance(st, int)
        n = st
        msg = None
        for a in atoms:
            if a == reset:
                n = 0
            elif a == atom:
                n += 1
                if n > count and msg is None:
                    msg = f"{atom} {n} times{tail}"
        # past the limit the exact count no longer matters: keep the state space finite
        return min(n, count + 1), msg

    return 0, step


def _once_between(p: Mapping[str, object]) -> tuple[Hashable, _Stepper]:
    watched, reset = _strs(p, "atoms"), _str(p, "reset")

    def step(st: Hashable, atoms: Sequence[str], n_in: int, ev: StepEvent) -> tuple[Hashable, str | None]:
        assert isinstance(st, tuple)
        flags = list(st)
        msg = None
        for a in atoms:
            if a == reset:
                flags = [False] * len(watched)
            elif a in watched:
                i = watched.index(a)
                if flags[i] and msg is None:
                    msg = f"{a} twice without an intervening {reset}"
                flags[i] = True
        return tuple(flags), msg

    return tuple(False for _ in watched), step


def _after_only(p: Mapping[str, object]) -> tuple[Hashable, _Stepper]:
    after, allowed = _str(p, "after"), frozenset(_strs(p, "allowed"))

    def step(st: Hashable, atoms: Sequence[str], n_in: int, ev: StepEvent) -> tuple[Hashable, str | None]:
        active = bool(st)
        msg = None
        for a in atoms:
            if a == after:
                active = True
            elif active and a.startswith("issue:") and a not in allowed and msg is None:
                msg = f"{a} after {after}"
        return active, msg

    return False, step


def _delay_finite_nonnegative(p: Mapping[str, object]) -> tuple[Hashable, _Stepper]:
    action = _str(p, "action")

    def step(st: Hashable, atoms: Sequence[str], n_in: int, ev: StepEvent) -> tuple[Hashable, str | None]:
        for ia in ev.issued:
            if type(ia.action).__name__ == action:
                delay = getattr(ia.action, "delay_ms", None)
                if (
                    isinstance(delay, bool)
                    or not isinstance(delay, (int, float))
                    or not math.isfinite(delay)
                    or delay < 0
                ):
                    return st, f"{action} #{ia.id} with delay_ms={delay!r}"
        return st, None

    return None, step


def _rejection_atomic(p: Mapping[str, object]) -> tuple[Hashable, _Stepper]:
    def step(st: Hashable, atoms: Sequence[str], n_in: int, ev: StepEvent) -> tuple[Hashable, str | None]:
        if ev.error is not None and ev.changed:
            return st, f"input rejected with {ev.error.name} but the coordinator state changed"
        return st, None

    return None, step


def _clean_at_cancel(p: Mapping[str, object]) -> tuple[Hashable, _Stepper]:
    raw = p["sides"]
    assert isinstance(raw, Mapping)
    sides = tuple((str(acq), frozenset(str(c) for c in cleaners)) for acq, cleaners in raw.items())
    acquiring = {"issue:" + acq: acq for acq, _ in sides}

    def step(st: Hashable, atoms: Sequence[str], n_in: int, ev: StepEvent) -> tuple[Hashable, str | None]:
        assert isinstance(st, tuple)
        acquired_t, cleaned_t = st
        acquired, cleaned = set(acquired_t), set(cleaned_t)
        msg = None
        for a in atoms:
            if a in acquiring:
                acquired.add(acquiring[a])
            elif a.startswith("answer:"):
                _, action, outcome = a.split(":")
                if outcome in ("Applied", "Noop"):
                    cleaned.update(acq for acq, cleaners in sides if action in cleaners)
            elif a == "complete:canceled" and msg is None:
                dirty = sorted(x for x in acquired if x not in cleaned)
                if dirty:
                    msg = "Complete (CANCELED) while " + ", ".join(
                        f"{x} was issued but never cancelled or released" for x in dirty
                    )
        return (tuple(sorted(acquired)), tuple(sorted(cleaned))), msg

    return ((), ()), step


def _responds(p: Mapping[str, object]) -> tuple[Hashable, _Stepper]:
    trigger, response = _str(p, "trigger"), _str(p, "response")

    def step(st: Hashable, atoms: Sequence[str], n_in: int, ev: StepEvent) -> tuple[Hashable, str | None]:
        if trigger in atoms[:n_in] and response not in atoms[n_in:]:
            return st, f"{trigger} answered without {response}"
        return st, None

    return None, step


_KINDS: dict[str, Callable[[Mapping[str, object]], tuple[Hashable, _Stepper]]] = {
    "precedes": _precedes,
    "precedes_all": _precedes_all,
    "at_most_between": _at_most_between,
    "once_between": _once_between,
    "after_only": _after_only,
    "delay_finite_nonnegative": _delay_finite_nonnegative,
    "rejection_atomic": _rejection_atomic,
    "clean_at_cancel": _clean_at_cancel,
    "responds": _responds,
}


class Monitor:
    """Evaluates a list of invariants over a coordinator's history; states are hashable tuples.

    Build it from a spec with :meth:`for_order` (the usual way), or from any list of
    :class:`~dmocker.handoff._spec.Invariant` (tests, experiments).
    """

    def __init__(self, invariants: Sequence[Invariant], terminal_facts: Sequence[str] | None = None) -> None:
        self.invariants: tuple[Invariant, ...] = tuple(invariants)
        #: the spec's terminal facts, in spec order (default: those of the loaded spec)
        self.terminal_facts: tuple[str, ...] = tuple(terminal_facts) if terminal_facts is not None else load_spec().terminal_facts
        self._terminal: frozenset[str] = frozenset(self.terminal_facts)
        steppers: list[_Stepper] = []
        inits: list[Hashable] = []
        for inv in self.invariants:
            problems = invariant_shape_problems(inv.kind, inv.params)
            if problems:
                raise InvariantError(f"invariant {inv.id!r}: {'; '.join(problems)}")
            init, stepper = _KINDS[inv.kind](inv.params)
            inits.append(init)
            steppers.append(stepper)
        self._steppers = tuple(steppers)
        self.initial: MonitorState = (False, *inits)

    @classmethod
    def for_order(cls, spec: ProtocolSpec, order: HandoffOrder) -> Monitor:
        """The spec's invariants that apply to ``order``, with the spec's terminal facts."""
        return cls(spec.invariants_for(order), spec.terminal_facts)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(inv.id for inv in self.invariants)

    @staticmethod
    def reopen_armed(state: MonitorState) -> bool:
        """Whether a terminal fact with our id now yields ``fact_after_success:terminal``."""
        return bool(state[0])

    def atoms(self, state: MonitorState, ev: StepEvent) -> tuple[list[str], int, bool]:
        """(the step's atoms, how many of them are input atoms, reopen_armed afterwards)."""
        armed = bool(state[0])
        atoms: list[str] = []
        if ev.error is None and ev.api_problem is None:
            fact = ev.fact
            if fact is not None:
                if fact.handoff_id == ev.handoff_id:
                    name = type(fact).__name__
                    if ev.changed or ev.issued:
                        atoms.append("fact:" + name)
                    if armed and name in self._terminal:
                        atoms.append("fact_after_success:terminal")
                        armed = False
            elif ev.outcome is not None and ev.changed and ev.answered_action is not None:
                atoms.append(f"answer:{ev.answered_action}:{ev.outcome.kind.value}")
        n_in = len(atoms)
        for ia in ev.issued:
            atoms.append("issue:" + type(ia.action).__name__)
            if isinstance(ia.action, Complete):
                if ev.completion is Completion.SUCCESS:
                    atoms.append("complete:success")
                    armed = True
                elif ev.completion is Completion.CANCELED:
                    atoms.append("complete:canceled")
                    armed = False
                else:
                    atoms.append("complete:none")
        return atoms, n_in, armed

    def step(self, state: MonitorState, ev: StepEvent) -> tuple[MonitorState, list[Violation]]:
        """The state after ``ev`` and the invariants it violates (in spec order)."""
        atoms, n_in, armed = self.atoms(state, ev)
        violations: list[Violation] = []
        new: list[Hashable] = [armed]
        for inv, stepper, st in zip(self.invariants, self._steppers, state[1:]):
            st2, msg = stepper(st, atoms, n_in, ev)
            new.append(st2)
            if msg is not None:
                violations.append(Violation(inv.id, msg))
        return tuple(new), violations
