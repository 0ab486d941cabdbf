"""The fair (cooperative) environment, derived from the spec: what a healthy world does next.

Both the exhaustive checker (``dmocker check``: termination under fairness) and the Hypothesis
kit (``healthy_progress``) drive a coordinator the way a healthy cluster would: answer every
issued action with its success outcome (the first ``allowed`` kind), and deliver each progress
fact once the action it waits for was answered with that outcome.  Which fact waits for which
action is read off the transitions: a non-terminal fact's accepting transition requires one
region state (``SourceHeld`` needs ``source: submitted``), and the action whose success outcome
sets that state (``SubmitPrefill.Submitted``) is the one it waits for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, cast

from dmocker.handoff._registry import FACT_CLASSES
from dmocker.handoff._spec import ProtocolSpec, SpecError
from dmocker.handoff._spec_load import load_spec, success_outcomes
from dmocker.handoff._types import Fact, HandoffId, OutcomeKind


@dataclass(frozen=True, slots=True)
class DueFact:
    """``fact`` is due once ``action`` was answered ``outcome`` (and not taken yet)."""

    action: str
    outcome: OutcomeKind
    fact: str
    #: the fact's payload fields besides the handoff id (spec ``facts.X.payload``)
    payload: tuple[str, ...]

    def build(self, handoff_id: HandoffId, payloads: dict[str, object]) -> Fact:
        """The fact with our handoff id and its payload fields taken from ``payloads``."""
        make = cast(Callable[..., Fact], FACT_CLASSES[self.fact])
        return make(handoff_id, **{name: payloads[name] for name in self.payload})


@dataclass(frozen=True, slots=True)
class FairEnvironment:
    #: action name -> the outcome a healthy environment answers it with
    success: dict[str, OutcomeKind]
    #: the progress facts in spec order, each with the answered action it waits for
    due_facts: tuple[DueFact, ...]
    #: actions that take no outcome (nothing to answer; e.g. Complete)
    unanswered: frozenset[str]
    #: actions that clean a side up (spec ``cleanup: true``), in spec order
    cleanup_actions: tuple[str, ...]
    #: actions after which the coordinator forgets earlier action ids (``clears_journal``)
    journal_clearing: frozenset[str]


def fair_environment(spec: ProtocolSpec | None = None) -> FairEnvironment:
    """Derive the fair environment of ``spec`` (default: the loaded spec)."""
    the_spec = spec if spec is not None else load_spec()
    success = success_outcomes(the_spec)
    # (region, state) -> the action whose success outcome sets it
    sets_state: dict[tuple[str, str], str] = {}
    for t in the_spec.transitions:
        if t.event is None or "." not in t.event or t.result != "step":
            continue
        action, kind = t.event.split(".", 1)
        if success.get(action) is not None and success[action].value == kind:
            for region_state in t.set:
                sets_state.setdefault(region_state, action)
    due: list[DueFact] = []
    for fact in the_spec.facts:
        if fact.terminal:
            continue
        waits = [
            sets_state[(region, states[0])]
            for t in the_spec.transitions
            if t.event == fact.name and t.result == "step"
            for region, states in t.when
            if len(states) == 1 and (region, states[0]) in sets_state
        ]
        if not waits:
            raise SpecError(f"{the_spec.path}: fact {fact.name}: no action's success outcome enables it")
        action = waits[0]
        due.append(DueFact(action, success[action], fact.name, fact.payload))
    return FairEnvironment(
        success=success,
        due_facts=tuple(due),
        unanswered=frozenset(a.name for a in the_spec.actions if a.pending is None),
        cleanup_actions=tuple(a.name for a in the_spec.actions if a.cleanup),
        journal_clearing=frozenset(a.name for a in the_spec.actions if a.clears_journal),
    )


__all__ = ["DueFact", "FairEnvironment", "fair_environment"]
