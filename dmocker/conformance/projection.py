"""The observable projection of the handoff protocol: which event-log sequences are legal.

The compiled table says, for every reachable coordinator state and every input, what the
coordinator does and which observable kinds it logs (``Step.logs``).  A log shows only those
kinds, never the inputs, so the set of legal logs is the language of a nondeterministic
automaton:

* inputs that log nothing (``start``) are silent (epsilon) moves;
* a step that logs several kinds (``source_released`` then ``completed``) is a chain of
  single-symbol moves through intermediate nodes;
* the same kind may come from different inputs (``failed`` is both the Failed fact and the
  FAILED outcome of any non-cancel action), so one log prefix can leave the coordinator in
  several states.

We determinise it once per order (subset construction over the reachable states, with the
silent closure) so that validating a log is one dict lookup per event.  The symbols are the
spec's observable kinds, with ``completed`` split by its detail (``completed:success`` and
``completed:canceled``) because the two lead to different futures.

The spec's worker kinds (``observable.worker_kinds``: a timer fired, a fault hit a worker) are
not coordinator steps: each is a self-loop of every coordinator state its ``when`` admits, so it
may appear there and changes nothing.  They are kept out of ``allowed`` (what the coordinator
may do next), so generated lifecycles and "expected next" lists are the coordinator's alone.

Nothing here is a second hand-written table: every edge comes from ``compile_table`` and the
spec's ``worker_kinds``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from dmocker.handoff import ProtocolSpec, WorkerKind, derived, load_spec
from dmocker.handoff import CompiledTable, Step, compile_table
from dmocker.handoff import HandoffOrder
from dmocker.conformance.events import COMPLETION_KIND
from dmocker.conformance.events import completed_symbol as completed_symbol

#: A node of the nondeterministic automaton: a table state and the kinds still to be logged
#: by the step that led there (empty for a real coordinator state).
Node = tuple[int, tuple[str, ...]]

COMPLETED: Final = COMPLETION_KIND


def symbol_display(symbol: str) -> str:
    """How a symbol reads in reports: ``completed(success)`` rather than ``completed:success``."""
    if symbol.startswith(COMPLETED + ":"):
        return f"{COMPLETED}({symbol[len(COMPLETED) + 1:]})"
    return symbol


@dataclass(frozen=True, slots=True)
class _Edge:
    """One move of the nondeterministic automaton on a symbol (or silently)."""

    target: Node
    steps: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DfaState:
    """A set of coordinator states one log prefix may have left the coordinator in.

    ``nodes`` is sorted (deterministic); ``accepting`` is true when some node is a complete
    coordinator state, i.e. the log may end here; ``allowed`` are the symbols that may come next,
    in the spec's symbol order; ``finished_canceled`` marks a state after ``completed(canceled)``
    (nothing at all may follow); ``after_completion`` marks a state whose every node is complete.
    """

    index: int
    nodes: tuple[Node, ...]
    accepting: bool
    after_completion: bool
    allowed: tuple[str, ...]
    transitions: dict[str, int]


class Projection:
    """The determinised observable automaton of one order.

    Build it with :func:`projection_for` (cached); the validator only reads ``states``,
    ``initial`` and ``symbols``.
    """

    def __init__(self, table: CompiledTable, symbols: tuple[str, ...],
                 worker_kinds: tuple[WorkerKind, ...] = ()) -> None:
        self.table = table
        self.order = table.order
        self.symbols = symbols
        #: the worker kinds this order's logs may carry (``observable.worker_kinds``)
        self.worker_kinds = {k.name: k for k in worker_kinds if self.order in k.orders}
        #: the other worker kinds -> the orders they belong to, for error messages
        self.other_orders_worker_kinds = {k.name: " and ".join(f"{o.value} handoffs" for o in k.orders)
                                          for k in worker_kinds if self.order not in k.orders}
        self._moves: dict[Node, tuple[tuple[str | None, _Edge], ...]] = {}
        self.states: list[DfaState] = []
        self._build()

    # --- the nondeterministic automaton -----------------------------------------------------

    def moves(self, node: Node) -> tuple[tuple[str | None, _Edge], ...]:
        """Outgoing moves of ``node``: (symbol, edge), symbol None for a silent move."""
        cached = self._moves.get(node)
        if cached is not None:
            return cached
        state, rest = node
        out: list[tuple[str | None, _Edge]] = []
        if rest:
            out.append((rest[0], _Edge((state, rest[1:]), ())))
        else:
            table = self.table
            for event in range(len(table.events)):
                entry = table.entry(state, event)
                if not isinstance(entry, Step):
                    continue  # ignored, rejected or not applicable: nothing happens, nothing logged
                logged = tuple(self._symbol(kind, entry.next) for kind in entry.logs)
                if not logged:
                    if entry.next != state:
                        out.append((None, _Edge((entry.next, ()), entry.steps)))
                    continue
                out.append((logged[0], _Edge((entry.next, logged[1:]), entry.steps)))
        result = tuple(out)
        self._moves[node] = result
        return result

    def _symbol(self, kind: str, next_state: int) -> str:
        if kind != COMPLETED:
            return kind
        completion = self.table.completion(next_state)
        if completion is None:  # the spec logs "completed" only when a Complete is emitted
            raise ValueError(f"step logs 'completed' into a state without completion: "
                             f"{self.table.state_label(next_state)}")
        return completed_symbol(completion.value)

    def closure(self, nodes: set[Node]) -> frozenset[Node]:
        """``nodes`` plus everything reachable from them by silent moves."""
        stack = sorted(nodes)
        seen = set(nodes)
        while stack:
            node = stack.pop()
            for symbol, edge in self.moves(node):
                if symbol is None and edge.target not in seen:
                    seen.add(edge.target)
                    stack.append(edge.target)
        return frozenset(seen)

    def is_accepting_node(self, node: Node) -> bool:
        return not node[1] and self.table.is_complete(node[0])

    def worker_kind_holds(self, kind: WorkerKind, node: Node) -> bool:
        """Whether ``kind`` may appear at ``node``: between coordinator steps, in a state it admits."""
        return not node[1] and kind.holds_in(self.table.region_states(node[0]))

    # --- subset construction ------------------------------------------------------------------

    def _build(self) -> None:
        index: dict[frozenset[Node], int] = {}
        pending: list[frozenset[Node]] = []

        def intern(subset: frozenset[Node]) -> int:
            found = index.get(subset)
            if found is None:
                found = len(index)
                index[subset] = found
                pending.append(subset)
            return found

        intern(self.closure({(self.table.initial, ())}))
        raw: list[tuple[frozenset[Node], dict[str, int]]] = []
        cursor = 0
        while cursor < len(pending):
            subset = pending[cursor]
            cursor += 1
            targets: dict[str, set[Node]] = {}
            for node in sorted(subset):
                for symbol, edge in self.moves(node):
                    if symbol is not None:
                        targets.setdefault(symbol, set()).add(edge.target)
            trans: dict[str, int] = {}
            for symbol in self.symbols:
                if symbol in targets:
                    trans[symbol] = intern(self.closure(targets[symbol]))
            unknown = sorted(set(targets) - set(self.symbols))
            if unknown:
                raise ValueError(f"the table logs kinds the spec does not list as observable: {unknown}")
            own = len(raw)
            for name, kind in self.worker_kinds.items():
                if any(self.worker_kind_holds(kind, node) for node in subset):
                    trans[name] = own
            raw.append((subset, trans))
        for i, (subset, trans) in enumerate(raw):
            nodes = tuple(sorted(subset))
            accepting = any(self.is_accepting_node(n) for n in nodes)
            self.states.append(
                DfaState(
                    index=i,
                    nodes=nodes,
                    accepting=accepting,
                    after_completion=all(self.is_accepting_node(n) for n in nodes),
                    allowed=tuple(s for s in self.symbols if s in trans and s not in self.worker_kinds),
                    transitions=trans,
                )
            )

    @property
    def initial(self) -> int:
        return 0

    # --- reading it back ----------------------------------------------------------------------

    def describe(self, dfa: int) -> tuple[str, ...]:
        """Human labels of the coordinator states a DFA state stands for (sorted, unique)."""
        labels: set[str] = set()
        for state, rest in self.states[dfa].nodes:
            label = self.table.state_label(state)
            if rest:
                label += " (mid-step, still to log: " + ", ".join(symbol_display(s) for s in rest) + ")"
            labels.add(label)
        return tuple(sorted(labels))

    def observable_transitions(self) -> tuple[str, ...]:
        """Spec transition/rule ids that can fire on some logged path (coverage denominator)."""
        used: set[str] = set()
        for dfa in self.states:
            for node in dfa.nodes:
                for _symbol, edge in self.moves(node):
                    used.update(edge.steps)
        return tuple(t for t in self.table.transition_ids if t in used)

    def exercised(self, symbols: tuple[str, ...], *, must_accept: bool) -> tuple[frozenset[str], frozenset[str]]:
        """Which transitions a logged sequence exercised: (on every explaining path, on some).

        A path explains the sequence if it consumes exactly its symbols (silent moves anywhere)
        and, when ``must_accept``, ends in a complete state.  The two sets differ only when the
        log is ambiguous (``failed`` as a fact or as a FAILED outcome).
        """
        Sets = tuple[frozenset[str], frozenset[str]]

        def merge(into: dict[Node, Sets], node: Node, sets: Sets) -> None:
            old = into.get(node)
            into[node] = sets if old is None else (old[0] & sets[0], old[1] | sets[1])

        def close(front: dict[Node, Sets]) -> dict[Node, Sets]:
            result = dict(front)
            stack = sorted(front)
            while stack:
                node = stack.pop()
                sets = result[node]
                for symbol, edge in self.moves(node):
                    if symbol is None:
                        new = (sets[0] | frozenset(edge.steps), sets[1] | frozenset(edge.steps))
                        old = result.get(edge.target)
                        merged = new if old is None else (old[0] & new[0], old[1] | new[1])
                        if merged != old:
                            result[edge.target] = merged
                            stack.append(edge.target)
            return result

        empty: frozenset[str] = frozenset()
        front = close({(self.table.initial, ()): (empty, empty)})
        for symbol in symbols:
            worker_kind = self.worker_kinds.get(symbol)
            if worker_kind is not None:  # a self-loop: keeps the paths where it may appear
                front = {node: sets for node, sets in front.items() if self.worker_kind_holds(worker_kind, node)}
                continue
            nxt: dict[Node, Sets] = {}
            for node in sorted(front):
                sets = front[node]
                for sym, edge in self.moves(node):
                    if sym == symbol:
                        merge(nxt, edge.target, (sets[0] | frozenset(edge.steps), sets[1] | frozenset(edge.steps)))
            front = close(nxt)
        ends = [sets for node, sets in sorted(front.items()) if not must_accept or self.is_accepting_node(node)]
        if not ends:
            return empty, empty
        every = ends[0][0]
        some = ends[0][1]
        for sets in ends[1:]:
            every &= sets[0]
            some |= sets[1]
        return every, some


def spec_symbols(spec: ProtocolSpec) -> tuple[str, ...]:
    """The projection's alphabet in the spec's order, ``completed`` split by detail."""
    out: list[str] = []
    for kind in spec.log_kinds:
        if kind == COMPLETED:
            out.extend(completed_symbol(d) for d in spec.completed_details)
        else:
            out.append(kind)
    return tuple(out)


def projection_for(order: HandoffOrder, spec: ProtocolSpec | None = None) -> Projection:
    """The determinised projection of ``order`` (built once per spec object and order)."""
    the_spec = spec if spec is not None else load_spec()
    return derived(the_spec, ("projection", order),
                   lambda: Projection(compile_table(the_spec, order), spec_symbols(the_spec), the_spec.worker_kinds))


def success_lifecycle(projection: Projection) -> tuple[str, ...]:
    """The shortest log that ends ``completed(success)``: the order's clean lifecycle.

    Breadth-first over the projection in symbol order, so it is deterministic.  Adapters use
    it to order events that share a timestamp (they happened in one drain of a simulator, and
    the spec says in which order a drain produces them).
    """
    goal = completed_symbol("success")
    start = projection.initial
    paths: dict[int, tuple[str, ...]] = {start: ()}
    frontier = [start]
    while frontier:
        nxt: list[int] = []
        for dfa in frontier:
            state = projection.states[dfa]
            for symbol in state.allowed:
                target = state.transitions[symbol]
                path = paths[dfa] + (symbol,)
                if symbol == goal and projection.states[target].accepting:
                    return path
                if target not in paths:
                    paths[target] = path
                    nxt.append(target)
        frontier = nxt
    raise ValueError(f"the {projection.order.value} projection has no successful run")
