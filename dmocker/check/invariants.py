"""Safety invariants evaluated on the fly over a coordinator's input/output history.

The invariants come from the spec's ``invariants`` list (not from a second list kept here); this
module only gives each *kind* its meaning.  Two more properties are the checker's own, about the
API contract rather than the protocol, and are listed in :data:`BUILTIN_INVARIANTS` in the same
format (they could move into the spec).

The monitor is functional: a state is a hashable tuple and :meth:`Monitor.step` returns the next
state, so a state of the explored graph is (coordinator snapshot, environment, monitor state).

Atoms.  Each step (one input and the coordinator's reaction) yields atoms, input atoms first:

- ``fact:X`` — a fact X with our handoff id was delivered, not rejected, and it changed the
  coordinator or made it issue something (an ignored duplicate does not count twice, and a fact
  a coordinator silently drops does not count at all);
- ``answer:A:K`` — outcome K for an action A was taken (not rejected, and the state changed);
- ``fact_after_success:terminal`` — a terminal fact (Failed, TimedOut, Canceled) with our id
  delivered and not rejected while the last Complete issued was a SUCCESS and no terminal fact
  has been delivered since (the post-success reopen trigger);

then, for each issued action in order, ``issue:A``, and right after an issued Complete,
``complete:success`` or ``complete:canceled`` (the coordinator's ``completion`` after the step).

Kinds:

- ``precedes`` (first, then): every ``then`` atom comes after some ``first`` atom;
- ``precedes_all`` (first: list, then): after every atom of the list;
- ``at_most_between`` (atom, count, reset): at most ``count`` ``atom`` atoms between resets;
- ``after_only`` (after, allowed): once ``after`` was seen, only ``issue:`` atoms in
  ``allowed`` may follow;
- ``delay_finite_nonnegative`` (action): each issued ``action`` has a finite ``delay_ms`` >= 0;
- ``rejection_atomic``: a step that raised HandoffError left the state unchanged (same
  snapshot) — needs the explorer's before/after comparison, carried in the event;
- ``clean_at_cancel`` (sides: acquiring action -> cleaning actions): at ``complete:canceled``,
  every acquiring action issued so far has one of its cleaning actions answered Applied or Noop;
- ``responds`` (trigger, response): a step with the ``trigger`` atom issues ``response`` in
  the same step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Mapping, Sequence, cast

from dmocker.handoff import (
    Complete,
    Completion,
    HandoffErrorKind,
    HandoffOrder,
    IssuedAction,
    ProtocolSpec,
    StartTransfer,
)

from dmocker.handoff.monitor import InvariantMonitor, Observation

from dmocker.check.inputs import TERMINAL_FACT_NAMES, DeliverFact, DeliverOutcome, EnvInput

JsonParam = object


@dataclass(frozen=True, slots=True)
class InvariantDecl:
    """One declared invariant (from the spec or the built-ins)."""

    id: str
    kind: str
    doc: str
    params: Mapping[str, JsonParam]
    source: str  # "spec" or "checker"


@dataclass(frozen=True, slots=True)
class Violation:
    invariant: str
    message: str


@dataclass(frozen=True, slots=True)
class StepEvent:
    """One input and the coordinator's reaction, as the monitor sees it."""

    input: EnvInput
    handoff_id: str
    #: action name the environment knows for an outcome's id (None: an id never issued)
    answered_action: str | None
    issued: tuple[IssuedAction, ...]
    error: HandoffErrorKind | None
    #: a broken API contract: non-HandoffError exception, malformed return, bad ids ...
    api_problem: str | None
    changed: bool
    completion: Completion | None


BUILTIN_INVARIANTS: tuple[InvariantDecl, ...] = (
    InvariantDecl(
        "api_contract",
        "api_contract",
        "every call returns a list of IssuedAction for our handoff id with consecutive ids from 0, "
        "raises nothing but HandoffError, and is_complete/completion have their declared types",
        {},
        "checker",
    ),
    InvariantDecl(
        "each_action_once_per_epoch",
        "at_most_once_per_epoch",
        "no action kind is issued twice between two Completes (no duplicate StartTransfer, no "
        "re-reserve on a duplicate fact, no second cancel)",
        {},
        "checker",
    ),
)

KNOWN_KINDS = (
    "precedes",
    "precedes_all",
    "at_most_between",
    "after_only",
    "delay_finite_nonnegative",
    "rejection_atomic",
    "clean_at_cancel",
    "responds",
    "api_contract",
    "at_most_once_per_epoch",
)


