"""The end of a validation: the validator's records turned into a :class:`ConformanceResult`.

Verdicts and lifecycles are counted per trie node (handoffs that ended the same way share a
node), coverage is credited once per node from the projection, and everything is put in a
deterministic order for the report writers.
"""

from __future__ import annotations

from collections import Counter

from dmocker.conformance.events import HandoffKey
from dmocker.conformance.ledger import InputErrors, ReadStats, Truncations, ViolationLog
from dmocker.conformance.projection import symbol_display
from dmocker.conformance.results import ConformanceResult, Coverage, Lifecycle, Unfinished, Verdict
from dmocker.conformance.trie import OpenHandoff, PrefixTrie
from dmocker.handoff import HandoffOrder


class _Tally:
    """Verdict counts (overall and per order), lifecycles and exercised transitions, node by node."""

    def __init__(self, trie: PrefixTrie) -> None:
        self.trie = trie
        self.verdicts: Counter[str] = Counter()
        self.by_order: dict[str, Counter[str]] = {o.value: Counter() for o in HandoffOrder}
        self.lifecycles: list[Lifecycle] = []
        self.exercised: dict[HandoffOrder, set[str]] = {o: set() for o in HandoffOrder}
        self.possibly: dict[HandoffOrder, set[str]] = {o: set() for o in HandoffOrder}
        self.seen_orders: set[HandoffOrder] = set()

    def count(self, order: HandoffOrder, verdict: Verdict, n: int) -> None:
        self.seen_orders.add(order)
        self.verdicts[verdict.value] += n
        self.by_order[order.value][verdict.value] += n

    def ended(self, node: int, verdict: Verdict, n: int) -> None:
        """``n`` handoffs ended at ``node`` with ``verdict``: a lifecycle, and its coverage."""
        trie = self.trie
        order = trie.order[node]
        self.count(order, verdict, n)
        self.lifecycles.append(Lifecycle(order, verdict, tuple(symbol_display(s) for s in trie.seen(node)), n))
        self.credit(node, verdict is Verdict.CONFORMS)

    def credit(self, node: int, must_accept: bool) -> None:
        trie = self.trie
        order = trie.order[node]
        every, some = trie.projections[order].exercised(trie.seen(node), must_accept=must_accept)
        self.exercised[order] |= every
        self.possibly[order] |= some

    def coverage(self) -> tuple[Coverage, ...]:
        found = []
        for order in HandoffOrder:
            if order not in self.seen_orders:
                continue
            proj = self.trie.projections[order]
            observable = proj.observable_transitions()
            ex = self.exercised[order]
            found.append(
                Coverage(
                    order=order,
                    spec_total=len(proj.table.transition_ids),
                    observable=observable,
                    exercised=tuple(t for t in observable if t in ex),
                    possibly=tuple(t for t in observable if t in self.possibly[order] and t not in ex),
                )
            )
        return tuple(found)


def summarize(
    *,
    order: HandoffOrder | None,
    max_listed: int,
    trie: PrefixTrie,
    open_: dict[HandoffKey, OpenHandoff],
    conform_ends: Counter[int],
    truncations: Truncations,
    violations: ViolationLog,
    errors: InputErrors,
    read: ReadStats,
) -> ConformanceResult:
    """The result of everything recorded so far (the records are only read).

    ``open_`` are the handoffs still open, ``conform_ends`` how many conforming handoffs ended at
    each trie node.
    """
    tally = _Tally(trie)
    for node, n in sorted(conform_ends.items()):
        if n > 0:
            tally.ended(node, Verdict.CONFORMS, n)
    for node, n in sorted(violations.prefixes.items()):
        tally.credit(node, False)
    violation_counts = violations.by_order_and_kind()
    for (violated, _kind), n in violation_counts:
        if n:
            tally.count(violated, Verdict.VIOLATES, n)
    open_ends: Counter[int] = Counter()
    unfinished: list[Unfinished] = []
    for handoff, entry in open_.items():
        open_ends[entry.node] += 1
        if len(unfinished) < max_listed:
            unfinished.append(_unfinished(trie, handoff, entry.node, entry.first_line, entry.last_line))
    for node, n in sorted(open_ends.items()):
        tally.ended(node, Verdict.INCOMPLETE, n)
    for node, n in sorted(truncations.ends.items()):
        tally.ended(node, Verdict.TRUNCATED, n)
    tally.lifecycles.sort(key=lambda lc: (lc.order.value, lc.verdict.value, -lc.count, lc.events))
    return ConformanceResult(
        order=order,
        lines=read.lines,
        events=read.events,
        handoffs=read.handoffs,
        verdicts={v.value: tally.verdicts.get(v.value, 0) for v in Verdict},
        by_order={o: {v.value: c.get(v.value, 0) for v in Verdict} for o, c in tally.by_order.items() if sum(c.values())},
        violation_counts=tuple((o, k, n) for (o, k), n in violation_counts if n),
        violations=tuple(violations.listed),
        unfinished=tuple(unfinished),
        lifecycles=tuple(tally.lifecycles),
        coverage=tally.coverage(),
        time=read.time_anomalies(),
        input_errors=tuple(errors.listed),
        input_error_count=errors.count,
        aborted=errors.aborted,
        events_after_violation=read.after_violation,
        truncated_by_status=dict(sorted(truncations.status.items())),
        extra=dict(sorted(read.extra.items())),
    )


def _unfinished(trie: PrefixTrie, handoff: HandoffKey, node: int, first: int, last: int) -> Unfinished:
    """An open handoff at the end of the log (incomplete: a leak)."""
    order = trie.order[node]
    proj = trie.projections[order]
    return Unfinished(
        handoff, order, Verdict.INCOMPLETE, first, last,
        tuple(symbol_display(s) for s in trie.seen(node)),
        proj.describe(trie.dfa[node]),
        tuple(symbol_display(s) for s in proj.states[trie.dfa[node]].allowed),
        None,
    )
