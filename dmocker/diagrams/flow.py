"""The condensed product view: the happy path of one order, plus where cleanup leads.

The full product machine has dozens of states, most of them cleanup bookkeeping (which cancel
is still awaited).  A reader first wants the sequence of a clean run and, for each step of it,
what a failure there costs.  This view computes exactly that from the compiled table:

* the *happy path*: the states reached from the initial one when the environment cooperates
  (every issued action answered with its first allowed outcome, every fact delivered once it is
  due), drawn one by one, each labelled with the regions that left their initial state;
* from each happy state, the inputs that abandon the path (terminal facts, FAILED outcomes),
  labelled with the cancels they issue;
* every state off the path condensed into one node per mode (``cleanup``, ``reopened``,
  ``canceled``), with one arrow per pair of condensed nodes summarising the inputs that move
  between them (acknowledging the cancels, then ``Complete``).

Since it is derived from the table, a change to the spec changes this picture, and the docs
test notices.
"""

from __future__ import annotations

from collections import deque

from dmocker.handoff import ProtocolSpec
from dmocker.handoff import CompiledTable, Step, compile_table
from dmocker.handoff import HandoffOrder

from .graph import edge_text, short_state_label
from .labels import merge_lines, wrap
from .model import Diagram, Edge, Node, NodeKind, safe_id


def cooperative_events(spec: ProtocolSpec, table: CompiledTable, state: int) -> list[int]:
    """Inputs a cooperating environment may give in ``state``: start, non-terminal facts, and
    the first allowed outcome of each pending action (in spec event order)."""
    names = ["start", *(f.name for f in spec.facts if not f.terminal)]
    for action in table.pending_actions(state):
        allowed = spec.action(action).allowed
        if allowed:
            names.append(f"{action}.{allowed[0]}")
    wanted = set(names)
    return [i for i, name in enumerate(table.events) if name in wanted]


def happy_path(spec: ProtocolSpec, table: CompiledTable) -> list[int]:
    """States of the cooperative run, in BFS order (for our spec a simple chain)."""
    seen = {table.initial}
    order = [table.initial]
    queue: deque[int] = deque([table.initial])
    while queue:
        state = queue.popleft()
        for event in cooperative_events(spec, table, state):
            entry = table.entry(state, event)
            if isinstance(entry, Step) and entry.next not in seen:
                seen.add(entry.next)
                order.append(entry.next)
                queue.append(entry.next)
    return order


def flow_diagram(spec: ProtocolSpec, order: HandoffOrder) -> Diagram:
    """Happy path + condensed cleanup for ``order``."""
    table = compile_table(spec, order)
    path = happy_path(spec, table)
    on_path = {state: i for i, state in enumerate(path)}
    mode_at = table.region_names.index("mode")
    modes = spec.region("mode").states

    def node_of(state: int) -> str:
        if state in on_path:
            return f"h{on_path[state]}"
        return safe_id("mode", table.configs[state][mode_at])

    nodes: list[Node] = []
    for i, state in enumerate(path):
        kind = NodeKind.COMPLETE if table.is_complete(state) else NodeKind.NORMAL
        label = short_state_label(table, state)
        nodes.append(Node(f"h{i}", label, kind, table.state_label(state)))
    condensed: dict[str, int] = {}
    for state in range(table.state_count):
        if state not in on_path:
            mode = table.configs[state][mode_at]
            condensed[mode] = condensed.get(mode, 0) + 1
    mode_docs = dict(zip(spec.region("mode").states, spec.region("mode").state_docs))
    for mode in modes:
        if mode in condensed:
            count = condensed[mode]
            final = mode in spec.final_modes
            kind = NodeKind.FINAL if final else NodeKind.NORMAL
            label = f"mode={mode}\n({count} states)" if count > 1 else f"mode={mode}"
            nodes.append(Node(safe_id("mode", mode), label, kind, mode_docs[mode]))

    arrows: dict[tuple[str, str], list[str]] = {}
    for state in range(table.state_count):
        src = node_of(state)
        for event, entry in enumerate(table.rows[state]):
            if not isinstance(entry, Step):
                continue
            dst = node_of(entry.next)
            if src == dst:
                continue  # bookkeeping inside a condensed node (or a logged no-op)
            line = edge_text(table.events[event], entry.emits)
            arrows.setdefault((src, dst), []).append(line)
    position = {node.id: i for i, node in enumerate(nodes)}
    edges = tuple(
        Edge(
            src,
            dst,
            tuple(line for text in merge_lines(lines) for line in wrap(text)),
            primary=src.startswith("h") and dst.startswith("h"),
        )
        for (src, dst), lines in sorted(arrows.items(), key=lambda kv: (position[kv[0][0]], position[kv[0][1]]))
    )
    return Diagram(
        title=f"dmocker handoff protocol, {order.value} - happy path and cleanup",
        nodes=tuple(nodes),
        edges=edges,
        initial="h0",
        direction="TB",
    )
