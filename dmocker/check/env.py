"""The adversarial environment's knowledge, and the one-step driver shared by search and replay.

The environment remembers what the coordinator issued (to answer it) and which facts and
outcomes the coordinator *took* (to know, for the fairness assumption, what is still due).  It
forgets nothing, so it can also answer actions of an earlier epoch (after a Complete cleared the
coordinator's journal) and repeat anything.

Its key uses action ids relative to the next id, matching coordinators whose snapshot is
translation-invariant; a coordinator whose key holds absolute ids is simply never merged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Sequence

from dmocker.handoff import (
    ACTION_CLASSES,
    FACT_CLASSES,
    Completion,
    HandoffError,
    HandoffErrorKind,
    IssuedAction,
    Outcome,
    OutcomeKind,
    fair_environment,
)

from dmocker.check.inputs import DeliverFact, DeliverOutcome, EnvInput, Start
from dmocker.check.target import CoordinatorLike
from dmocker.check.values import InitialConfig, ValueSet

#: Action class -> its spec name (the registry of dmocker.handoff, read backwards).
ACTION_NAMES: dict[type, str] = {cls: name for name, cls in ACTION_CLASSES.items()}
#: The fair environment of the spec: success outcomes, the facts due after them, cleanups.
FAIR = fair_environment()
#: The outcome a cooperative environment answers each action with (fairness assumption).
SUCCESS_OUTCOME: dict[str, OutcomeKind] = FAIR.success
CANCEL_ACTIONS = FAIR.cleanup_actions
#: One bit of ``EnvState.facts_taken`` per progress fact (spec order).
_FACT_BITS: dict[type, int] = {FACT_CLASSES[due.fact]: 1 << i for i, due in enumerate(FAIR.due_facts)}
UNKNOWN_ID_OUTCOME = Outcome(OutcomeKind.APPLIED)
_OUTCOMES = {k: Outcome(k) for k in OutcomeKind}


@dataclass(frozen=True, slots=True)
class EnvState:
    """What the environment knows; immutable, one per explored state."""

    started: bool
    #: (action id, action name, outcome kind the coordinator took, or None)
    issued: tuple[tuple[int, str, OutcomeKind | None], ...]
    next_id: int
    epoch_start: int
    facts_taken: int

    def key(self) -> Hashable:
        n = self.next_id
        return (
            self.started,
            tuple((n - i, name, kind) for i, name, kind in self.issued),
            n - self.epoch_start,
            self.facts_taken,
        )

    def name_of(self, action_id: int) -> str | None:
        for i, name, _ in self.issued:
            if i == action_id:
                return name
        return None

    def outstanding(self, names: Sequence[str] | None = None) -> list[tuple[int, str]]:
        """Actions of the current epoch not answered yet, lowest id first."""
        return [
            (i, name)
            for i, name, kind in self.issued
            if i >= self.epoch_start and kind is None and name not in FAIR.unanswered and (names is None or name in names)
        ]


INITIAL_ENV = EnvState(False, (), 0, 0, 0)


def alphabet(env: EnvState, values: ValueSet, facts: Sequence[DeliverFact]) -> list[EnvInput]:
    """Every input the environment may deliver in this state, in a fixed order.

    The order breaks ties between counterexamples of equal length: start, facts (value-set
    order), outcomes by action id then kind, then an outcome for an id never issued.
    """
    out: list[EnvInput] = [Start()]
    out.extend(facts)
    for i, name, _ in env.issued:
        if name in FAIR.unanswered:
            continue
        for kind in values.outcome_kinds:
            out.append(DeliverOutcome(i, _OUTCOMES[kind]))
    out.append(DeliverOutcome(env.next_id, UNKNOWN_ID_OUTCOME))
    return out


def fair_input(env: EnvState, handoff_id: str, config: InitialConfig) -> EnvInput | None:
    """What a cooperative environment does next: start, answer, then deliver the due fact."""
    if not env.started:
        return Start()
    pending = env.outstanding()
    if pending:
        i, name = pending[0]
        return DeliverOutcome(i, _OUTCOMES[SUCCESS_OUTCOME[name]])
    answered = {(name, kind) for i, name, kind in env.issued if i >= env.epoch_start}
    for bit, due in enumerate(FAIR.due_facts):
        if (due.action, due.outcome) in answered and not env.facts_taken & (1 << bit):
            return DeliverFact(due.build(handoff_id, config.fair_payloads))
    return None


def cancel_input(env: EnvState) -> EnvInput | None:
    """Cleanup liveness: acknowledge the oldest outstanding cancel with its success (Applied)."""
    pending = env.outstanding(CANCEL_ACTIONS)
    if not pending:
        return None
    i, name = pending[0]
    return DeliverOutcome(i, _OUTCOMES[SUCCESS_OUTCOME[name]])


@dataclass(frozen=True, slots=True)
class Reaction:
    """What one call did."""

    issued: tuple[IssuedAction, ...]
    error: HandoffErrorKind | None
    error_message: str
    api_problem: str | None
    returned_empty_list: bool


def call(obj: CoordinatorLike, inp: EnvInput) -> object:
    if isinstance(inp, Start):
        return obj.start()
    if isinstance(inp, DeliverFact):
        return obj.on_fact(inp.fact)
    return obj.on_action_outcome(inp.action_id, inp.outcome)


def react(obj: CoordinatorLike, inp: EnvInput, env: EnvState, handoff_id: str) -> Reaction:
    """Apply one input and validate the API contract of what came back."""
    try:
        returned = call(obj, inp)
    except Exception as exc:  # noqa: BLE001 - interpret() sorts HandoffError from the rest
        return interpret(None, exc, env, handoff_id)
    return interpret(returned, None, env, handoff_id)


def interpret(returned: object, exc: Exception | None, env: EnvState, handoff_id: str) -> Reaction:
    """Turn a call's result (or exception) into a :class:`Reaction`, checking the API contract."""
    if exc is not None:
        if isinstance(exc, HandoffError):
            kind = getattr(exc, "kind", None)
            if not isinstance(kind, HandoffErrorKind):
                return Reaction((), None, str(exc), f"HandoffError without a HandoffErrorKind kind: {exc}", False)
            return Reaction((), kind, str(exc), None, False)
        return Reaction((), None, str(exc), f"raised {type(exc).__name__}: {exc} (only HandoffError is allowed)", False)
    if type(returned) is list and not returned:
        return Reaction((), None, "", None, True)
    if not isinstance(returned, list):
        return Reaction((), None, "", f"returned {type(returned).__name__}, not a list of IssuedAction", False)
    issued: list[IssuedAction] = []
    expected = env.next_id
    problem: str | None = None
    for item in returned:
        if not isinstance(item, IssuedAction) or type(item.action) not in ACTION_NAMES:
            problem = problem or f"returned {item!r}, not an IssuedAction of a handoff action"
            continue
        if item.id != expected:
            problem = problem or f"issued action id {item.id!r}, expected {expected} (ids count up from 0 by 1)"
        if not (item.action.handoff_id == handoff_id):
            problem = problem or f"issued {type(item.action).__name__} for handoff {item.action.handoff_id!r}"
        expected = item.id + 1 if isinstance(item.id, int) else expected + 1
        issued.append(item)
    return Reaction(tuple(issued), None, "", problem, False)