class InvariantError(ValueError):
    """A declared invariant the checker cannot evaluate (unknown kind, bad parameter)."""


def spec_invariants(spec: ProtocolSpec, order: HandoffOrder) -> tuple[InvariantDecl, ...]:
    return tuple(
        InvariantDecl(inv.id, inv.kind, inv.doc, dict(inv.params), "spec") for inv in spec.invariants_for(order)
    )


def _s(params: Mapping[str, JsonParam], key: str, inv: str) -> str:
    v = params.get(key)
    if not isinstance(v, str):
        raise InvariantError(f"invariant {inv!r}: parameter {key!r} must be a string, got {v!r}")
    return v


def _strs(params: Mapping[str, JsonParam], key: str, inv: str) -> tuple[str, ...]:
    v = params.get(key)
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise InvariantError(f"invariant {inv!r}: parameter {key!r} must be a list of strings, got {v!r}")
    return tuple(str(x) for x in v)


class Monitor:
    """Evaluates a list of invariant declarations; states are hashable tuples.

    State layout: ``(success_phase, epoch_issued, per_invariant_state...)`` where
    ``success_phase`` drives the ``fact_after_success`` atom and ``epoch_issued`` (names
    issued since the last Complete) serves ``at_most_once_per_epoch``.
    """

    def __init__(self, decls: Sequence[InvariantDecl]) -> None:
        self.decls = tuple(decls)
        for d in self.decls:
            if d.kind not in KNOWN_KINDS:
                raise InvariantError(f"invariant {d.id!r}: unknown kind {d.kind!r} (known: {', '.join(KNOWN_KINDS)})")
        self._compiled = [self._compile(d) for d in self.decls]
        inits: list[Hashable] = []
        for d in self.decls:
            if d.kind == "precedes" or d.kind == "after_only":
                inits.append(False)
            elif d.kind == "precedes_all":
                inits.append(tuple(False for _ in _strs(d.params, "first", d.id)))
            elif d.kind == "at_most_between":
                inits.append(0)
            elif d.kind == "clean_at_cancel":
                inits.append(())
            else:
                inits.append(None)
        self.initial: tuple[Hashable, ...] = (False, (), *inits)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(d.id for d in self.decls)

    def _compile(self, d: InvariantDecl) -> tuple[object, ...]:
        p = d.params
        if d.kind == "precedes":
            return (_s(p, "first", d.id), _s(p, "then", d.id))
        if d.kind == "precedes_all":
            return (_strs(p, "first", d.id), _s(p, "then", d.id))
        if d.kind == "at_most_between":
            count = p.get("count")
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise InvariantError(f"invariant {d.id!r}: parameter 'count' must be an integer >= 0, got {count!r}")
            reset = p.get("reset")
            return (_s(p, "atom", d.id), count, reset if isinstance(reset, str) else None)
        if d.kind == "after_only":
            allowed = _strs(p, "allowed", d.id)
            return (_s(p, "after", d.id), frozenset(a.partition(":")[2] for a in allowed))
        if d.kind == "delay_finite_nonnegative":
            return (_s(p, "action", d.id),)
        if d.kind == "clean_at_cancel":
            sides = p.get("sides")
            if not isinstance(sides, dict):
                raise InvariantError(f"invariant {d.id!r}: parameter 'sides' must be an object")
            out: list[tuple[str, frozenset[str]]] = []
            for acq, cleaners in sides.items():
                if not isinstance(cleaners, list) or not all(isinstance(c, str) for c in cleaners):
                    raise InvariantError(f"invariant {d.id!r}: sides.{acq} must be a list of action names")
                out.append((str(acq), frozenset(str(c) for c in cleaners)))
            return tuple(out)
        if d.kind == "responds":
            return (_s(p, "trigger", d.id), _s(p, "response", d.id))
        return ()

    def step(self, state: tuple[Hashable, ...], ev: StepEvent) -> tuple[tuple[Hashable, ...], list[Violation]]:
        success_phase = bool(state[0])
        epoch_issued = state[1]
        assert isinstance(epoch_issued, tuple)
        inp = ev.input
        in_atoms: list[str] = []
        if ev.error is None and ev.api_problem is None:
            if isinstance(inp, DeliverFact) and inp.fact.handoff_id == ev.handoff_id:
                name = type(inp.fact).__name__
                if ev.changed or ev.issued:
                    in_atoms.append("fact:" + name)
                if name in TERMINAL_FACT_NAMES and success_phase:
                    in_atoms.append("fact_after_success:terminal")
                    success_phase = False
            elif isinstance(inp, DeliverOutcome) and ev.changed and ev.answered_action is not None:
                in_atoms.append(f"answer:{ev.answered_action}:{inp.outcome.kind.value}")
        out_atoms: list[str] = []
        issued_names: list[str] = []
        for ia in ev.issued:
            name = type(ia.action).__name__
            issued_names.append(name)
            out_atoms.append("issue:" + name)
            if isinstance(ia.action, Complete):
                if ev.completion is Completion.SUCCESS:
                    out_atoms.append("complete:success")
                    success_phase = True
                elif ev.completion is Completion.CANCELED:
                    out_atoms.append("complete:canceled")
                    success_phase = False
                else:
                    out_atoms.append("complete:none")
        atoms = in_atoms + out_atoms
        violations: list[Violation] = []
        new_states: list[Hashable] = []
        for d, c, st in zip(self.decls, self._compiled, state[2:]):
            new, msg = self._eval(d, c, st, atoms, in_atoms, out_atoms, issued_names, epoch_issued, ev)
            new_states.append(new)
            if msg is not None:
                violations.append(Violation(d.id, msg))
        # epoch bookkeeping after the evaluators (they see the names issued before this step)
        ep = list(epoch_issued)
        for name in issued_names:
            if name == "Complete":
                ep = []
            elif name not in ep:
                ep.append(name)
        return (success_phase, tuple(sorted(ep)), *new_states), violations

    def _eval(
        self,
        d: InvariantDecl,
        c: tuple[object, ...],
        st: Hashable,
        atoms: list[str],
        in_atoms: list[str],
        out_atoms: list[str],
        issued_names: list[str],
        epoch_issued: tuple[Hashable, ...],
        ev: StepEvent,
    ) -> tuple[Hashable, str | None]:
        kind = d.kind
        if kind == "precedes":
            first, then = c
            seen = bool(st)
            for a in atoms:
                if a == first:
                    seen = True
                elif a == then and not seen:
                    return seen, f"{then} without a prior {first}"
            return seen, None
        if kind == "precedes_all":
            firsts, then = c
            assert isinstance(firsts, tuple) and isinstance(st, tuple)
            flags = list(st)
            for a in atoms:
                if a in firsts:
                    flags[firsts.index(a)] = True
                elif a == then and not all(flags):
                    missing = [f for f, ok in zip(firsts, flags) if not ok]
                    return tuple(flags), f"{then} without a prior {', '.join(str(m) for m in missing)}"
            return tuple(flags), None
        if kind == "at_most_between":
            atom, count, reset = c
            assert isinstance(st, int) and isinstance(count, int)
            n = st
            for a in atoms:
                if a == reset:
                    n = 0
                elif a == atom:
                    n += 1
                    if n > count:
                        return n, f"{atom} {n} times" + (f" without an intervening {reset}" if reset else "")
            return n, None
        if kind == "after_only":
            after, allowed = c
            assert isinstance(allowed, frozenset)
            active = bool(st)
            for a in atoms:
                if a == after:
                    active = True
                elif active and a.startswith("issue:") and a[6:] not in allowed:
                    return active, f"{a} after {after}"
            return active, None
        if kind == "delay_finite_nonnegative":
            (action,) = c
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
        if kind == "rejection_atomic":
            if ev.error is not None and ev.changed:
                return st, f"input rejected with {ev.error.name} but the coordinator state changed"
            return st, None
        if kind == "clean_at_cancel":
            assert isinstance(st, tuple)
            acquired = set(str(x) for x in st if isinstance(x, str) and not x.startswith("clean:"))
            cleaned = set(str(x)[6:] for x in st if isinstance(x, str) and x.startswith("clean:"))
            sides = cast("tuple[tuple[str, frozenset[str]], ...]", c)
            for a in atoms:
                if a.startswith("issue:"):
                    name = a[6:]
                    if any(name == acq for acq, _ in sides):
                        acquired.add(name)
                elif a.startswith("answer:"):
                    _, action, outcome = a.split(":")
                    if outcome in ("Applied", "Noop"):
                        for acq, cleaners in sides:
                            if action in cleaners:
                                cleaned.add(acq)
                elif a == "complete:canceled":
                    dirty = sorted(x for x in acquired if x not in cleaned)
                    if dirty:
                        new = tuple(sorted(acquired)) + tuple(sorted("clean:" + x for x in cleaned))
                        return new, "Complete (CANCELED) while " + ", ".join(
                            f"{x} was issued but never cancelled or released" for x in dirty
                        )
            return tuple(sorted(acquired)) + tuple(sorted("clean:" + x for x in cleaned)), None
        if kind == "responds":
            trigger, response = c
            if trigger in in_atoms and response not in out_atoms:
                return st, f"{trigger} answered without {response}"
            return st, None
        if kind == "api_contract":
            if ev.api_problem is not None:
                return st, ev.api_problem
            return st, None
        if kind == "at_most_once_per_epoch":
            names = set(str(x) for x in epoch_issued)
            for name in issued_names:
                if name == "Complete":
                    names = set()
                elif name in names:
                    return st, f"{name} issued twice before the next Complete"
                else:
                    names.add(name)
            return st, None
        raise AssertionError(kind)  # pragma: no cover - rejected in __init__


