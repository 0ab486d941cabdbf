"""Every handoff of a live cluster checked against the spec as it happens.

The cluster writes its native event log line by line (the replay's writer); :class:`LiveCheck`
stands where the log is written: it feeds each line to the conformance
:class:`~dmocker.conformance.Validator` -- the same one ``dmocker conform`` runs on the file
afterwards -- and passes it on to the file when one was asked for (``--events``).  A handoff
that breaks a rule is reported at once (the ``report`` callback: ``/metrics`` and the server's
log) and listed in the summary at shutdown, where the whole log's verdict is the end-of-run
``event_log_conforms`` check (the file is not read again).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from dmocker.conformance import ConformanceResult, LogError, Validator, Violation, parse_line
from dmocker.handoff import HandoffOrder, load_spec
from dmocker.replay.report import JsonValue

__all__ = ["LiveCheck", "Sink"]

Sink = Callable[[str], object]
"""Where the lines go on (a file's ``write``)."""

#: violations listed in full in the summary (all are counted)
MAX_LISTED = 100


class LiveCheck:
    """A text sink that checks each event-log line it is given (module docstring)."""

    def __init__(self, order: HandoffOrder, *, forward: Sink | None = None,
                 report: Callable[[Violation], None] | None = None,
                 worker_event: Callable[[str], None] | None = None) -> None:
        self._validator = Validator(order, max_listed=MAX_LISTED)
        self._worker_event = worker_event  # told each worker kind (a timer fired, a fault hit) as it is logged
        self._worker_kinds = frozenset(k.name for k in load_spec().worker_kinds)
        self._validator.on_violation = self._violated
        self._forward = forward
        self._report = report
        self._pending = ""  # a line not yet ended by its newline
        self._line = 0
        self.by_rule: Counter[str] = Counter()
        self.listed: list[Violation] = []
        self.unreadable: list[LogError] = []

    def write(self, text: str) -> int:
        """Take what the cluster writes: whole lines are checked, the rest waits for its end."""
        if self._forward is not None:
            self._forward(text)
        pending = self._pending + text
        *lines, self._pending = pending.split("\n")
        for raw in lines:
            self._line += 1
            item = parse_line(raw, self._line)
            if item is None:
                continue
            if isinstance(item, LogError):
                self.unreadable.append(item)
                continue
            if self._worker_event is not None and item.event in self._worker_kinds:
                self._worker_event(item.event)
            problem = self._validator.feed(item)
            if problem is not None:
                self.unreadable.append(problem)
        return len(text)

    def _violated(self, violation: Violation) -> None:
        self.by_rule[violation.kind.value] += 1
        if len(self.listed) < MAX_LISTED:
            self.listed.append(violation)
        if self._report is not None:
            self._report(violation)

    def result(self) -> ConformanceResult:
        """The whole log's verdict so far, as ``dmocker conform`` gives it (open handoffs included)."""
        return self._validator.result()

    @property
    def ok(self) -> bool:
        return not self.by_rule and not self.unreadable

    def summary(self) -> dict[str, JsonValue]:
        """The summary's ``live_check`` section: violations by rule, the first ones in full."""
        return {
            "events_checked": self._line,
            "violations": sum(self.by_rule.values()),
            "violations_by_rule": dict(sorted(self.by_rule.items())),
            "violations_listed": [
                {"request_id": v.handoff, "rule": v.kind.value, "event": v.event, "t_ms": v.t_ms,
                 "state": list(v.state), "message": v.message}
                for v in self.listed
            ],
            "unreadable_lines": [f"line {e.line}: {e.reason}" for e in self.unreadable[:MAX_LISTED]],
        }
