"""What the validator records while it reads a log, besides where each handoff stands.

:class:`ViolationLog` keeps each violated handoff's first violation, :class:`Truncations` the
handoffs a record closed early, :class:`InputErrors` the unreadable lines and :class:`ReadStats`
the counts of what was read and its time order.  The validator
(:mod:`dmocker.conformance.validator`) decides what to record; the summary
(:mod:`dmocker.conformance.summary`) turns the records into a result.
"""

from __future__ import annotations

from collections import Counter

from dmocker.conformance.events import HandoffKey, LogError
from dmocker.conformance.projection import symbol_display
from dmocker.conformance.results import TimeAnomalies, Violation, ViolationKind
from dmocker.conformance.trie import PrefixTrie
from dmocker.handoff import HandoffOrder


class Truncations:
    """Handoffs closed by a record that ended failed, rejected… without cleanup events.

    ``ends`` counts them by the trie node they stopped at; ``status`` counts every such record
    by its status (also those whose handoff had already violated).
    """

    __slots__ = ("ends", "status")

    def __init__(self) -> None:
        self.ends: Counter[int] = Counter()
        self.status: Counter[str] = Counter()


class ViolationLog:
    """Each violated handoff's first violation: every one counted, the first ``max_listed`` in full.

    Counted by (order, kind) for the verdicts and by the trie node it broke at for coverage.
    """

    __slots__ = ("trie", "max_listed", "counts", "prefixes", "listed")

    def __init__(self, trie: PrefixTrie, max_listed: int) -> None:
        self.trie = trie
        self.max_listed = max_listed
        self.counts: Counter[tuple[HandoffOrder, ViolationKind]] = Counter()
        self.prefixes: Counter[int] = Counter()
        self.listed: list[Violation] = []

    def record(
        self, handoff: HandoffKey, node: int, kind: ViolationKind, line: int, t_ms: float,
        symbol: str, message: str | None, *, describe: bool = False,
    ) -> Violation | None:
        """Count the violation of ``handoff`` at trie ``node``; describe it while the list has room
        (or when ``describe``: a live listener wants each one) and return the description.

        Without a ``message`` one is written from what the spec allows at ``node``.
        """
        trie = self.trie
        order = trie.order[node]
        self.counts[(order, kind)] += 1
        self.prefixes[node] += 1
        room = len(self.listed) < self.max_listed
        if not room and not describe:
            return None
        proj = trie.projections[order]
        dfa = proj.states[trie.dfa[node]]
        allowed = tuple(symbol_display(s) for s in dfa.allowed)
        shown = symbol_display(symbol)
        if message is None:
            if kind is ViolationKind.EVENT_AFTER_COMPLETION:
                message = (f"{shown} after the handoff completed; "
                           + (f"the spec allows only {', '.join(allowed)} there" if allowed else "the spec allows nothing more"))
            elif symbol in proj.worker_kinds:
                message = (f"{shown} is not allowed here: the spec's worker kind happens only when "
                           f"{proj.worker_kinds[symbol].describe_when()}; the spec allows "
                           f"{', '.join(allowed) or 'nothing'}")
            elif symbol in proj.other_orders_worker_kinds:
                message = f"{shown} is not allowed here: the spec's worker kind happens only in {proj.other_orders_worker_kinds[symbol]}"
            else:
                message = f"{shown} is not allowed here; the spec allows {', '.join(allowed) or 'nothing'}"
        violation = Violation(handoff, order, kind, line, t_ms, shown, proj.describe(trie.dfa[node]), allowed,
                              tuple(symbol_display(s) for s in trie.seen(node)), message)
        if room:
            self.listed.append(violation)
        return violation

    def by_order_and_kind(self) -> list[tuple[tuple[HandoffOrder, ViolationKind], int]]:
        """The counts in report order (order, then kind, by value)."""
        return sorted(self.counts.items(), key=lambda kv: (kv[0][0].value, kv[0][1].value))


class InputErrors:
    """Unreadable lines: all counted, the first ``max_listed`` kept; ``aborted`` if the run stopped at one."""

    __slots__ = ("max_listed", "listed", "count", "aborted")

    def __init__(self, max_listed: int) -> None:
        self.max_listed = max_listed
        self.listed: list[LogError] = []
        self.count = 0
        self.aborted = False

    def add(self, error: LogError, abort: bool) -> None:
        self.count += 1
        if len(self.listed) < self.max_listed:
            self.listed.append(error)
        if abort:
            self.aborted = True


class ReadStats:
    """Counts of what was read, and its time order.

    ``lines``, ``events`` and ``handoffs`` (new ones) as read; ``after_violation`` counts the
    events of a handoff already violated or truncated (its first problem is what counts);
    ``extra`` an adapter's own counts (shown under ``counts``).

    Time order, two ways.  Across the log (``track_global``): lines whose time is before an
    earlier line's are counted (meaningless for per-request records, which turn it off);
    ``last_t`` is the latest time so far.  Within a handoff: time going backwards is a violation
    (the validator records it); here it is counted with its largest step.
    """

    __slots__ = (
        "lines", "events", "handoffs", "after_violation", "extra",
        "track_global", "last_t", "out_of_order", "backwards", "max_backwards",
    )

    def __init__(self) -> None:
        self.lines = 0
        self.events = 0
        self.handoffs = 0
        self.after_violation = 0
        self.extra: Counter[str] = Counter()
        self.track_global = True
        self.last_t = float("-inf")
        self.out_of_order = 0
        self.backwards = 0
        self.max_backwards = 0.0

    def backwards_within(self, last: float, t_ms: float) -> None:
        self.backwards += 1
        self.max_backwards = max(self.max_backwards, last - t_ms)

    def time_anomalies(self) -> TimeAnomalies:
        return TimeAnomalies(self.backwards, self.out_of_order, self.max_backwards)