class MonitorState:
    """A search state's monitor part: our tuple state plus, optionally, the shared monitor.

    Equality and hash go by the pair of keys, so states merge exactly when every future
    verdict agrees.
    """

    __slots__ = ("own", "shared", "_key")

    def __init__(self, own: tuple[Hashable, ...], shared: InvariantMonitor | None) -> None:
        self.own = own
        self.shared = shared
        self._key: Hashable = (own, None if shared is None else shared.key())

    @property
    def success_phase(self) -> bool:
        """Whether a terminal fact now is a post-success reopen trigger."""
        return bool(self.own[0])

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MonitorState) and self._key == other._key

    def __repr__(self) -> str:
        return f"MonitorState({self._key!r})"


class CombinedMonitor:
    """The spec invariants plus the checker's built-ins, with one of two evaluators.

    ``evaluator="checker"`` (default) evaluates the spec invariants with this module's
    :class:`Monitor`: its state keeps only what each invariant needs, so the search merges more
    states (605 per order for our coordinator, vs 1,888 with the shared monitor), and its atoms
    ignore foreign-id facts and facts that change nothing.  ``evaluator="shared"`` uses
    :class:`dmocker.handoff.monitor.InvariantMonitor`, the evaluator the Hypothesis kit uses,
    for the spec invariants (built-ins still come from :class:`Monitor`); the tests check the
    two agree on our coordinator and on which mutants they kill.
    """

    def __init__(self, spec: ProtocolSpec, order: HandoffOrder, evaluator: str = "checker") -> None:
        if evaluator not in EVALUATORS:
            raise InvariantError(f"unknown invariant evaluator {evaluator!r} (expected one of {', '.join(EVALUATORS)})")
        self.evaluator = evaluator
        spec_decls = spec_invariants(spec, order)
        self.decls: tuple[InvariantDecl, ...] = spec_decls + BUILTIN_INVARIANTS
        if evaluator == "shared":
            self._own = Monitor(BUILTIN_INVARIANTS)
            shared: InvariantMonitor | None = InvariantMonitor(spec, order)
        else:
            self._own = Monitor(self.decls)
            shared = None
        self.initial = MonitorState(self._own.initial, shared)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(d.id for d in self.decls)

    def step(self, state: MonitorState, ev: StepEvent) -> tuple[MonitorState, list[Violation]]:
        own, violations = self._own.step(state.own, ev)
        shared = state.shared
        if shared is not None:
            shared = shared.copy()
            found = shared.observe(_observation(ev))
            violations = [Violation(v.invariant, v.message) for v in found] + violations
        return MonitorState(own, shared), violations


