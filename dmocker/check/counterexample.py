"""Counterexamples: a shortest input sequence, its JSON file, and step-by-step replay.

A counterexample names the coordinator, the order, how the coordinator was built (the root),
the property it breaks and the inputs.  Replaying it builds a fresh coordinator and feeds the
inputs one by one, printing each reaction and the invariants violated at that step, then says
whether the failure still reproduces — so a fixed bug turns the saved file into a passing
regression check.
"""

from __future__ import annotations

import enum
import json
import os
from dataclasses import dataclass
from pathlib import Path

from dmocker.handoff import Completion, HandoffOrder

from dmocker.check.env import INITIAL_ENV, EnvState, alphabet, next_env, react, read_completion
from dmocker.check.inputs import (
    DeliverFact,
    DeliverOutcome,
    EnvInput,
    InputFormatError,
    Json,
    describe_input,
    describe_issued,
    float_from_json,
    float_to_json,
    input_from_json,
    input_to_json,
)
from dmocker.check.invariants import Monitor, MonitorState, Violation, safety_step, step_event
from dmocker.check.target import Target
from dmocker.check.values import DEFAULT_VALUES, InitialConfig

FORMAT = "dmocker-check-counterexample"
VERSION = 1
class CounterexampleKind(enum.Enum):
    """Which sort of property a counterexample breaks; decides how replay judges it."""

    SAFETY = "safety"  # an invariant is violated at some step
    DEADLOCK = "deadlock"  # the last state is stuck: not complete, no input makes progress
    TERMINATION = "termination"  # prefix + the fair run, which never completes
    CLEANUP_LIVENESS = "cleanup_liveness"  # prefix + terminal fact + cancel acks, not CANCELED


KINDS = tuple(k.value for k in CounterexampleKind)


@dataclass(frozen=True, slots=True)
class Counterexample:
    coordinator: str
    order: HandoffOrder
    property_name: str
    kind: CounterexampleKind
    message: str
    handoff_id: str
    fallback_transfer_delay_ms: float
    assign_fallback_after_construction: float | None
    root_label: str
    steps: tuple[EnvInput, ...]

    @property
    def length(self) -> int:
        return len(self.steps)

    def config(self) -> InitialConfig:
        for c in DEFAULT_VALUES.configs:
            if c.label == self.root_label:
                return c
        first = DEFAULT_VALUES.configs[0]
        return InitialConfig(
            self.root_label,
            self.fallback_transfer_delay_ms,
            self.assign_fallback_after_construction,
            first.timings,
            first.tokens,
            first.fair_timing,
            first.fair_tokens,
        )

    def to_json(self) -> dict[str, Json]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "coordinator": self.coordinator,
            "order": self.order.value,
            "property": self.property_name,
            "kind": self.kind.value,
            "message": self.message,
            "handoff_id": self.handoff_id,
            "construction": {
                "root": self.root_label,
                "fallback_transfer_delay_ms": float_to_json(self.fallback_transfer_delay_ms),
                "assign_fallback_after_construction": float_to_json(self.assign_fallback_after_construction),
            },
            "steps": [input_to_json(s) for s in self.steps],
        }


def counterexample_from_json(raw: object, where: str) -> Counterexample:
    """Decode a counterexample file's content; errors name ``where`` and the field."""
    if not isinstance(raw, dict):
        raise InputFormatError(f"{where}: expected a JSON object")
    if raw.get("format") != FORMAT:
        raise InputFormatError(f"{where}: format: expected {FORMAT!r}, got {raw.get('format')!r}")
    if raw.get("version") != VERSION:
        raise InputFormatError(f"{where}: version: expected {VERSION}, got {raw.get('version')!r}")

    def text(key: str) -> str:
        v = raw.get(key)
        if not isinstance(v, str):
            raise InputFormatError(f"{where}: {key}: expected a string, got {v!r}")
        return v

    try:
        order = HandoffOrder.parse(text("order"))
    except ValueError as exc:
        raise InputFormatError(f"{where}: order: {exc}") from None
    kind_text = text("kind")
    if kind_text not in KINDS:
        raise InputFormatError(f"{where}: kind: expected one of {', '.join(KINDS)}, got {kind_text!r}")
    cons = raw.get("construction")
    if not isinstance(cons, dict):
        raise InputFormatError(f"{where}: construction: expected an object")
    fallback = float_from_json(cons.get("fallback_transfer_delay_ms"), f"{where}: construction.fallback_transfer_delay_ms")
    after = float_from_json(cons.get("assign_fallback_after_construction"), f"{where}: construction.assign_fallback_after_construction")
    root = cons.get("root", "")
    steps_raw = raw.get("steps")
    if not isinstance(steps_raw, list):
        raise InputFormatError(f"{where}: steps: expected a list")
    steps = tuple(input_from_json(s, f"{where}: steps[{i}]") for i, s in enumerate(steps_raw))
    return Counterexample(
        coordinator=text("coordinator"),
        order=order,
        property_name=text("property"),
        kind=CounterexampleKind(kind_text),
        message=str(raw.get("message", "")),
        handoff_id=text("handoff_id"),
        fallback_transfer_delay_ms=0.0 if fallback is None else fallback,
        assign_fallback_after_construction=after,
        root_label=str(root),
        steps=steps,
    )


