"""Breadth-first exploration of coordinator x adversarial environment, with on-the-fly safety.

Nodes are (coordinator snapshot, environment knowledge, monitor state) triples, numbered in
discovery order; since the search is breadth-first, node numbers grow with depth and the BFS
tree gives a shortest input sequence to every node.  Safety violations are detected on each
transition as it is generated, so the first one found is a shortest counterexample, even when a
buggy coordinator's state space is infinite.  Liveness (deadlock, termination, cleanup) is
decided afterwards on the finished graph, using the successors under two fixed environment
policies that were recorded during the search (no extra coordinator calls).

Speed: the coordinator is copied only when an input changed it (or made it issue something);
inputs that are ignored or rejected without a change are self-loops and reuse the same object.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Hashable, Sequence

import networkx as nx

from dmocker.handoff import Completion, HandoffError, HandoffErrorKind, HandoffOrder

from dmocker.check.env import (
    INITIAL_ENV,
    EnvState,
    Reaction,
    alphabet,
    cancel_input,
    fair_input,
    next_env,
    interpret,
    read_completion,
)
from dmocker.check.inputs import DeliverFact, DeliverOutcome, EnvInput, describe_input
from dmocker.check.invariants import Monitor, MonitorState, Violation, safety_step, step_event
from dmocker.check.target import CoordinatorLike, Target, TargetError
from dmocker.check.values import DEFAULT_VALUES, InitialConfig, ValueSet

DEFAULT_MAX_STATES = 1_000_000
DEFAULT_STEP_BOUND = 64


@dataclass(frozen=True, slots=True)
class SafetyHit:
    """The first (hence shortest) violation of one safety property."""

    violation: Violation
    node: int  # the state the violating input was applied to
    input: EnvInput


@dataclass
class Exploration:
    """The explored graph and everything recorded to decide liveness and print counterexamples."""

    order: HandoffOrder
    configs: tuple[InitialConfig, ...]
    states: int = 0
    transitions: int = 0
    seconds: float = 0.0
    truncated: bool = False
    stopped_early: bool = False
    parent: list[int] = field(default_factory=list)
    parent_input: list[EnvInput | None] = field(default_factory=list)
    root: list[int] = field(default_factory=list)
    depth: list[int] = field(default_factory=list)
    complete: list[bool] = field(default_factory=list)
    completion: list[Completion | None] = field(default_factory=list)
    coordinator_key: list[Hashable] = field(default_factory=list)
    fair_next: list[int] = field(default_factory=list)  # -1: no fair input (stuck)
    fair_input: list[EnvInput | None] = field(default_factory=list)
    cancel_next: list[int] = field(default_factory=list)
    cancel_input: list[EnvInput | None] = field(default_factory=list)
    terminal_next: list[tuple[int, ...]] = field(default_factory=list)
    terminal_inputs: tuple[DeliverFact, ...] = ()
    out_degree: list[int] = field(default_factory=list)
    edges: list[tuple[int, int, EnvInput]] = field(default_factory=list)
    safety: dict[str, SafetyHit] = field(default_factory=dict)

    def path(self, node: int) -> tuple[int, list[EnvInput]]:
        """(root config index, the inputs leading from that root to ``node``)."""
        steps: list[EnvInput] = []
        while self.parent[node] >= 0:
            inp = self.parent_input[node]
            assert inp is not None
            steps.append(inp)
            node = self.parent[node]
        steps.reverse()
        return self.root[node], steps

    def graph(self) -> nx.DiGraph:
        """The state graph (self-loops left out).

        Node attributes: ``depth`` (BFS distance from its root), ``root`` (index into
        ``configs``), ``complete``, ``completion`` (``"success"``/``"canceled"``/None) and ``key``
        (the coordinator's snapshot or structural key).  Edge attributes: ``input`` (the first
        :data:`EnvInput` found between the two states), ``label`` (its one-line description)
        and ``inputs`` (how many distinct inputs lead from u to v).
        """
        g = nx.DiGraph()
        for n in range(self.states):
            c = self.completion[n]
            g.add_node(n, depth=self.depth[n], root=self.root[n], complete=self.complete[n],
                       completion=None if c is None else c.value, key=self.coordinator_key[n])
        for u, v, inp in self.edges:
            if g.has_edge(u, v):
                g.edges[u, v]["inputs"] += 1
            else:
                g.add_edge(u, v, input=inp, label=describe_input(inp), inputs=1)
        return g


def explore(
    target: Target,
    order: HandoffOrder,
    monitor: Monitor,
    values: ValueSet = DEFAULT_VALUES,
    *,
    max_states: int = DEFAULT_MAX_STATES,
    stop_at_first: bool = True,
) -> Exploration:
    """Explore every state reachable from each root of ``values.configs`` (see module doc)."""
    t0 = time.perf_counter()
    ex = Exploration(order, values.configs)
    hid = values.handoff_id
    facts_by_root = [[DeliverFact(f) for f in c.facts(hid, values.foreign_id)] for c in values.configs]
    # alphabet index (start is 0) of the own-id terminal facts, per root, in the spec's order (the monitor holds the spec's terminal facts)
    terminal_by_root = [
        tuple(
            1 + i
            for name in monitor.terminal_facts
            for i, f in enumerate(facts)
            if f.fact.handoff_id == hid and type(f.fact).__name__ == name
        )
        for facts in facts_by_root
    ]
    ex.terminal_inputs = tuple(facts_by_root[0][i - 1] for i in terminal_by_root[0])
    index: dict[Hashable, int] = {}
    objs: list[CoordinatorLike | None] = []
    envs: list[EnvState] = []
    mons: list[MonitorState] = []

    def add(obj: CoordinatorLike, ckey: Hashable, env: EnvState, mon: MonitorState,
            parent: int, inp: EnvInput | None, root: int, done: bool, completion: Completion | None) -> int:
        n = len(objs)
        objs.append(obj)
        envs.append(env)
        mons.append(mon)
        ex.parent.append(parent)
        ex.parent_input.append(inp)
        ex.root.append(root)
        ex.depth.append(0 if parent < 0 else ex.depth[parent] + 1)
        ex.complete.append(done)
        ex.completion.append(completion)
        ex.coordinator_key.append(ckey)
        ex.fair_next.append(-1)
        ex.fair_input.append(None)
        ex.cancel_next.append(-1)
        ex.cancel_input.append(None)
        ex.terminal_next.append(())
        ex.out_degree.append(0)
        return n

    for r, config in enumerate(values.configs):
        try:
            obj = target.make(hid, order, config)
            ckey = target.snapshot(obj)
        except Exception as err:  # noqa: BLE001 - a target that cannot even start is bad input
            raise TargetError(f"{target.name}: building the root {config.label!r} failed: {type(err).__name__}: {err}") from None
        done, completion, _ = read_completion(obj)
        key = (r, ckey, INITIAL_ENV.key(), monitor.initial)  # the root decides the alphabet
        if key not in index:
            index[key] = add(obj, ckey, INITIAL_ENV, monitor.initial, -1, None, r, done, completion)

    snap = target.snapshot_function()
    transitions = 0
    u = 0
    stop = False
    while u < len(objs) and not stop:
        base = objs[u]
        assert base is not None
        objs[u] = None  # expanded states are not needed again; free them
        env = envs[u]
        mon = mons[u]
        ckey_u = ex.coordinator_key[u]
        root = ex.root[u]
        inputs = alphabet(env, values, facts_by_root[root])
        terminal_idx = terminal_by_root[root]
        own_terminal = frozenset(terminal_idx)
        fair = fair_input(env, hid, values.configs[root])
        cancel = cancel_input(env)
        success_phase = Monitor.reopen_armed(mon)
        term_next = [u] * len(terminal_idx)
        work = _clone(target, base)
        dirty = False
        out_deg = 0
        for idx, inp in enumerate(inputs):
            if dirty:
                work = _clone(target, base)
                dirty = False
            transitions += 1
            returned: object = None
            exc: Exception | None = None
            try:
                tp = type(inp)
                if tp is DeliverOutcome:
                    returned = work.on_action_outcome(inp.action_id, inp.outcome)  # type: ignore[union-attr]
                elif tp is DeliverFact:
                    returned = work.on_fact(inp.fact)  # type: ignore[union-attr]
                else:
                    returned = work.start()
            except Exception as e:  # noqa: BLE001 - interpreted below
                exc = e
            try:
                ckey_v = snap(work)
            except Exception as e:  # noqa: BLE001
                raise TargetError(f"{target.name}: snapshot() raised {type(e).__name__}: {e} after {describe_input(inp)}") from None
            changed = ckey_v != ckey_u
            v = u
            if (
                not changed
                and (
                    (exc is None and type(returned) is list and not returned)
                    or (type(exc) is HandoffError and type(getattr(exc, "kind", None)) is HandoffErrorKind)
                )
                and not (success_phase and idx in own_terminal)
            ):
                pass  # self-loop: ignored or rejected without a change
            else:
                dirty = True
                reaction: Reaction = interpret(returned, exc, env, hid)
                done, completion, problem = read_completion(work)
                api_problem = reaction.api_problem or problem
                answered = env.name_of(inp.action_id) if isinstance(inp, DeliverOutcome) else None
                ev = step_event(inp, hid, answered, reaction.issued, reaction.error, api_problem, changed, completion)
                mon_v, violations = safety_step(monitor, mon, ev)
                env_v = next_env(env, inp, reaction, changed)
                key = (root, ckey_v, env_v.key(), mon_v)
                found = index.get(key)
                if found is None:
                    if len(objs) >= max_states:
                        ex.truncated = True
                        stop = True
                        break
                    found = add(work, ckey_v, env_v, mon_v, u, inp, ex.root[u], done, completion)
                    index[key] = found
                v = found
                if v != u:
                    out_deg += 1
                    ex.edges.append((u, v, inp))
                for viol in violations:
                    if viol.invariant not in ex.safety:
                        ex.safety[viol.invariant] = SafetyHit(viol, u, inp)
                if violations and stop_at_first:
                    stop = True
                    ex.stopped_early = True
                    break
            if fair is not None and inp == fair:
                ex.fair_next[u] = v
                ex.fair_input[u] = inp
            if cancel is not None and inp == cancel:
                ex.cancel_next[u] = v
                ex.cancel_input[u] = inp
            if idx in own_terminal:
                term_next[terminal_idx.index(idx)] = v
        ex.terminal_next[u] = tuple(term_next)
        ex.out_degree[u] = out_deg
        u += 1
    if u < len(objs) and not stop:
        ex.truncated = True
    ex.states = len(objs)
    ex.transitions = transitions
    ex.seconds = time.perf_counter() - t0
    return ex


def _clone(target: Target, obj: CoordinatorLike) -> CoordinatorLike:
    try:
        return target.clone(obj)
    except Exception as exc:  # noqa: BLE001
        raise TargetError(f"{target.name}: copying a state failed ({target.clone_mode}): {type(exc).__name__}: {exc}") from None


@dataclass(frozen=True, slots=True)
class ChainResult:
    """Outcome of following one environment policy from a node."""

    ok: bool
    steps: int
    reason: str
    inputs: tuple[EnvInput, ...]


def follow(ex: Exploration, start: int, policy: str, goal: str, bound: int) -> ChainResult:
    """Follow the ``fair`` or ``cancel`` policy from ``start`` until the goal holds.

    goal ``complete``: ``is_complete``; goal ``canceled``: complete with completion CANCELED.
    """
    nxt = ex.fair_next if policy == "fair" else ex.cancel_next
    inp_of = ex.fair_input if policy == "fair" else ex.cancel_input
    node = start
    seen: set[int] = set()
    inputs: list[EnvInput] = []
    for steps in range(bound + 1):
        if ex.complete[node] and (goal == "complete" or ex.completion[node] is Completion.CANCELED):
            return ChainResult(True, steps, "", tuple(inputs))
        if steps == bound:
            return ChainResult(False, steps, f"not done after {bound} steps (the bound)", tuple(inputs))
        inp = inp_of[node]
        if inp is None:
            if policy == "fair":
                why = "stuck: nothing outstanding to answer and no fact due, yet not complete"
            else:
                why = "stuck: no outstanding cancel to acknowledge, yet not Complete (CANCELED)"
            return ChainResult(False, steps, why, tuple(inputs))
        inputs.append(inp)
        if nxt[node] == node:
            return ChainResult(False, steps + 1, "stuck: the coordinator ignores the cooperative input", tuple(inputs))
        seen.add(node)
        node = nxt[node]
        if node in seen:
            return ChainResult(False, steps + 1, "loops forever under the cooperative environment", tuple(inputs))
    raise AssertionError("unreachable")  # pragma: no cover


def liveness_nodes(ex: Exploration, only_finite_roots: bool) -> Sequence[int]:
    if not only_finite_roots:
        return range(ex.states)
    ok_roots = {i for i, c in enumerate(ex.configs) if c.termination_required}
    return [n for n in range(ex.states) if ex.root[n] in ok_roots]
