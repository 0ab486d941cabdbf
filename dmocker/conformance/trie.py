"""The legal log prefixes of both handoff orders, interned in one trie, and an open handoff's place in it.

A handoff's trie node *is* its state: it fixes the projection state and remembers the sequence
so far, so the validator keeps one small int per handoff and still reports lifecycles and
coverage.  Nodes are created on first use (the projection is acyclic, so there are finitely
many).
"""

from __future__ import annotations

from dmocker.conformance.projection import Projection
from dmocker.handoff import HandoffOrder


class PrefixTrie:
    """Legal log prefixes of both orders, interned: node -> (order, projection state, parent).

    The per-node facts are parallel lists indexed by node (``next`` and ``accepting`` are what a
    streaming reader's fast path reads, see :class:`dmocker.conformance.validator.FastPath`).
    """

    def __init__(self, projections: dict[HandoffOrder, Projection]) -> None:
        self.projections = projections
        self.order: list[HandoffOrder] = []
        self.dfa: list[int] = []
        self.parent: list[int] = []
        self.symbol: list[str] = []
        self.next: list[dict[str, int]] = []
        self.accepting: list[bool] = []
        self.roots: dict[HandoffOrder, int] = {}
        for order, proj in projections.items():
            self.roots[order] = self._add(order, proj.initial, -1, "")

    def _add(self, order: HandoffOrder, dfa: int, parent: int, symbol: str) -> int:
        state = self.projections[order].states[dfa]
        self.order.append(order)
        self.dfa.append(dfa)
        self.parent.append(parent)
        self.symbol.append(symbol)
        self.next.append({})
        self.accepting.append(state.accepting)
        return len(self.dfa) - 1

    def advance(self, node: int, symbol: str) -> int:
        """The child of ``node`` on ``symbol``, or -1 if the spec does not allow it there."""
        order = self.order[node]
        target = self.projections[order].states[self.dfa[node]].transitions.get(symbol)
        if target is None:
            return -1
        child = self._add(order, target, node, symbol)
        self.next[node][symbol] = child
        return child

    def seen(self, node: int) -> tuple[str, ...]:
        out: list[str] = []
        while self.parent[node] >= 0:
            out.append(self.symbol[node])
            node = self.parent[node]
        return tuple(reversed(out))


class OpenHandoff:
    """The mutable state of one open handoff (slotted: this is the O(open handoffs) memory).

    ``node`` is its trie node (the legal prefix seen so far), ``last_t`` / ``last_line`` its
    latest event, ``engine`` the engine its first event named.
    """

    __slots__ = ("node", "last_t", "first_line", "engine", "last_line")

    def __init__(self, node: int, t_ms: float, line: int, engine: str | None) -> None:
        self.node = node
        self.last_t = t_ms
        self.first_line = line
        self.engine = engine
        self.last_line = line