def load_counterexample(path: str | os.PathLike[str]) -> Counterexample:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputFormatError(f"{p}: cannot read: {exc.strerror or exc}") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputFormatError(f"{p}: line {exc.lineno}: invalid JSON: {exc.msg}") from None
    return counterexample_from_json(raw, str(p))


@dataclass(frozen=True, slots=True)
class ReplayStep:
    input: EnvInput
    reaction: str
    violations: tuple[Violation, ...]


@dataclass(frozen=True, slots=True)
class ReplayResult:
    steps: tuple[ReplayStep, ...]
    is_complete: bool
    completion: Completion | None
    reproduced: bool
    verdict: str

    def lines(self) -> list[str]:
        out: list[str] = []
        for n, s in enumerate(self.steps, 1):
            out.append(f"{n:3}. {describe_input(s.input)} -> {s.reaction}")
            for v in s.violations:
                out.append(f"       VIOLATES {v.invariant}: {v.message}")
        c = "none" if self.completion is None else self.completion.value
        out.append(f"     end: is_complete={self.is_complete} completion={c}")
        return out


def run_steps(
    target: Target, cex: Counterexample, monitor: Monitor
) -> ReplayResult:
    """Re-run ``cex`` on a fresh coordinator and decide whether its failure reproduces."""
    config = cex.config()
    obj = target.make(cex.handoff_id, cex.order, config)
    env: EnvState = INITIAL_ENV
    mon: MonitorState = monitor.initial
    records: list[ReplayStep] = []
    seen: set[str] = set()
    for inp in cex.steps:
        before = target.snapshot(obj)
        reaction = react(obj, inp, env, cex.handoff_id)
        after = target.snapshot(obj)
        changed = before != after
        done, completion, problem = read_completion(obj)
        answered = env.name_of(inp.action_id) if isinstance(inp, DeliverOutcome) else None
        ev = step_event(inp, cex.handoff_id, answered, reaction.issued, reaction.error, reaction.api_problem or problem,
                        changed, completion)
        mon, violations = safety_step(monitor, mon, ev)
        env = next_env(env, inp, reaction, changed)
        seen.update(v.invariant for v in violations)
        if reaction.api_problem:
            text = f"API problem: {reaction.api_problem}"
        elif reaction.error is not None:
            text = f"rejected {reaction.error.name}: {reaction.error_message}" + (" (state changed!)" if changed else "")
        elif reaction.issued:
            text = ", ".join(describe_issued(i) for i in reaction.issued)
        else:
            text = "nothing" + ("" if changed else " (no change)")
        records.append(ReplayStep(inp, text, tuple(violations)))
    done, completion, _ = read_completion(obj)
    if cex.kind is CounterexampleKind.SAFETY:
        reproduced = cex.property_name in seen
        verdict = f"{cex.property_name} {'violated' if reproduced else 'not violated'}"
    elif cex.kind is CounterexampleKind.TERMINATION:
        reproduced = not done
        verdict = "not complete at the end" if reproduced else "complete at the end"
    elif cex.kind is CounterexampleKind.CLEANUP_LIVENESS:
        reproduced = not (done and completion is Completion.CANCELED)
        verdict = "not Complete (CANCELED) at the end" if reproduced else "Complete (CANCELED) at the end"
    else:
        progress = _progress_input(target, obj, env, cex) if not done else None
        reproduced = not done and progress is None
        if done:
            verdict = "complete at the end: no deadlock"
        elif progress is not None:
            verdict = f"not a deadlock: {describe_input(progress)} makes progress"
        else:
            verdict = "deadlock: not complete and no input makes progress"
    return ReplayResult(tuple(records), done, completion, reproduced, verdict)


def _progress_input(target: Target, obj: object, env: EnvState, cex: Counterexample) -> EnvInput | None:
    """Some input (from every root's value set) that changes the state or issues something."""
    facts: list[DeliverFact] = []
    for c in DEFAULT_VALUES.configs:
        for f in c.facts(cex.handoff_id, DEFAULT_VALUES.foreign_id):
            d = DeliverFact(f)
            if d not in facts:
                facts.append(d)
    assert hasattr(obj, "start")
    before = target.snapshot(obj)  # type: ignore[arg-type]
    for inp in alphabet(env, DEFAULT_VALUES, facts):
        work = target.clone(obj)  # type: ignore[arg-type]
        reaction = react(work, inp, env, cex.handoff_id)
        if reaction.issued or target.snapshot(work) != before:
            return inp
    return None


