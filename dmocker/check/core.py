"""`dmocker check`'s engine: explore each order, decide every property, build counterexamples.

Properties, in report order:

1. the spec's safety invariants for the order (evaluated by :class:`dmocker.handoff.Monitor`),
   then the checker's own ``api_contract`` — decided on the fly during the search;
2. ``no_deadlock`` — no reachable state that is not complete has zero inputs that change it or
   make it issue something;
3. ``termination`` — fairness assumption: the environment calls ``start()``, answers the
   oldest outstanding action of the current epoch with its success outcome (Submitted,
   Accepted, Scheduled, Applied), and otherwise delivers the due fact (SourceHeld after
   Submitted, DestinationReserved after Accepted, TransferCompleted after Scheduled) with the
   root's well-formed payload.  From every reachable state of a root with a finite fallback,
   that environment must reach ``is_complete`` within the step bound;
4. ``cleanup_liveness`` — from every reachable state, after any terminal fact (Failed,
   TimedOut, Canceled), acknowledging the oldest outstanding cancel with Applied, repeatedly,
   must reach Complete (CANCELED) within the step bound.

Liveness is only decided on a complete search: when the search stopped at a safety violation
the liveness properties are ``not-run``; when it hit ``max_states`` everything not failed is
``inconclusive``.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Sequence

from dmocker.handoff import HandoffOrder, ProtocolSpec, load_spec

from dmocker.check.counterexample import Counterexample, CounterexampleKind
from dmocker.check.explore import (
    DEFAULT_MAX_STATES,
    DEFAULT_STEP_BOUND,
    ChainResult,
    Exploration,
    explore,
    follow,
    liveness_nodes,
)
from dmocker.check.inputs import EnvInput
from dmocker.check.invariants import Monitor, safety_properties
from dmocker.check.target import Target, TargetError
from dmocker.check.values import DEFAULT_VALUES, ValueSet


class Category(enum.Enum):
    SAFETY = "safety"  # decided on every transition during the search
    LIVENESS = "liveness"  # decided on the finished graph


class Status(enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"
    NOT_RUN = "not-run"


LIVENESS = (
    ("no_deadlock", "no reachable state that is not complete lacks an input that makes progress"),
    (
        "termination",
        "under the fair environment (success outcomes, due facts) every reachable state reaches Complete within the bound",
    ),
    (
        "cleanup_liveness",
        "after any terminal fact, acknowledging the cancels reaches Complete (CANCELED) within the bound",
    ),
)


@dataclass(frozen=True, slots=True)
class PropertyResult:
    name: str
    category: Category
    source: str  # "spec" | "checker"
    doc: str
    status: Status
    message: str
    counterexample: Counterexample | None


@dataclass(frozen=True)
class OrderReport:
    order: HandoffOrder
    states: int
    transitions: int
    seconds: float
    truncated: bool
    stopped_early: bool
    properties: tuple[PropertyResult, ...]
    termination_steps: int | None  # longest fair run to Complete (the bound found)
    cleanup_steps: int | None
    exploration: Exploration = field(compare=False, repr=False)

    @property
    def failed(self) -> tuple[PropertyResult, ...]:
        return tuple(p for p in self.properties if p.status is Status.FAIL)


@dataclass(frozen=True)
class CheckReport:
    target: str
    snapshot_mode: str
    clone_mode: str
    max_states: int
    step_bound: int
    orders: tuple[OrderReport, ...]
    values: ValueSet = field(compare=False, repr=False)
    #: Roots of the value set not explored for this coordinator: (root label, why).
    skipped_roots: tuple[tuple[str, str], ...] = ()

    @property
    def exit_code(self) -> int:
        statuses = [p.status for o in self.orders for p in o.properties]
        if Status.FAIL in statuses:
            return 1
        if Status.INCONCLUSIVE in statuses:
            return 3
        return 0

    @property
    def seconds(self) -> float:
        return sum(o.seconds for o in self.orders)

    def first_failure(self) -> tuple[HandoffOrder, PropertyResult] | None:
        for o in self.orders:
            for p in o.properties:
                if p.status is Status.FAIL:
                    return o.order, p
        return None


def _cex(ex: Exploration, target: Target, values: ValueSet, prop: str, kind: CounterexampleKind, message: str,
         node: int, extra: Sequence[EnvInput]) -> Counterexample:
    root, steps = ex.path(node)
    config = values.configs[root]
    return Counterexample(
        coordinator=target.name,
        order=ex.order,
        property_name=prop,
        kind=kind,
        message=message,
        handoff_id=values.handoff_id,
        fallback_transfer_delay_ms=config.fallback_transfer_delay_ms,
        assign_fallback_after_construction=config.after_construction,
        root_label=config.label,
        steps=tuple(steps) + tuple(extra),
    )


def check_order(
    target: Target,
    order: HandoffOrder,
    monitor: Monitor,
    values: ValueSet = DEFAULT_VALUES,
    *,
    max_states: int = DEFAULT_MAX_STATES,
    step_bound: int = DEFAULT_STEP_BOUND,
    stop_at_first: bool = True,
) -> OrderReport:
    ex = explore(target, order, monitor, values, max_states=max_states, stop_at_first=stop_at_first)
    props: list[PropertyResult] = []
    for decl in safety_properties(monitor):
        hit = ex.safety.get(decl.id)
        if hit is not None:
            cex = _cex(ex, target, values, decl.id, CounterexampleKind.SAFETY, hit.violation.message, hit.node, [hit.input])
            props.append(PropertyResult(decl.id, Category.SAFETY, decl.source, decl.doc, Status.FAIL, hit.violation.message, cex))
        elif ex.truncated:
            props.append(PropertyResult(decl.id, Category.SAFETY, decl.source, decl.doc, Status.INCONCLUSIVE,
                                        f"no violation in the first {ex.states} states (max-states reached)", None))
        elif ex.stopped_early:
            props.append(PropertyResult(decl.id, Category.SAFETY, decl.source, decl.doc, Status.NOT_RUN,
                                        "no violation before the search stopped at the first failure (use --all)", None))
        else:
            props.append(PropertyResult(decl.id, Category.SAFETY, decl.source, decl.doc, Status.PASS, "", None))
    term_steps: int | None = None
    clean_steps: int | None = None
    if ex.truncated or ex.stopped_early:
        status = Status.INCONCLUSIVE if ex.truncated else Status.NOT_RUN
        why = "max-states reached" if ex.truncated else "the search stopped at a safety violation"
        for name, doc in LIVENESS:
            props.append(PropertyResult(name, Category.LIVENESS, "checker", doc, status, f"not decided: {why}", None))
    else:
        props.append(_deadlock(ex, target, values))
        term, term_steps = _termination(ex, target, values, step_bound)
        props.append(term)
        clean, clean_steps = _cleanup(ex, target, values, step_bound)
        props.append(clean)
    return OrderReport(order, ex.states, ex.transitions, ex.seconds, ex.truncated, ex.stopped_early,
                       tuple(props), term_steps, clean_steps, ex)


def _deadlock(ex: Exploration, target: Target, values: ValueSet) -> PropertyResult:
    name, doc = LIVENESS[0]
    for n in range(ex.states):
        if not ex.complete[n] and ex.out_degree[n] == 0:
            msg = f"state {n} (depth {ex.depth[n]}) is not complete and no input changes it"
            return PropertyResult(name, Category.LIVENESS, "checker", doc, Status.FAIL, msg,
                                  _cex(ex, target, values, name, CounterexampleKind.DEADLOCK, msg, n, []))
    return PropertyResult(name, Category.LIVENESS, "checker", doc, Status.PASS, "", None)


def _termination(ex: Exploration, target: Target, values: ValueSet, bound: int) -> tuple[PropertyResult, int | None]:
    name, doc = LIVENESS[1]
    worst = 0
    for n in liveness_nodes(ex, only_finite_roots=True):
        r: ChainResult = follow(ex, n, "fair", "complete", bound)
        if not r.ok:
            msg = f"from state {n} (depth {ex.depth[n]}) the fair environment does not reach Complete: {r.reason}"
            return (PropertyResult(name, Category.LIVENESS, "checker", doc, Status.FAIL, msg,
                                   _cex(ex, target, values, name, CounterexampleKind.TERMINATION, msg, n, r.inputs)), None)
        worst = max(worst, r.steps)
    return PropertyResult(name, Category.LIVENESS, "checker", doc, Status.PASS,
                          f"every fair run completes within {worst} steps (bound {bound})", None), worst


def _cleanup(ex: Exploration, target: Target, values: ValueSet, bound: int) -> tuple[PropertyResult, int | None]:
    name, doc = LIVENESS[2]
    worst = 0
    for n in range(ex.states):
        for k, w in enumerate(ex.terminal_next[n]):
            r = follow(ex, w, "cancel", "canceled", bound)
            if not r.ok:
                fact = ex.terminal_inputs[k]
                msg = (f"from state {n} (depth {ex.depth[n]}), after {type(fact.fact).__name__} "
                       f"(+ acknowledging cancels), not Complete (CANCELED): {r.reason}")
                return (PropertyResult(name, Category.LIVENESS, "checker", doc, Status.FAIL, msg,
                                       _cex(ex, target, values, name, CounterexampleKind.CLEANUP_LIVENESS, msg, n, (fact, *r.inputs))), None)
            worst = max(worst, r.steps + 1)
    return PropertyResult(name, Category.LIVENESS, "checker", doc, Status.PASS,
                          f"every cleanup completes within {worst} steps after the terminal fact (bound {bound})", None), worst


def check(
    target: Target,
    orders: Sequence[HandoffOrder] = (HandoffOrder.SOURCE_FIRST, HandoffOrder.DESTINATION_FIRST),
    *,
    spec: ProtocolSpec | None = None,
    values: ValueSet = DEFAULT_VALUES,
    max_states: int = DEFAULT_MAX_STATES,
    step_bound: int = DEFAULT_STEP_BOUND,
    stop_at_first: bool = True,
) -> CheckReport:
    """Check ``target`` in each of ``orders`` against the spec's invariants and the liveness properties."""
    spec = spec if spec is not None else load_spec()
    values, skipped = usable_roots(target, values)
    reports = tuple(
        check_order(target, order, Monitor.for_order(spec, order), values, max_states=max_states,
                    step_bound=step_bound, stop_at_first=stop_at_first)
        for order in orders
    )
    return CheckReport(target.name, target.snapshot_mode, target.clone_mode, max_states, step_bound, reports, values,
                       skipped)


def usable_roots(target: Target, values: ValueSet) -> tuple[ValueSet, tuple[tuple[str, str], ...]]:
    """``values`` without the roots ``target`` cannot be built for, and (label, why) of each one left out."""
    kept = []
    skipped: list[tuple[str, str]] = []
    for config in values.configs:
        reason = target.root_skip_reason(config)
        if reason is None:
            kept.append(config)
        else:
            skipped.append((config.label, reason))
    if not kept:
        raise TargetError(f"{target.name}: no root of the value set can be built: " + "; ".join(r for _, r in skipped))
    return dataclasses.replace(values, configs=tuple(kept)), tuple(skipped)
