"""The default diagram: one cluster per spec region, showing that region's own lifecycle.

The coordinator's state is a product of six small regions (mode, source, source_cancel,
destination, destination_cancel, transfer); the product has dozens of states, but each region
has at most eight, so drawing the regions side by side — like orthogonal regions in a UML
statechart — is what a human can read.  Every spec transition or rule that *sets* a region
becomes an arrow inside that region's cluster, labelled ``event [guard] / emitted actions``:

* the event is the input (``start``, a fact, or an outcome ``Action.Kind``); progression rules
  have no event and fire on their own, so their label starts with the guard;
* the guard lists the conditions on the *other* regions (the arrow's tail already says which
  state of this region is required) and the data guards the coordinator evaluates;
* the emitted actions are those issued by that transition or rule.

Where the spec does not constrain the region being set, the arrow starts at the state the region
must be in anyway: the action's pending state for an outcome, the initial state when every other
condition names initial states (``start``), and otherwise every other state of the region.
Ignore and reject transitions change nothing, so they are not drawn (docs/protocol.md lists
them).  Arrows with the same ends are merged into one arrow with one line per cause.
"""

from __future__ import annotations

from dataclasses import dataclass

from dmocker.handoff import ProtocolSpec, Region, Transition
from dmocker.handoff import HandoffOrder

from .labels import join_events, wrap
from .model import Cluster, Diagram, Edge, Node, NodeKind, safe_id

@dataclass(frozen=True, slots=True)
class _Cause:
    """Why an arrow exists: one transition or rule, rendered as label parts."""

    rank: int
    event: str
    guard: tuple[str, ...]
    emits: tuple[str, ...]


def region_diagram(spec: ProtocolSpec, order: HandoffOrder) -> Diagram:
    """The per-region lifecycle diagram of ``order`` (deterministic: spec order throughout)."""
    arrows: dict[str, dict[tuple[str, str], list[_Cause]]] = {r.name: {} for r in spec.regions}
    steps = [t for t in (*spec.transitions, *spec.rules) if t.applies_to(order) and t.result == "step"]
    for rank, t in enumerate(steps):
        for region_name, target in t.set:
            region = spec.region(region_name)
            cause = _cause(spec, t, region_name, rank)
            for src in _sources(spec, t, region):
                if src != target:
                    arrows[region_name].setdefault((src, target), []).append(cause)
        if t.begin_cleanup:
            set_mode = dict(t.set).get("mode")
            for src, dst in spec.begin_cleanup_by_mode:
                if src != dst and (set_mode is None or set_mode == src):
                    if _mode_possible(spec, t, src):
                        cause = _cause(spec, t, "mode", rank)
                        arrows["mode"].setdefault((src, dst), []).append(cause)
    clusters = tuple(_cluster(spec, region, arrows[region.name]) for region in spec.regions)
    return Diagram(
        title=f"dmocker handoff protocol, {order.value} - one lifecycle per region",
        clusters=clusters,
        direction="LR",
    )


def _mode_possible(spec: ProtocolSpec, t: Transition, mode: str) -> bool:
    when = dict(t.when)
    return mode in when.get("mode", spec.region("mode").states)


def _sources(spec: ProtocolSpec, t: Transition, region: Region) -> tuple[str, ...]:
    when = dict(t.when)
    if region.name in when:
        return when[region.name]
    if t.event is not None and "." in t.event:
        action = spec.action(t.event.partition(".")[0])
        if action.pending is not None and action.pending[0] == region.name:
            return (action.pending[1],)
    initial = {r.name: r.initial for r in spec.regions}
    if when and all(states == (initial[name],) for name, states in when.items()):
        # Nothing moves before the first transition out of the initial product state (start).
        return (region.initial,)
    return region.states


def _cause(spec: ProtocolSpec, t: Transition, region: str, rank: int) -> _Cause:
    guard = [
        _condition(spec.region(name), states) for name, states in t.when if name != region
    ]
    guard.extend(check.guard for check in t.checks)
    return _Cause(rank=rank, event=t.event or "", guard=tuple(guard), emits=t.emit)


def _condition(region: Region, states: tuple[str, ...]) -> str:
    """``region=state``, ``region in (a, b)`` or, when shorter, ``region != x``."""
    if len(states) == 1:
        return f"{region.name}={states[0]}"
    others = tuple(s for s in region.states if s not in states)
    if len(others) == 1:
        return f"{region.name}!={others[0]}"
    if 0 < len(others) < len(states):
        return f"{region.name} not in ({', '.join(others)})"
    return f"{region.name} in ({', '.join(states)})"


def _cluster(
    spec: ProtocolSpec, region: Region, arrows: dict[tuple[str, str], list[_Cause]]
) -> Cluster:
    has_exit = {src for src, _ in arrows}
    nodes: list[Node] = []
    for state, doc in zip(region.states, region.state_docs):
        if region.name == "mode" and state in spec.final_modes:
            kind = NodeKind.FINAL
        elif region.name == "mode" and state in spec.complete_modes:
            kind = NodeKind.COMPLETE
        elif state not in has_exit:
            kind = NodeKind.FINAL
        else:
            kind = NodeKind.NORMAL
        nodes.append(Node(safe_id(region.name, state), state, kind, doc))
    position = {state: i for i, state in enumerate(region.states)}
    edges = [
        Edge(safe_id(region.name, src), safe_id(region.name, dst), label_lines(causes))
        for (src, dst), causes in sorted(arrows.items(), key=lambda kv: (position[kv[0][0]], position[kv[0][1]]))
    ]
    return Cluster(
        id=safe_id("region", region.name),
        label=region.name,
        nodes=tuple(nodes),
        edges=tuple(edges),
        initial=safe_id(region.name, region.initial),
    )


def label_lines(causes: list[_Cause]) -> tuple[str, ...]:
    """Label lines for merged causes: equal guard and emits share one line of ``a | b`` events."""
    groups: dict[tuple[tuple[str, ...], tuple[str, ...]], list[_Cause]] = {}
    for cause in sorted(causes, key=lambda c: c.rank):
        groups.setdefault((cause.guard, cause.emits), []).append(cause)
    lines: list[str] = []
    for (guard, emits), members in groups.items():
        lines.extend(wrap(join_events([m.event for m in members if m.event], guard, emits)))
    return tuple(lines)