def read_completion(obj: CoordinatorLike) -> tuple[bool, Completion | None, str | None]:
    """``is_complete`` and ``completion``, with an API problem if their types are wrong."""
    try:
        done = obj.is_complete
        completion = obj.completion
    except Exception as exc:  # noqa: BLE001
        return False, None, f"reading is_complete/completion raised {type(exc).__name__}: {exc}"
    if not isinstance(done, bool):
        return False, None, f"is_complete is {done!r}, not a bool"
    if completion is not None and not isinstance(completion, Completion):
        return done, None, f"completion is {completion!r}, not a Completion or None"
    return done, completion, None


def next_env(env: EnvState, inp: EnvInput, reaction: Reaction, changed: bool) -> EnvState:
    """Record what the coordinator issued and took."""
    started = env.started or isinstance(inp, Start)
    issued = env.issued
    facts = env.facts_taken
    ok = reaction.error is None and reaction.api_problem is None
    if ok and changed and isinstance(inp, DeliverOutcome):
        issued = tuple(
            (i, name, inp.outcome.kind if i == inp.action_id and kind is None else kind) for i, name, kind in issued
        )
    if ok and (changed or reaction.issued) and isinstance(inp, DeliverFact):
        facts |= _FACT_BITS.get(type(inp.fact), 0)
    next_id, epoch = env.next_id, env.epoch_start
    if reaction.issued:
        extra = []
        for ia in reaction.issued:
            aid = ia.id if isinstance(ia.id, int) and not isinstance(ia.id, bool) else next_id
            name = ACTION_NAMES[type(ia.action)]
            extra.append((aid, name, None))
            next_id = max(next_id, aid + 1)
            if name in FAIR.journal_clearing:
                epoch = aid + 1
        issued = issued + tuple(extra)
    return EnvState(started, issued, next_id, epoch, facts)


def finite_nonnegative(value: float) -> bool:
    return math.isfinite(value) and value >= 0.0
