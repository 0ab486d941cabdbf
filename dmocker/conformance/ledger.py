"""What the validator records while it reads a log, one job per class.

:class:`HandoffBook` says where each handoff stands, :class:`ViolationLog` keeps each violated
handoff's first violation, :class:`InputErrors` the unreadable lines, :class:`TimeCheck` the
time-order anomalies and :class:`Counts` the plain counts.  The validator
(:mod:`dmocker.conformance.validator`) decides what to record; the summary
(:mod:`dmocker.conformance.summary`) turns the records into a result.
"""

from __future__ import annotations

from collections import Counter
from typing import Final

from dmocker.conformance.events import HandoffKey, LogError
from dmocker.conformance.projection import symbol_display
from dmocker.conformance.results import TimeAnomalies, Violation, ViolationKind
from dmocker.conformance.trie import OpenHandoff, PrefixTrie
from dmocker.handoff import HandoffOrder

# Finished-handoff markers; values >= 0 are the trie node a conforming handoff finished at.
VIOLATED: Final = -2
TRUNCATED: Final = -3


class HandoffBook:
    """Where each handoff stands: O(open handoffs) entries plus one small int per finished id.

    ``open`` maps an open handoff to its :class:`OpenHandoff`; ``finished`` a finished one to its
    marker (the trie node a conforming handoff ended at, :data:`VIOLATED` or :data:`TRUNCATED`);
    the finished id is kept to flag events that arrive after the handoff ended.
    ``conform_ends`` / ``truncated_ends`` count the handoffs that ended at each trie node.
    """

    __slots__ = ("open", "finished", "conform_ends", "truncated_ends", "truncated_status")

    def __init__(self) -> None:
        self.open: dict[HandoffKey, OpenHandoff] = {}
        self.finished: dict[HandoffKey, int] = {}
        self.conform_ends: Counter[int] = Counter()
        self.truncated_ends: Counter[int] = Counter()
        self.truncated_status: Counter[str] = Counter()

    def truncate(self, handoff: HandoffKey, status: str) -> None:
        """Close a handoff whose record ended ``status`` without cleanup events."""
        entry = self.open.pop(handoff, None)
        self.truncated_status[status] += 1
        if entry is None:
            return  # already violated (or, oddly, completed): counted where it is
        self.finished[handoff] = TRUNCATED
        self.truncated_ends[entry.node] += 1


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
        symbol: str, message: str | None,
    ) -> None:
        """Count the violation of ``handoff`` at trie ``node``; describe it while the list has room.

        Without a ``message`` one is written from what the spec allows at ``node``.
        """
        trie = self.trie
        order = trie.order[node]
        self.counts[(order, kind)] += 1
        self.prefixes[node] += 1
        if len(self.listed) >= self.max_listed:
            return
        proj = trie.projections[order]
        dfa = proj.states[trie.dfa[node]]
        allowed = tuple(symbol_display(s) for s in dfa.allowed)
        shown = symbol_display(symbol)
        if message is None:
            if kind is ViolationKind.EVENT_AFTER_COMPLETION:
                message = (f"{shown} after the handoff completed; "
                           + (f"the spec allows only {', '.join(allowed)} there" if allowed else "the spec allows nothing more"))
            else:
                message = f"{shown} is not allowed here; the spec allows {', '.join(allowed) or 'nothing'}"
        self.listed.append(
            Violation(handoff, order, kind, line, t_ms, shown, proj.describe(trie.dfa[node]), allowed,
                      tuple(symbol_display(s) for s in trie.seen(node)), message)
        )

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


class TimeCheck:
    """Time order, two ways.

    Across the log (``track_global``): lines whose time is before an earlier line's are counted
    (meaningless for per-request records, which turn it off).  Within a handoff: time going
    backwards is a violation (the validator records it); here it is counted with its largest step.
    """

    __slots__ = ("track_global", "last_t", "out_of_order", "backwards", "max_backwards")

    def __init__(self) -> None:
        self.track_global = True
        self.last_t = float("-inf")
        self.out_of_order = 0
        self.backwards = 0
        self.max_backwards = 0.0

    def note(self, last_t: float, out_of_order: int) -> None:
        """Take over the global bookkeeping a reader kept in locals."""
        if last_t > self.last_t:
            self.last_t = last_t
        self.out_of_order += out_of_order

    def backwards_within(self, last: float, t_ms: float) -> None:
        self.backwards += 1
        self.max_backwards = max(self.max_backwards, last - t_ms)

    def anomalies(self) -> TimeAnomalies:
        return TimeAnomalies(self.backwards, self.out_of_order, self.max_backwards)


class Counts:
    """Plain counts for the report; ``extra`` holds an adapter's own (shown under ``counts``)."""

    __slots__ = ("lines", "events", "handoffs", "after_violation", "extra")

    def __init__(self) -> None:
        self.lines = 0
        self.events = 0
        self.handoffs = 0
        #: events of a handoff already violated or truncated: its first problem is what counts
        self.after_violation = 0
        self.extra: Counter[str] = Counter()
