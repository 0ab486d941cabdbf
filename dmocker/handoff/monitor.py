"""Evaluate the spec's safety invariants over what a coordinator was told and what it issued.

The monitor sees a coordinator as a black box: each :class:`Observation` is one input (start,
a fact, an outcome), the actions it returned or the error it raised, whether its snapshot
changed, and its completion afterwards.  The invariants themselves are read from
``spec/handoff.json`` (``invariants``); this module only knows how to evaluate each *kind*.
Shared by the Hypothesis kit (:mod:`dmocker.testing`) and the exhaustive checker.

Atoms: ``fact:X`` (fact X accepted), ``answer:A:K`` (outcome K for an A accepted),
``issue:A`` (A issued), ``complete:success`` / ``complete:canceled`` (Complete issued, by the
completion that followed), ``fact_after_success:terminal`` (a terminal fact accepted after a
successful Complete, before any reopen).  An input's own atoms count as happening before the
actions it returned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Hashable, Literal

from dmocker.handoff.spec import Invariant, ProtocolSpec
from dmocker.handoff.types import (
    Completion,
    Fact,
    HandoffErrorKind,
    HandoffOrder,
    IssuedAction,
    Outcome,
    StartTransfer,
)

InputKind = Literal["start", "fact", "outcome"]


@dataclass(frozen=True, slots=True)
class Observation:
    """One input delivered to a coordinator, and what came of it."""

    input: InputKind
    fact: Fact | None = None
    action_id: int | None = None
    outcome: Outcome | None = None
    issued: tuple[IssuedAction, ...] = ()
    error: HandoffErrorKind | None = None
    changed: bool | None = None
    completion: Completion | None = None


@dataclass(frozen=True, slots=True)
class Violation:
    invariant: str
    message: str


@dataclass(slots=True)
class _History:
    seen: set[str] = field(default_factory=set)
    actions: dict[int, str] = field(default_factory=dict)
    completes_in_epoch: int = 0
    success: bool = False
    reopened: bool = False
    canceled: bool = False


_TERMINAL = ("Failed", "TimedOut", "Canceled")


class InvariantMonitor:
    """Checks one coordinator's history against the invariants of its order."""

    def __init__(self, spec: ProtocolSpec, order: HandoffOrder) -> None:
        self.invariants: tuple[Invariant, ...] = spec.invariants_for(order)
        self._h = _History()

    def copy(self) -> InvariantMonitor:
        other = InvariantMonitor.__new__(InvariantMonitor)
        other.invariants = self.invariants
        h = self._h
        other._h = _History(set(h.seen), dict(h.actions), h.completes_in_epoch, h.success, h.reopened, h.canceled)
        return other

    def key(self) -> Hashable:
        """What decides future verdicts; action ids are relative to the newest one."""
        h = self._h
        top = max(h.actions, default=-1)
        actions = tuple(sorted((top - aid, name) for aid, name in h.actions.items()))
        return (tuple(sorted(h.seen)), actions, h.completes_in_epoch, h.success, h.reopened, h.canceled)

    def action_name(self, action_id: int) -> str | None:
        return self._h.actions.get(action_id)

    def observe(self, obs: Observation) -> list[Violation]:
        h = self._h
        violations: list[Violation] = []
        before_atoms: list[str] = []
        if obs.error is None:
            if obs.input == "fact" and obs.fact is not None:
                name = type(obs.fact).__name__
                before_atoms.append(f"fact:{name}")
                if name in _TERMINAL and h.success and not h.reopened:
                    before_atoms.append("fact_after_success:terminal")
            elif obs.input == "outcome" and obs.action_id is not None and obs.outcome is not None:
                action = h.actions.get(obs.action_id)
                if action is not None:
                    before_atoms.append(f"answer:{action}:{obs.outcome.kind.value}")
        for inv in self.invariants:
            if inv.kind == "rejection_atomic" and obs.error is not None and obs.changed:
                violations.append(Violation(inv.id, f"input rejected ({obs.error.value}) but the coordinator changed"))
        h.seen.update(before_atoms)
        issued_names = [type(a.action).__name__ for a in obs.issued]
        for inv in self.invariants:
            violations.extend(self._check_input(inv, before_atoms, issued_names))
        if "fact_after_success:terminal" in before_atoms:
            h.reopened = True
            h.completes_in_epoch = 0
        for issued in obs.issued:
            name = type(issued.action).__name__
            violations.extend(self._check_issue(issued, name, obs))
            h.actions[issued.id] = name
            h.seen.add(f"issue:{name}")
            if name == "Complete":
                h.completes_in_epoch += 1
                if obs.completion is Completion.SUCCESS:
                    h.success = True
                    h.seen.add("complete:success")
                else:
                    h.canceled = True
                    h.seen.add("complete:canceled")
        return violations

    def _check_input(self, inv: Invariant, atoms: list[str], issued: list[str]) -> list[Violation]:
        if inv.kind == "responds" and str(inv.params.get("trigger")) in atoms:
            response = str(inv.params.get("response"))
            if response.partition(":")[2] not in issued:
                return [Violation(inv.id, f"{inv.params.get('trigger')} was not answered with {response}")]
        return []

    def _check_issue(self, issued: IssuedAction, name: str, obs: Observation) -> list[Violation]:
        h = self._h
        out: list[Violation] = []
        atom = f"issue:{name}"
        for inv in self.invariants:
            p = inv.params
            if inv.kind == "precedes" and p.get("then") == atom and str(p.get("first")) not in h.seen:
                out.append(Violation(inv.id, f"{name} (action {issued.id}) issued before {p.get('first')}"))
            elif inv.kind == "precedes_all" and p.get("then") == atom:
                firsts = p.get("first")
                missing = [f for f in (firsts if isinstance(firsts, list) else []) if str(f) not in h.seen]
                if missing:
                    out.append(Violation(inv.id, f"{name} (action {issued.id}) issued before {', '.join(map(str, missing))}"))
            elif inv.kind == "at_most_between" and p.get("atom") == atom:
                count = p.get("count")
                limit = count if isinstance(count, int) else 1
                if h.completes_in_epoch >= limit:
                    out.append(Violation(inv.id, f"{name} (action {issued.id}) issued again"))
            elif inv.kind == "after_only":
                after = str(p.get("after"))
                allowed = p.get("allowed")
                allowed_names = [str(a).partition(":")[2] for a in (allowed if isinstance(allowed, list) else [])]
                if after in h.seen and name not in allowed_names:
                    out.append(Violation(inv.id, f"{name} (action {issued.id}) issued after {after}"))
            elif inv.kind == "delay_finite_nonnegative" and isinstance(issued.action, StartTransfer):
                delay = issued.action.delay_ms
                if not (isinstance(delay, (int, float)) and math.isfinite(delay) and delay >= 0):
                    out.append(Violation(inv.id, f"StartTransfer (action {issued.id}) with delay {delay!r}"))
            elif inv.kind == "clean_at_cancel" and name == "Complete" and obs.completion is not Completion.SUCCESS:
                sides = p.get("sides")
                for acquire, cleaners in (sides.items() if isinstance(sides, dict) else []):
                    if f"issue:{acquire}" not in h.seen:
                        continue
                    names = cleaners if isinstance(cleaners, list) else []
                    if not any(f"answer:{c}:{k}" in h.seen for c in names for k in ("Applied", "Noop")):
                        out.append(
                            Violation(inv.id, f"Complete (CANCELED) while the {acquire} side was never cancelled or released")
                        )
        return out
