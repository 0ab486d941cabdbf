"""Streaming trace validation: does each handoff in a log follow the spec's observable projection?

One pass, events of many handoffs interleaved.  Memory is O(open handoffs) plus one small int
per finished id (needed to flag events that arrive after a handoff completed), plus one node per
distinct legal log prefix (finite: the projection is acyclic) in a prefix trie.  The trie node of
a handoff *is* its state: it fixes the projection state and remembers the sequence so far, so the
report can give lifecycles and coverage without storing any per-handoff history.

The work per event is a dict lookup for the handoff and one for the trie edge; the projection
is consulted only the first time a (prefix, symbol) pair is seen.

The validator is a pure core: callers parse lines (``events.parse_line`` or an adapter) and feed
it; :meth:`Validator.result` returns plain values that the report writers render.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import Final, Iterable

from dmocker.conformance.events import HandoffKey, LogError, LogEvent
from dmocker.conformance.projection import Projection, projection_for, symbol_display
from dmocker.handoff import ProtocolSpec, load_spec
from dmocker.handoff import HandoffOrder, order_for_engine


class Verdict(enum.Enum):
    CONFORMS = "conforms"
    VIOLATES = "violates"
    INCOMPLETE = "incomplete"
    #: a dynamo record that ended failed/rejected/canceled: its present events are a legal
    #: prefix, but the records carry no cleanup events, so it is counted apart (not a leak)
    TRUNCATED = "truncated"


class ViolationKind(enum.Enum):
    """Why a handoff violates the spec (one JUnit testcase per order x kind)."""

    UNEXPECTED_EVENT = "unexpected_event"
    EVENT_AFTER_COMPLETION = "event_after_completion"
    TIME_BACKWARDS = "time_backwards"
    ENGINE_MISMATCH = "engine_mismatch"
    DECODE_BEFORE_ACTIVATION = "decode_before_activation"


@dataclass(frozen=True, slots=True)
class Violation:
    """The first violation of one handoff: where, in which state, and what was allowed there."""

    handoff: HandoffKey
    order: HandoffOrder
    kind: ViolationKind
    line: int
    t_ms: float
    event: str
    state: tuple[str, ...]
    allowed: tuple[str, ...]
    seen: tuple[str, ...]
    message: str


@dataclass(frozen=True, slots=True)
class Unfinished:
    """A handoff still open at the end of the log (incomplete: a leak) or truncated."""

    handoff: HandoffKey
    order: HandoffOrder
    verdict: Verdict
    first_line: int
    last_line: int
    seen: tuple[str, ...]
    state: tuple[str, ...]
    allowed: tuple[str, ...]
    status: str | None = None


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """A distinct sequence of events and how many handoffs followed it."""

    order: HandoffOrder
    verdict: Verdict
    events: tuple[str, ...]
    count: int


@dataclass(frozen=True, slots=True)
class Coverage:
    """Which spec transitions/rules the log exercised for one order.

    ``observable`` are the ids that can fire on some logged path (the rest only ignore or reject
    inputs, which leaves no trace in a log); ``exercised`` fired on every path explaining some
    handoff; ``possibly`` fired only on some explanation (ambiguous ``failed``).
    """

    order: HandoffOrder
    spec_total: int
    observable: tuple[str, ...]
    exercised: tuple[str, ...]
    possibly: tuple[str, ...]

    @property
    def percent_of_observable(self) -> float:
        return 100.0 * len(self.exercised) / len(self.observable) if self.observable else 0.0

    @property
    def percent_of_spec(self) -> float:
        return 100.0 * len(self.exercised) / self.spec_total if self.spec_total else 0.0

    @property
    def unexercised(self) -> tuple[str, ...]:
        done = set(self.exercised)
        return tuple(t for t in self.observable if t not in done)


@dataclass(frozen=True, slots=True)
class TimeAnomalies:
    backwards_within_handoff: int
    lines_out_of_global_order: int
    max_backwards_ms: float


@dataclass(frozen=True, slots=True)
class ConformanceResult:
    """Everything a report needs; plain values, deterministic order."""

    order: HandoffOrder | None
    lines: int
    events: int
    handoffs: int
    verdicts: dict[str, int]
    by_order: dict[str, dict[str, int]]
    violation_counts: tuple[tuple[HandoffOrder, ViolationKind, int], ...]
    violations: tuple[Violation, ...]
    unfinished: tuple[Unfinished, ...]
    lifecycles: tuple[Lifecycle, ...]
    coverage: tuple[Coverage, ...]
    time: TimeAnomalies
    input_errors: tuple[LogError, ...]
    input_error_count: int
    aborted: bool
    events_after_violation: int
    truncated_by_status: dict[str, int] = field(default_factory=dict)
    extra: dict[str, int] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """2 unreadable input, 1 a violation or a leak, 0 everything conforms."""
        if self.input_error_count:
            return 2
        if self.verdicts.get(Verdict.VIOLATES.value, 0) or self.verdicts.get(Verdict.INCOMPLETE.value, 0):
            return 1
        return 0


# Finished-handoff markers; values >= 0 are the trie node a conforming handoff finished at.
_VIOLATED: Final = -2
_TRUNCATED: Final = -3


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


class _Trie:
    """Legal log prefixes of both orders, interned: node -> (order, projection state, parent)."""

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
        #: count lines whose time is before an earlier line's (meaningless for per-request records)
        self.track_global_time = True
        self._trie = _Trie({o: projection_for(o, spec) for o in HandoffOrder})
        self._open: dict[HandoffKey, OpenHandoff] = {}
        self._finished: dict[HandoffKey, int] = {}
        self._conform_ends: Counter[int] = Counter()
        self._violation_prefixes: Counter[int] = Counter()
        self._truncated_ends: Counter[int] = Counter()
        self._truncated_status: Counter[str] = Counter()
        self._violation_counts: Counter[tuple[HandoffOrder, ViolationKind]] = Counter()
        self._violations: list[Violation] = []
        self._errors: list[LogError] = []
        self._error_count = 0
        self._events = 0
        self._lines = 0
        self._handoffs = 0
        self._after_violation = 0
        self._backwards = 0
        self._max_backwards = 0.0
        self._global_out_of_order = 0
        self._last_t = float("-inf")
        self._aborted = False
        self._extra: Counter[str] = Counter()

    # --- feeding ------------------------------------------------------------------------------

    def fast_path(self) -> FastPath:
        """The state a streaming reader may update in place for legal steps (see :class:`FastPath`)."""
        trie = self._trie
        return FastPath(self._open, self._finished, self._conform_ends, trie.next, trie.accepting, trie.roots)

    def note_time(self, last_t: float, out_of_order: int) -> None:
        """Hand back the global-time bookkeeping a fast reader kept in locals."""
        if last_t > self._last_t:
            self._last_t = last_t
        self._global_out_of_order += out_of_order

    @property
    def last_t(self) -> float:
        """The latest time seen in log order (for a fast reader's global-time bookkeeping)."""
        return self._last_t

    def count_fast(self, events: int, new_handoffs: int) -> None:
        """Count the events and new handoffs a fast reader handled itself."""
        self._events += events
        self._handoffs += new_handoffs

    def count_lines(self, n: int) -> None:
        """How many lines the input had (for the report)."""
        self._lines += n

    def error(self, error: LogError, *, abort: bool = False) -> None:
        """Record an unreadable line; ``abort`` marks the run as stopped there."""
        self._error_count += 1
        if len(self._errors) < self.max_listed:
            self._errors.append(error)
        if abort:
            self._aborted = True

    def feed(self, event: LogEvent) -> LogError | None:
        """Check one event; an error is returned (not recorded) when its order cannot be known."""
        return self.feed_raw(event.line, event.handoff, event.t_ms, event.symbol, event.engine)

    def feed_raw(
        self, line: int, handoff: HandoffKey, t_ms: float, symbol: str, engine: str | None
    ) -> LogError | None:
        """:meth:`feed` without building a LogEvent (the hot path of the native reader)."""
        self._events += 1
        if self.track_global_time:
            if t_ms < self._last_t:
                self._global_out_of_order += 1
            else:
                self._last_t = t_ms
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
            self._backwards += 1
            self._max_backwards = max(self._max_backwards, last - t_ms)
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
                self._events -= 1
                return LogError(line, "engine", f"handoff {handoff!r} starts without an engine, so its order is unknown: give --order or an engine on its first event")
            try:
                order = order_for_engine(engine)
            except ValueError as exc:
                self._events -= 1
                return LogError(line, "engine", str(exc))
        self._handoffs += 1
        entry = OpenHandoff(self._trie.roots[order], t_ms, line, engine)
        self._open[handoff] = entry
        self._advance(entry, line, handoff, t_ms, symbol)
        return None

    def _after_finish(
        self, line: int, handoff: HandoffKey, t_ms: float, symbol: str, engine: str | None, marker: int
    ) -> LogError | None:
        if marker < 0:  # violated or truncated: its first problem is what counts
            self._after_violation += 1
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
        trie = self._trie
        order = trie.order[node]
        self._finished[handoff] = _VIOLATED
        self._violation_counts[(order, kind)] += 1
        self._violation_prefixes[node] += 1
        if len(self._violations) >= self.max_listed:
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
        self._violations.append(
            Violation(handoff, order, kind, line, t_ms, shown, proj.describe(trie.dfa[node]), allowed,
                      tuple(symbol_display(s) for s in trie.seen(node)), message)
        )

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
        self._handoffs += 1
        self._open[handoff] = OpenHandoff(self._trie.roots[order], float("-inf"), line, None)

    def truncate(self, handoff: HandoffKey, status: str) -> None:
        """Close a handoff whose record ended ``status`` (failed, rejected…) without cleanup events."""
        entry = self._open.pop(handoff, None)
        self._truncated_status[status] += 1
        if entry is None:
            return  # already violated (or, oddly, completed): counted where it is
        self._finished[handoff] = _TRUNCATED
        self._truncated_ends[entry.node] += 1

    def count(self, key: str, n: int = 1) -> None:
        """Count something adapter-specific (shown under ``counts``)."""
        self._extra[key] += n

    # --- the result ---------------------------------------------------------------------------

    def result(self) -> ConformanceResult:
        trie = self._trie
        verdicts: Counter[str] = Counter()
        by_order: dict[str, Counter[str]] = {o.value: Counter() for o in HandoffOrder}
        lifecycles: list[Lifecycle] = []
        exercised: dict[HandoffOrder, set[str]] = {o: set() for o in HandoffOrder}
        possibly: dict[HandoffOrder, set[str]] = {o: set() for o in HandoffOrder}
        seen_orders: set[HandoffOrder] = set()

        def credit(node: int, must_accept: bool) -> None:
            order = trie.order[node]
            every, some = trie.projections[order].exercised(trie.seen(node), must_accept=must_accept)
            exercised[order] |= every
            possibly[order] |= some

        for node, n in sorted(self._conform_ends.items()):
            if n <= 0:
                continue
            order = trie.order[node]
            seen_orders.add(order)
            verdicts[Verdict.CONFORMS.value] += n
            by_order[order.value][Verdict.CONFORMS.value] += n
            lifecycles.append(Lifecycle(order, Verdict.CONFORMS, tuple(symbol_display(s) for s in trie.seen(node)), n))
            credit(node, True)
        for node, n in sorted(self._violation_prefixes.items()):
            credit(node, False)
        for (order, _kind), n in sorted(self._violation_counts.items(), key=lambda kv: (kv[0][0].value, kv[0][1].value)):
            if n:
                seen_orders.add(order)
                verdicts[Verdict.VIOLATES.value] += n
                by_order[order.value][Verdict.VIOLATES.value] += n
        open_ends: Counter[int] = Counter()
        unfinished: list[Unfinished] = []
        for handoff, entry in self._open.items():
            open_ends[entry.node] += 1
            if len(unfinished) < self.max_listed:
                unfinished.append(self._unfinished(handoff, entry.node, Verdict.INCOMPLETE, entry.first_line, entry.last_line, None))
        for node, n in sorted(open_ends.items()):
            order = trie.order[node]
            seen_orders.add(order)
            verdicts[Verdict.INCOMPLETE.value] += n
            by_order[order.value][Verdict.INCOMPLETE.value] += n
            lifecycles.append(Lifecycle(order, Verdict.INCOMPLETE, tuple(symbol_display(s) for s in trie.seen(node)), n))
            credit(node, False)
        for node, n in sorted(self._truncated_ends.items()):
            order = trie.order[node]
            seen_orders.add(order)
            verdicts[Verdict.TRUNCATED.value] += n
            by_order[order.value][Verdict.TRUNCATED.value] += n
            lifecycles.append(Lifecycle(order, Verdict.TRUNCATED, tuple(symbol_display(s) for s in trie.seen(node)), n))
            credit(node, False)
        lifecycles.sort(key=lambda lc: (lc.order.value, lc.verdict.value, -lc.count, lc.events))
        coverage = []
        for order in HandoffOrder:
            if order not in seen_orders:
                continue
            proj = trie.projections[order]
            observable = proj.observable_transitions()
            ex = exercised[order]
            coverage.append(
                Coverage(
                    order=order,
                    spec_total=len(proj.table.transition_ids),
                    observable=observable,
                    exercised=tuple(t for t in observable if t in ex),
                    possibly=tuple(t for t in observable if t in possibly[order] and t not in ex),
                )
            )
        all_verdicts = {v.value: verdicts.get(v.value, 0) for v in Verdict}
        return ConformanceResult(
            order=self.order,
            lines=self._lines,
            events=self._events,
            handoffs=self._handoffs,
            verdicts=all_verdicts,
            by_order={o: {v.value: c.get(v.value, 0) for v in Verdict} for o, c in by_order.items() if sum(c.values())},
            violation_counts=tuple(
                (o, k, n) for (o, k), n in sorted(self._violation_counts.items(), key=lambda kv: (kv[0][0].value, kv[0][1].value)) if n
            ),
            violations=tuple(self._violations),
            unfinished=tuple(unfinished),
            lifecycles=tuple(lifecycles),
            coverage=tuple(coverage),
            time=TimeAnomalies(self._backwards, self._global_out_of_order, self._max_backwards),
            input_errors=tuple(self._errors),
            input_error_count=self._error_count,
            aborted=self._aborted,
            events_after_violation=self._after_violation,
            truncated_by_status=dict(sorted(self._truncated_status.items())),
            extra=dict(sorted(self._extra.items())),
        )

    def _unfinished(self, handoff: HandoffKey, node: int, verdict: Verdict, first: int, last: int, status: str | None) -> Unfinished:
        trie = self._trie
        order = trie.order[node]
        proj = trie.projections[order]
        return Unfinished(
            handoff, order, verdict, first, last,
            tuple(symbol_display(s) for s in trie.seen(node)),
            proj.describe(trie.dfa[node]),
            tuple(symbol_display(s) for s in proj.states[trie.dfa[node]].allowed),
            status,
        )


def validate_events(
    events: Iterable[LogEvent | LogError], order: HandoffOrder | None = None, *, keep_going: bool = True,
    spec: ProtocolSpec | None = None,
) -> ConformanceResult:
    """Validate parsed events (an in-memory convenience; the CLI streams through the same core)."""
    validator = Validator(order, spec=spec)
    for item in events:
        validator.count_lines(1)
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
    return validator.result()
