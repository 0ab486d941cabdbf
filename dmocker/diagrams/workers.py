"""The workers' own clocks (the spec's ``workers`` section): one cluster per worker machine.

Every ``commands`` entry and every ``moves`` variant that moves a machine in some configuration
the spec names (as ``dmocker check --clocks`` explores them) becomes an arrow in that machine's
cluster.  A command's label is ``Action / reply``; a move's is
``(kind) id [conditions on the other machines] if parameters / fact``, so the timers
(``(timer)``) and faults (``(fault)``) stand out from progress.  Arrows with the same ends merge, one line per
cause.
"""

from __future__ import annotations

from dmocker.check.clocks import carried_out
from dmocker.handoff import Machine, Rule, WorkersSpec, WorkerState

from .labels import wrap
from .model import Cluster, Diagram, Edge, Node, NodeKind, safe_id


def _conditions(workers: WorkersSpec, rule: Rule, machine: int) -> str:
    states: list[str] = []
    for m, allowed in rule.guard.when:
        if m != machine:
            names = [s for s in workers.machines[m].states if s in allowed]
            states.append(f"{workers.machines[m].name}{'=' + names[0] if len(names) == 1 else ' in (' + ', '.join(names) + ')'}")
    if rule.unless:
        states.append("not renewed" if any(p == "hold_timer" for u in rule.unless for p, _ in u.params) else "unless ...")
    params = [f"{p}={'|'.join(v for v in workers.parameters[p] if v in values)}" for p, values in rule.guard.params]
    out = f" [{', '.join(states)}]" if states else ""
    return out + (f" if {', '.join(params)}" if params else "")


def _label(workers: WorkersSpec, rule: Rule, machine: int) -> str:
    cond = _conditions(workers, rule, machine)
    if rule.kind is None:  # a command
        return f"{rule.name}{cond} / {rule.reply.value if rule.reply is not None else '-'}"
    fact = f" / {rule.fact}" if rule.fact else ""
    return f"({rule.kind.value}) {rule.name}{cond}{fact}"


def _cluster(workers: WorkersSpec, index: int, machine: Machine, seen: set[tuple[Rule, WorkerState, WorkerState]]) -> Cluster:
    arrows: dict[tuple[str, str], list[str]] = {}
    rules = (*workers.commands, *workers.moves)
    pos = {s: i for i, s in enumerate(machine.states)}
    steps = sorted({(rules.index(r), b[index], a[index]) for r, b, a in seen if b[index] != a[index]},
                   key=lambda x: (x[0], pos[x[1]], pos[x[2]]))
    for rank, src, target in steps:
        label = _label(workers, rules[rank], index)
        lines = arrows.setdefault((src, target), [])
        if label not in lines:
            lines.append(label)
    has_out = {src for src, _ in arrows}
    nodes = tuple(
        Node(safe_id(machine.name, s), s + (f" ({machine.kvpoll[s]})" if s in machine.kvpoll else ""),
             NodeKind.FINAL if s not in has_out and s != machine.initial else NodeKind.NORMAL, machine.docs.get(s, ""))
        for s in machine.states
    )
    edges = tuple(
        Edge(safe_id(machine.name, src), safe_id(machine.name, dst), tuple(line for cause in causes for line in wrap(cause)))
        for (src, dst), causes in arrows.items()
    )
    return Cluster(safe_id("machine", machine.name), machine.name, nodes, edges, safe_id(machine.name, machine.initial))


def workers_diagram(workers: WorkersSpec) -> Diagram:
    """The worker machines side by side (deterministic: spec order throughout); only the steps
    some configuration of the spec reaches are drawn (from ``dmocker check --clocks``'s search)."""
    seen = carried_out(workers)
    return Diagram(
        "dmocker handoff protocol - the workers' own clocks",
        tuple(_cluster(workers, i, m, seen) for i, m in enumerate(workers.machines)),
        direction="LR",
    )


__all__ = ["workers_diagram"]
