"""`dmocker check --clocks`: the coordinator composed with the workers' own clocks.

The coordinator's checker (:mod:`dmocker.check.core`) gives the coordinator every possible
input.  This one closes the system instead: the coordinator's actions go to the worker machines
of the spec's ``workers`` section, which answer them, and the only choices left are the workers'
own moves — progress, timers that *may fire now* (guarded by the configuration's parameters),
faults (heartbeat loss, a stalled transfer) and the client's cancel.  Breadth-first search over
(coordinator snapshot, worker states) gives the shortest counterexample to each property.

Properties (the spec's ``workers.properties``, by kind):

- ``move_requires`` / ``command_requires`` / ``complete_agrees``: judged on every transition;
- ``stall_frees``: no reachable state holds blocks that no selected move (timers, a stall) can
  ever free — if every worker stops making progress there, the blocks stay held for ever;
- ``fair_completes``: from every reachable state, progress first and timers only when nothing
  else can move, the coordinator completes with nothing held but a decoding destination.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Hashable, Mapping, Sequence

from dmocker.handoff import (
    FACT_CLASSES,
    ClockProperty,
    Complete,
    Completion,
    Configuration,
    Fact,
    HandoffError,
    HandoffOrder,
    IssuedAction,
    MoveKind,
    Outcome,
    PropertyKind,
    Rule,
    WorkersSpec,
    WorkerState,
    load_spec,
    load_workers,
)

from dmocker.check.target import DEFAULT_TARGET, CoordinatorLike, Target, load_target
from dmocker.check.values import DEFAULT_VALUES

HANDOFF_ID = "h"
DEFAULT_BOUND = 64
#: The checker's own property: the coordinator accepts every fact the workers report.
FACTS_ACCEPTED = "worker_facts_accepted"


@dataclass(frozen=True, slots=True)
class StepLog:
    """What one move did: the fact delivered, each command carried out, the workers after."""

    move: str
    lines: tuple[str, ...]
    after: WorkerState


@dataclass(slots=True)
class _Node:
    obj: CoordinatorLike
    workers: WorkerState
    parent: int
    move: str  # the move from the parent ("" for the root)
    depth: int
    complete: bool
    succ: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClockViolation:
    prop: str
    message: str


@dataclass(frozen=True, slots=True)
class ClockResult:
    prop: str
    doc: str
    ok: bool
    message: str = ""
    moves: tuple[str, ...] = ()  # the shortest move sequence that shows the failure (after start)


@dataclass(frozen=True, slots=True)
class ClockReport:
    configuration: str
    order: HandoffOrder
    states: int
    transitions: int
    seconds: float
    results: tuple[ClockResult, ...]

    @property
    def failed(self) -> tuple[str, ...]:
        return tuple(r.prop for r in self.results if not r.ok)


class ClockSystem:
    """The coordinator under test composed with the worker machines of one configuration."""

    def __init__(self, workers: WorkersSpec, configuration: Configuration, order: HandoffOrder,
                 target: Target | None = None) -> None:
        self.workers = workers
        self.configuration = configuration
        self.params: Mapping[str, str] = configuration.parameters
        self.order = order
        self.target = target if target is not None else load_target(DEFAULT_TARGET)
        self._root = DEFAULT_VALUES.configs[0]
        spec = load_spec()
        payloads = self._root.fair_payloads
        self._facts: dict[str, Fact] = {}
        for f in spec.facts:
            kwargs = {name: payloads[name] for name in f.payload}
            self._facts[f.name] = FACT_CLASSES[f.name](HANDOFF_ID, **kwargs)  # type: ignore[arg-type]
        self._props = {p.id: p for p in workers.properties}
        #: when a set, every rule carried out is added as (rule, state before, state after)
        self.trace: set[tuple[Rule, WorkerState, WorkerState]] | None = None

    # --- one step ------------------------------------------------------------------------

    def initial(self) -> tuple[CoordinatorLike, WorkerState, list[ClockViolation], list[str]]:
        obj = self.target.make(HANDOFF_ID, self.order, self._root)
        ws = self.workers.initial
        lines: list[str] = ["start()"]
        violations: list[ClockViolation] = []
        ws = self._run_actions(obj, ws, self._call(obj.start, violations, "start()"), violations, lines)
        return obj, ws, violations, lines

    def enabled(self, ws: WorkerState) -> list[Rule]:
        return self.workers.enabled_moves(ws, self.params)

    def apply(self, obj: CoordinatorLike, ws: WorkerState, move: Rule) -> tuple[WorkerState, list[ClockViolation], list[str]]:
        """Apply ``move`` to a coordinator (mutated) and workers; what it broke, what it did."""
        violations: list[ClockViolation] = []
        lines: list[str] = []
        for p in self.workers.properties:
            if p.kind is PropertyKind.MOVE_REQUIRES and p.subject == move.name and p.guard is not None \
                    and not p.guard.holds(ws, self.params):
                violations.append(ClockViolation(p.id, f"{move.name} fired with {self.workers.describe(ws)}"))
        before, ws = ws, move.apply(ws)
        if self.trace is not None:
            self.trace.add((move, before, ws))
        if move.fact is not None:
            fact = self._facts[move.fact]
            lines.append(f"fact {move.fact}")
            issued = self._call(lambda: obj.on_fact(fact), violations, f"fact {move.fact}")
            ws = self._run_actions(obj, ws, issued, violations, lines)
        return ws, violations, lines

    def _call(self, fn: Callable[[], object], violations: list[ClockViolation], what: str) -> list[IssuedAction]:
        try:
            out = fn()
        except HandoffError as exc:
            violations.append(ClockViolation(FACTS_ACCEPTED, f"{what} rejected: {exc.kind.value}"))
            return []
        return list(out) if isinstance(out, list) else []

    def _run_actions(self, obj: CoordinatorLike, ws: WorkerState, issued: list[IssuedAction],
                     violations: list[ClockViolation], lines: list[str]) -> WorkerState:
        queue = deque(issued)
        while queue:
            ia = queue.popleft()
            name = type(ia.action).__name__
            if isinstance(ia.action, Complete):
                completion = obj.completion
                lines.append(f"  -> Complete ({completion.value if isinstance(completion, Completion) else completion})")
                violations.extend(self._agreement(ws, completion))
                continue
            for p in self.workers.properties:
                if p.kind is PropertyKind.COMMAND_REQUIRES and p.subject == name and p.guard is not None \
                        and not p.guard.holds(ws, self.params):
                    violations.append(ClockViolation(p.id, f"{name} carried out with {self.workers.describe(ws)}"))
            rule = self.workers.command(name, ws, self.params)
            if rule is None or rule.reply is None:
                lines.append(f"  -> {name} (no worker answers)")
                continue
            before, ws = ws, rule.apply(ws)
            if self.trace is not None:
                self.trace.add((rule, before, ws))
            lines.append(f"  -> {name}, answered {rule.reply.value}")
            reply = Outcome(rule.reply)
            queue.extend(self._call(lambda: obj.on_action_outcome(ia.id, reply), violations, f"{name}.{rule.reply.value}"))
        return ws

    def _agreement(self, ws: WorkerState, completion: object) -> list[ClockViolation]:
        out: list[ClockViolation] = []
        for p in self.workers.properties:
            if p.kind is not PropertyKind.COMPLETE_AGREES:
                continue
            allowed = p.success if completion is Completion.SUCCESS else p.canceled
            if not any(g.holds(ws, self.params) for g in allowed):
                value = completion.value if isinstance(completion, Completion) else str(completion)
                out.append(ClockViolation(p.id, f"Complete ({value}) with {self.workers.describe(ws)}"))
        return out

    def selected(self, prop: ClockProperty, ws: WorkerState) -> list[Rule]:
        """The enabled moves a ``stall_frees`` / ``fair_completes`` property lets happen, by priority."""
        enabled = self.enabled(ws)
        out: list[Rule] = []
        for sel in prop.moves:
            out.extend(r for r in enabled if (r.name == sel or (r.kind is not None and r.kind.value == sel)) and r not in out)
        return out

    def settled(self, obj: CoordinatorLike, ws: WorkerState) -> bool:
        return bool(obj.is_complete) and not self.workers.holding(ws)

    def state_violations(self, obj: CoordinatorLike, ws: WorkerState, bound: int = DEFAULT_BOUND,
                         fair: bool = True) -> list[ClockViolation]:
        """The state properties judged at one state, without the graph (the Hypothesis kit's view):
        ``stall_frees`` here, and ``fair_completes`` by running the fair policy on a copy."""
        out: list[ClockViolation] = []
        for p in self.workers.properties:
            if p.kind is PropertyKind.STALL_FREES:
                held = self.workers.holding(ws)
                if held and not self.selected(p, ws):
                    out.append(ClockViolation(p.id, f"{', '.join(held)} held and no timer can free it"))
            elif p.kind is PropertyKind.FAIR_COMPLETES and fair:
                cur, cws = self.target.clone(obj), ws
                for _ in range(bound):
                    if self.settled(cur, cws):
                        break
                    moves = self.selected(p, cws)
                    if not moves:
                        break
                    cws, _, _ = self.apply(cur, cws, moves[0])
                if not self.settled(cur, cws):
                    out.append(ClockViolation(p.id, f"the fair run ends unsettled: {self.workers.describe(cws)}"))
        return out


def check_clocks(workers: WorkersSpec, configuration: Configuration, order: HandoffOrder, *,
                 target: Target | None = None, bound: int = DEFAULT_BOUND, max_states: int = 200_000,
                 trace: set[tuple[Rule, WorkerState, WorkerState]] | None = None) -> ClockReport:
    """Explore every state of the composition; decide every property with a shortest counterexample.
    ``trace``, when given, collects every rule carried out (the diagram draws those)."""
    t0 = time.perf_counter()
    system = ClockSystem(workers, configuration, order, target)
    system.trace = trace
    tgt = system.target
    snap = tgt.snapshot_function()
    obj, ws, violations0, _ = system.initial()
    nodes: list[_Node] = [_Node(obj, ws, -1, "", 0, bool(obj.is_complete))]
    index: dict[Hashable, int] = {(snap(obj), ws): 0}
    first: dict[str, tuple[int, str, str]] = {}  # property -> (node, move, message)
    for v in violations0:
        first.setdefault(v.prop, (0, "", v.message))
    transitions = 0
    frontier = deque([0])
    while frontier:
        n = frontier.popleft()
        node = nodes[n]
        for move in system.enabled(node.workers):
            transitions += 1
            child = tgt.clone(node.obj)
            cws, violations, _ = system.apply(child, node.workers, move)
            for v in violations:
                first.setdefault(v.prop, (n, move.name, v.message))
            key = (snap(child), cws)
            m = index.get(key)
            if m is None:
                m = len(nodes)
                if m >= max_states:
                    raise RuntimeError(f"more than {max_states} states")
                index[key] = m
                nodes.append(_Node(child, cws, n, move.name, node.depth + 1, bool(child.is_complete)))
                frontier.append(m)
            node.succ[move.name] = m

    def path(n: int) -> list[str]:
        out: list[str] = []
        while n > 0:
            out.append(nodes[n].move)
            n = nodes[n].parent
        return out[::-1]

    results: list[ClockResult] = []
    for p in workers.properties:
        if p.kind in (PropertyKind.MOVE_REQUIRES, PropertyKind.COMMAND_REQUIRES, PropertyKind.COMPLETE_AGREES):
            hit = first.get(p.id)
            if hit is None:
                results.append(ClockResult(p.id, p.doc, True))
            else:
                n, last, message = hit
                results.append(ClockResult(p.id, p.doc, False, message, tuple(path(n) + ([last] if last else []))))
        elif p.kind is PropertyKind.STALL_FREES:
            results.append(_stall(system, p, nodes, path))
        else:
            results.append(_fair(system, p, nodes, path, bound))
    if FACTS_ACCEPTED in first:
        n, last, message = first[FACTS_ACCEPTED]
        results.append(ClockResult(FACTS_ACCEPTED, "the coordinator accepts every fact the workers report", False, message,
                                   tuple(path(n) + ([last] if last else []))))
    return ClockReport(configuration.name, order, len(nodes), transitions, time.perf_counter() - t0, tuple(results))


def _stall(system: ClockSystem, p: ClockProperty, nodes: Sequence[_Node], path: Callable[[int], list[str]]) -> ClockResult:
    for n, node in enumerate(nodes):  # BFS order: the first is a shortest one
        held = system.workers.holding(node.workers)
        if held and not system.selected(p, node.workers):
            return ClockResult(p.id, p.doc, False, f"{', '.join(held)} held and no timer can free it", tuple(path(n)))
    return ClockResult(p.id, p.doc, True)


def _fair(system: ClockSystem, p: ClockProperty, nodes: Sequence[_Node], path: Callable[[int], list[str]],
          bound: int) -> ClockResult:
    worst = 0
    for n, node in enumerate(nodes):
        cur, steps = n, 0
        chain: list[str] = []
        while not system.settled(nodes[cur].obj, nodes[cur].workers):
            moves = system.selected(p, nodes[cur].workers)
            if not moves or steps >= bound:
                what = "no progress and no timer left" if not moves else f"not settled within {bound} steps"
                return ClockResult(p.id, p.doc, False,
                                   f"{what}: {system.workers.describe(nodes[cur].workers)}, coordinator complete={nodes[cur].complete}",
                                   tuple(path(n) + chain))
            chain.append(moves[0].name)
            cur = nodes[cur].succ[moves[0].name]
            steps += 1
        worst = max(worst, steps)
    return ClockResult(p.id, p.doc, True, f"every state settles within {worst} moves (bound {bound})")


def replay_moves(workers: WorkersSpec, configuration: Configuration, order: HandoffOrder, moves: Sequence[str],
                 target: Target | None = None) -> tuple[list[StepLog], list[ClockViolation]]:
    """Run ``moves`` (move ids, after start) from the initial state; what each did and what broke.

    Only the transition properties are judged here (the state properties need the whole graph);
    a move that is not enabled where it is asked for is an error.
    """
    system = ClockSystem(workers, configuration, order, target)
    obj, ws, violations, lines = system.initial()
    logs = [StepLog("start", tuple(lines), ws)]
    for name in moves:
        found = next((r for r in system.enabled(ws) if r.name == name), None)
        if found is None:
            raise ValueError(f"move {name!r} is not enabled with {workers.describe(ws)}")
        ws, vs, step_lines = system.apply(obj, ws, found)
        violations.extend(vs)
        logs.append(StepLog(name, tuple(step_lines), ws))
    return logs, violations


def carried_out(workers: WorkersSpec) -> set[tuple[Rule, WorkerState, WorkerState]]:
    """Every (rule, state before, state after) some configuration of the spec reaches."""
    out: set[tuple[Rule, WorkerState, WorkerState]] = set()
    for c in workers.configurations.values():
        for order in c.orders:
            check_clocks(workers, c, order, trace=out)
    return out


def check_configurations(workers: WorkersSpec | None = None, names: Sequence[str] | None = None,
                         target: Target | None = None) -> list[ClockReport]:
    w = workers if workers is not None else load_workers()
    chosen = list(names) if names else list(w.configurations)
    out: list[ClockReport] = []
    for name in chosen:
        c = w.configurations[name]
        for order in c.orders:
            out.append(check_clocks(w, c, order, target=target))
    return out


def render_clock_report(workers: WorkersSpec, reports: Sequence[ClockReport], verbose: bool = True) -> list[str]:
    lines: list[str] = []
    for r in reports:
        c = workers.configurations[r.configuration]
        expected = set(c.expect_failing)
        verdict = "safe" if not r.failed else "UNSAFE"
        agrees = set(r.failed) == expected
        lines.append(f"{r.configuration} ({r.order.value}): {verdict}; {r.states} states, {r.transitions} transitions, "
                     f"{r.seconds:.3f} s{'' if agrees else '  (DIFFERS FROM THE SPEC: expected failing ' + str(sorted(expected)) + ')'}")
        for res in r.results:
            lines.append(f"  {'PASS' if res.ok else 'FAIL'}  {res.prop:<28} {res.message}")
            if not res.ok and verbose:
                logs, _ = replay_moves(workers, c, r.order, _prefix(res.moves, workers, c, r.order))
                lines.append(f"        shortest counterexample ({len(res.moves)} moves after start):")
                for i, log in enumerate(logs):
                    lines.append(f"        {i}. {log.move}: {'; '.join(x.strip() for x in log.lines) or '-'}")
                    lines.append(f"             workers: {workers.describe(log.after)}")
    return lines


def _prefix(moves: Sequence[str], workers: WorkersSpec, c: Configuration, order: HandoffOrder) -> list[str]:
    """The longest prefix of ``moves`` that replays (a liveness chain may end in a stuck state)."""
    out: list[str] = []
    for m in moves:
        try:
            replay_moves(workers, c, order, out + [m])
        except ValueError:
            break
        out.append(m)
    return out


def clock_counterexample_json(report: ClockReport, result: ClockResult) -> dict[str, object]:
    """A failing property's shortest move sequence, re-runnable with :func:`replay_moves`."""
    return {
        "format": "dmocker-clock-counterexample", "version": 1,
        "configuration": report.configuration, "order": report.order.value, "property": result.prop,
        "message": result.message, "moves": list(result.moves),
    }


def clock_report_json(report: ClockReport) -> dict[str, object]:
    return {
        "configuration": report.configuration, "order": report.order.value, "states": report.states,
        "transitions": report.transitions, "seconds": round(report.seconds, 6),
        "properties": [{"name": r.prop, "status": "pass" if r.ok else "fail", "message": r.message, "moves": list(r.moves)}
                       for r in report.results],
    }


def as_expected(workers: WorkersSpec, reports: Sequence[ClockReport]) -> bool:
    return all(set(r.failed) == set(workers.configurations[r.configuration].expect_failing) for r in reports)


__all__ = [
    "ClockReport",
    "ClockResult",
    "ClockSystem",
    "ClockViolation",
    "FACTS_ACCEPTED",
    "StepLog",
    "as_expected",
    "carried_out",
    "check_clocks",
    "clock_counterexample_json",
    "clock_report_json",
    "check_configurations",
    "render_clock_report",
    "replay_moves",
]