EVALUATORS = ("shared", "checker")


def _observation(ev: StepEvent) -> Observation:
    inp = ev.input
    # A broken API contract is reported by api_contract; the shared monitor sees it as an error.
    error = ev.error
    if isinstance(inp, DeliverFact):
        return Observation("fact", fact=inp.fact, issued=ev.issued, error=error, changed=ev.changed,
                           completion=ev.completion)
    if isinstance(inp, DeliverOutcome):
        return Observation("outcome", action_id=inp.action_id, outcome=inp.outcome, issued=ev.issued,
                           error=error, changed=ev.changed, completion=ev.completion)
    return Observation("start", issued=ev.issued, error=error, changed=ev.changed, completion=ev.completion)


def build_monitor(spec: ProtocolSpec, order: HandoffOrder, evaluator: str = "checker") -> CombinedMonitor:
    """The monitor ``dmocker check`` uses: spec invariants + the checker's built-ins."""
    return CombinedMonitor(spec, order, evaluator)


__all__ = [
    "BUILTIN_INVARIANTS",
    "CombinedMonitor",
    "EVALUATORS",
    "InvariantDecl",
    "MonitorState",
    "InvariantError",
    "Monitor",
    "StepEvent",
    "Violation",
    "build_monitor",
    "spec_invariants",
]

