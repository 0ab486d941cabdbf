"""Streaming trace validation: does each handoff in a log follow the spec's observable projection?

One pass, events of many handoffs interleaved.  Memory is O(open handoffs) plus one small int
per finished id (needed to flag events that arrive after a handoff completed), plus one node per
distinct legal log prefix (finite: the projection is acyclic) in a prefix trie
(:mod:`dmocker.conformance.trie`).  The trie node of a handoff *is* its state: it fixes the
projection state and remembers the sequence so far, so the report can give lifecycles and
coverage without storing any per-handoff history.

The work per event is a dict lookup for the handoff and one for the trie edge; the projection
is consulted only the first time a (prefix, symbol) pair is seen.

The validator is a pure core: callers parse lines (``events.parse_line`` or an adapter) and feed
it; it decides each step and records what it finds in the ledger's parts
(:mod:`dmocker.conformance.ledger`); :meth:`Validator.result` summarizes them
(:mod:`dmocker.conformance.summary`) as plain values (:mod:`dmocker.conformance.results`) that
the report writers render.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Iterable

from dmocker.conformance.events import HandoffKey, LogError, LogEvent
from dmocker.conformance.ledger import InputErrors, ReadStats, Truncations, ViolationLog
from dmocker.conformance.projection import projection_for
from dmocker.conformance.results import (
    ConformanceResult,
    Coverage,
    Lifecycle,
    TimeAnomalies,
    Unfinished,
    Verdict,
    Violation,
    ViolationKind,
)
from dmocker.conformance.summary import summarize
from dmocker.conformance.trie import OpenHandoff, PrefixTrie
from dmocker.handoff import HandoffOrder, ProtocolSpec, load_spec, order_for_engine

# Finished-handoff markers; values >= 0 are the trie node a conforming handoff finished at.
_VIOLATED: Final = -2
_TRUNCATED: Final = -3

# The result types are defined in results.py; importing them from here keeps working.
__all__ = [
    "ConformanceResult",
    "Coverage",
    "FastPath",
    "Lifecycle",
    "OpenHandoff",
    "TimeAnomalies",
    "Unfinished",
    "Validator",
    "Verdict",
    "Violation",
    "ViolationKind",
    "validate_events",
]


@dataclass(frozen=True, slots=True)
class FastPath:
    """The validator state a streaming reader may update in place (:meth:`Validator.fast_path`).

    The contract: a reader may take a *legal* step itself — the first event of a new handoff
    (``roots`` of its order, then ``next``) or the next event of an open one — exactly as
    :meth:`Validator.feed_raw` would: move ``open[h].node`` / ``last_t`` / ``last_line``, or on
    an accepting node (``accepting``) move the handoff from ``open`` to ``finished`` and count
    the node in ``conform_ends``; a new handoff enters ``open`` as an :class:`OpenHandoff`.
    Anything else (a violation, an unknown engine, time going backwards) goes through
    ``feed_raw``.  Afterwards it reports its counts with :meth:`Validator.note_time` and
    :meth:`Validator.count_fast`.  A test runs both paths on the same logs.
    """

    open: dict[HandoffKey, OpenHandoff]
    finished: dict[HandoffKey, int]
    conform_ends: Counter[int]
    next: list[dict[str, int]]
    accepting: list[bool]
    roots: dict[HandoffOrder, int]


class Validator:
    """Feed events in log order; call :meth:`result` at the end.

    ``order`` fixes the order of every handoff; None takes it from the ``engine`` of each
    handoff's first event (vLLM/TRT-LLM source-first, SGLang destination-first).
    ``max_listed`` bounds the violations and unfinished handoffs listed in full (counts are
    always complete).
    """

    def __init__(
        self,
        order: HandoffOrder | None = None,
        *,
        spec: ProtocolSpec | None = None,
        max_listed: int = 100,
    ) -> None:
        spec = spec if spec is not None else load_spec()
        self.order = order
        self.max_listed = max_listed
        self._trie = PrefixTrie({o: projection_for(o, spec) for o in HandoffOrder})
        # Where each handoff stands (the FastPath contract): open ones by their entry, finished
        # ones by a marker (see _VIOLATED), and how many conforming ones ended at each trie node.
        self._open: dict[HandoffKey, OpenHandoff] = {}
        self._finished: dict[HandoffKey, int] = {}
        self._conform_ends: Counter[int] = Counter()
        self._truncations = Truncations()
        self._violations = ViolationLog(self._trie, max_listed)
        self._errors = InputErrors(max_listed)
        self._read = ReadStats()
        #: called with each handoff's first violation as it is found (a live checker's hook)
        self.on_violation: Callable[[Violation], None] | None = None

    @property
    def track_global_time(self) -> bool:
        """Count lines whose time is before an earlier line's (meaningless for per-request records)."""
        return self._read.track_global

    @track_global_time.setter
    def track_global_time(self, value: bool) -> None:
        self._read.track_global = value

    # --- feeding ------------------------------------------------------------------------------

    def fast_path(self) -> FastPath:
        """The state a streaming reader may update in place for legal steps (see :class:`FastPath`)."""
        trie = self._trie
        return FastPath(self._open, self._finished, self._conform_ends, trie.next, trie.accepting, trie.roots)

    def note_time(self, last_t: float, out_of_order: int) -> None:
        """Hand back the global-time bookkeeping a fast reader kept in locals."""
        # Written out here rather than as a ReadStats method: a reader calls it before every event it hands over.
        read = self._read
        if last_t > read.last_t:
            read.last_t = last_t
        read.out_of_order += out_of_order

    @property
    def last_t(self) -> float:
        """The latest time seen in log order (for a fast reader's global-time bookkeeping)."""
        return self._read.last_t

    def count_fast(self, events: int, new_handoffs: int) -> None:
        """Count the events and new handoffs a fast reader handled itself."""
        read = self._read
        read.events += events
        read.handoffs += new_handoffs

    def count_lines(self, n: int) -> None:
        """How many lines the input had (for the report)."""
        self._read.lines += n

    def error(self, error: LogError, *, abort: bool = False) -> None:
        """Record an unreadable line; ``abort`` marks the run as stopped there."""
        self._errors.add(error, abort)

    def feed(self, event: LogEvent) -> LogError | None:
        """Check one event; an error is returned (not recorded) when its order cannot be known."""
        return self.feed_raw(event.line, event.handoff, event.t_ms, event.symbol, event.engine)

    def feed_raw(
        self, line: int, handoff: HandoffKey, t_ms: float, symbol: str, engine: str | None
    ) -> LogError | None:
        """:meth:`feed` without building a LogEvent (the hot path of the native reader)."""
        read = self._read
        read.events += 1
        if read.track_global:
            if t_ms < read.last_t:
                read.out_of_order += 1
            else:
                read.last_t = t_ms
        entry = self._open.get(handoff)
        if entry is None:
            marker = self._finished.get(handoff)
            if marker is None:
                return self._begin(line, handoff, t_ms, symbol, engine)
            return self._after_finish(line, handoff, t_ms, symbol, engine, marker)
        if engine is not None and engine != entry.engine and self.order is None:
            problem = self._engine_problem(line, handoff, entry.node, t_ms, symbol, engine)
            if problem is not None or handoff not in self._open:
                return problem
        last = entry.last_t
        if t_ms < last:
            read.backwards_within(last, t_ms)
            self._violate(
                handoff, entry.node, ViolationKind.TIME_BACKWARDS, line, t_ms, symbol,
                f"time went backwards within the handoff: {t_ms:g} ms after {last:g} ms",
            )
            return None
        self._advance(entry, line, handoff, t_ms, symbol)
        return None

    def _advance(self, entry: OpenHandoff, line: int, handoff: HandoffKey, t_ms: float, symbol: str) -> None:
        """Step an open handoff on ``symbol``: a violation, a move, or a finish."""
        trie = self._trie
        node = entry.node
        child = trie.next[node].get(symbol)
        if child is None:
            child = trie.advance(node, symbol)
            if child < 0:
                self._reject(handoff, node, line, t_ms, symbol)
                return
        entry.node = child
        entry.last_t = t_ms
        entry.last_line = line
        if trie.accepting[child]:
            del self._open[handoff]
            self._finished[handoff] = child
            self._conform_ends[child] += 1

    def _begin(
        self, line: int, handoff: HandoffKey, t_ms: float, symbol: str, engine: str | None
    ) -> LogError | None:
        order = self.order
        if order is None:
            if engine is None:
                self._read.events -= 1
                return LogError(line, "engine", f"handoff {handoff!r} starts without an engine, so its order is unknown: give --order or an engine on its first event")
            try:
                order = order_for_engine(engine)
            except ValueError as exc:
                self._read.events -= 1
                return LogError(line, "engine", str(exc))
        self._read.handoffs += 1
        entry = OpenHandoff(self._trie.roots[order], t_ms, line, engine)
        self._open[handoff] = entry
        self._advance(entry, line, handoff, t_ms, symbol)
        return None

    def _after_finish(
        self, line: int, handoff: HandoffKey, t_ms: float, symbol: str, engine: str | None, marker: int
    ) -> LogError | None:
        if marker < 0:  # violated or truncated: its first problem is what counts
            self._read.after_violation += 1
            return None
        # Finished and conforming.  After completed(success) the spec still allows a post-success
        # reopen (a terminal fact, then the destination's cleanup); after completed(canceled)
        # nothing at all.
        trie = self._trie
        self._conform_ends[marker] -= 1
        if trie.projections[trie.order[marker]].states[trie.dfa[marker]].transitions.get(symbol) is not None:
            del self._finished[handoff]
            entry = OpenHandoff(marker, t_ms, line, engine)
            self._open[handoff] = entry
            self._advance(entry, line, handoff, t_ms, symbol)
            return None
        self._record(handoff, marker, ViolationKind.EVENT_AFTER_COMPLETION, line, t_ms, symbol, None)
        return None

    def _engine_problem(
        self, line: int, handoff: HandoffKey, node: int, t_ms: float, symbol: str, engine: str
    ) -> LogError | None:
        try:
            order = order_for_engine(engine)
        except ValueError as exc:
            return LogError(line, "engine", str(exc))
        if order is not self._trie.order[node]:
            self._violate(
                handoff, node, ViolationKind.ENGINE_MISMATCH, line, t_ms, symbol,
                f"engine {engine!r} ({order.value}) differs from the handoff's first engine "
                f"({self._trie.order[node].value})",
            )
        return None

    # --- violations ---------------------------------------------------------------------------

    def _reject(self, handoff: HandoffKey, node: int, line: int, t_ms: float, symbol: str) -> None:
        trie = self._trie
        state = trie.projections[trie.order[node]].states[trie.dfa[node]]
        kind = ViolationKind.EVENT_AFTER_COMPLETION if state.after_completion else ViolationKind.UNEXPECTED_EVENT
        self._violate(handoff, node, kind, line, t_ms, symbol, None)

    def _violate(
        self, handoff: HandoffKey, node: int, kind: ViolationKind, line: int, t_ms: float,
        symbol: str, message: str | None,
    ) -> None:
        self._open.pop(handoff, None)
        self._record(handoff, node, kind, line, t_ms, symbol, message)

    def _record(
        self, handoff: HandoffKey, node: int, kind: ViolationKind, line: int, t_ms: float,
        symbol: str, message: str | None,
    ) -> None:
        self._finished[handoff] = _VIOLATED
        listener = self.on_violation
        violation = self._violations.record(handoff, node, kind, line, t_ms, symbol, message,
                                            describe=listener is not None)
        if listener is not None and violation is not None:
            listener(violation)

    def violate(self, handoff: HandoffKey, kind: ViolationKind, line: int, t_ms: float, event: str, message: str) -> None:
        """An adapter-level violation (e.g. decode admitted before activation) for ``handoff``."""
        entry = self._open.get(handoff)
        if entry is not None:
            self._violate(handoff, entry.node, kind, line, t_ms, event, message)
            return
        marker = self._finished.get(handoff)
        if marker is not None and marker >= 0:
            self._conform_ends[marker] -= 1
            self._record(handoff, marker, kind, line, t_ms, event, message)

    def begin(self, handoff: HandoffKey, line: int, order: HandoffOrder) -> None:
        """Open a handoff that has no event yet (a record with no timestamps); no-op if known."""
        if handoff in self._open or handoff in self._finished:
            return
        self._read.handoffs += 1
        self._open[handoff] = OpenHandoff(self._trie.roots[order], float("-inf"), line, None)

    def truncate(self, handoff: HandoffKey, status: str) -> None:
        """Close a handoff whose record ended ``status`` (failed, rejected…) without cleanup events."""
        entry = self._open.pop(handoff, None)
        self._truncations.status[status] += 1
        if entry is None:
            return  # already violated (or, oddly, completed): counted where it is
        self._finished[handoff] = _TRUNCATED
        self._truncations.ends[entry.node] += 1

    def count(self, key: str, n: int = 1) -> None:
        """Count something adapter-specific (shown under ``counts``)."""
        self._read.extra[key] += n

    # --- the result ---------------------------------------------------------------------------

    def result(self) -> ConformanceResult:
        return summarize(
            order=self.order, max_listed=self.max_listed, trie=self._trie, open_=self._open,
            conform_ends=self._conform_ends, truncations=self._truncations,
            violations=self._violations, errors=self._errors, read=self._read,
        )


def validate_events(
    events: Iterable[LogEvent | LogError], order: HandoffOrder | None = None, *, keep_going: bool = True,
    spec: ProtocolSpec | None = None,
) -> ConformanceResult:
    """Validate parsed events (an in-memory convenience; the CLI streams through the same core)."""
    validator = Validator(order, spec=spec)
    lines = 0
    for item in events:
        lines += 1
        if isinstance(item, LogError):
            validator.error(item, abort=not keep_going)
            if not keep_going:
                break
            continue
        problem = validator.feed(item)
        if problem is not None:
            validator.error(problem, abort=not keep_going)
            if not keep_going:
                break
    validator.count_lines(lines)
    return validator.result()
