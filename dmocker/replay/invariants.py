"""End-of-run invariants of a replay, checked on every run.

Why always: faults, crashes and user coordinators are exactly where a cluster quietly leaks
KV blocks or loses a request; a run that "finished" proves nothing unless the end state is
clean.  Each check names the invariant and (up to ten) request ids, so a failing run points at
what to look at; the report is still written, marked failed.

The checks: every request has exactly one terminal status and the counts add up; no KV block
is still held by a source or reserved by a destination on any worker (``leaked_kv_blocks``);
no router still holds a request; every coordinator is complete; the native event log conforms
to the spec (when one was written).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

from dmocker.engines.interface import EngineWorker
from dmocker.handoff import HandoffCoordinator, HandoffOrder

from .collector import Collector, TerminalStatus
from .faults import FaultCause
from .report import JsonValue
from .routing import Router
from .runtime import ClusterControl

if TYPE_CHECKING:  # the conformance package is loaded only when a log is checked
    from dmocker.conformance import ConformanceResult

__all__ = ["InvariantBreak", "EndOfRun", "EndState", "check_end_of_run", "conformance_break", "failures_by_cause",
           "MAX_IDS"]

MAX_IDS = 10


@dataclass(frozen=True, slots=True)
class InvariantBreak:
    """One end-of-run invariant that does not hold, with up to :data:`MAX_IDS` request ids."""

    invariant: str
    message: str
    request_ids: tuple[int, ...] = ()

    def line(self) -> str:
        ids = f" (requests {', '.join(map(str, self.request_ids))})" if self.request_ids else ""
        return f"{self.invariant}: {self.message}{ids}"

    def to_json(self) -> dict[str, JsonValue]:
        return {"invariant": self.invariant, "message": self.message, "request_ids": list(self.request_ids)}


@dataclass(frozen=True, slots=True)
class EndOfRun:
    """What the end-of-run checks found: KV blocks still held, and every invariant that broke."""

    leaked_kv_blocks: int
    breaks: tuple[InvariantBreak, ...]

    @property
    def ok(self) -> bool:
        return not self.breaks


@runtime_checkable
class _KvIntrospect(Protocol):
    def kv_in_use(self) -> tuple[int, list[int]]: ...


@runtime_checkable
class _RouterIntrospect(Protocol):
    def is_empty(self) -> bool: ...


def _ids(ids: Sequence[int]) -> tuple[int, ...]:
    return tuple(sorted(ids)[:MAX_IDS])


class EndState(Protocol):
    """What the end-of-run checks read of a finished run (ClusterControl of a disaggregated run,
    the aggregated runtime itself)."""

    def live_requests(self) -> list[int]: ...

    def workers(self, stage: int) -> tuple[EngineWorker, ...]: ...

    @property
    def routed_unreleased(self) -> int: ...

    def routers(self) -> tuple[Router, ...]: ...

    def coordinator_of(self, request_id: int) -> HandoffCoordinator | None: ...


def check_end_of_run(
    runtime: EndState,
    collector: Collector,
    summary: dict[str, JsonValue],
    *,
    order: HandoffOrder,
    finished: bool,
    events_path: str | os.PathLike[str] | None = None,
) -> EndOfRun:
    """Check the end state.  ``finished``: the run ended normally (not capped, not a dead end);
    only then must every request be settled and the event log have every handoff closed."""
    breaks: list[InvariantBreak] = []
    live = runtime.live_requests()

    # -- one terminal status per request; counts add up ---------------------------------------
    status = collector.status
    settled_or_live = status != int(TerminalStatus.INCOMPLETE)
    if live:
        settled_or_live[np.asarray(live, dtype=np.int64)] = True
    unsettled = np.nonzero(~np.isnan(collector.arrival) & ~settled_or_live)[0].tolist()
    if unsettled:
        breaks.append(InvariantBreak("one_terminal_status", f"{len(unsettled)} retired request(s) have no terminal status", _ids(unsettled)))
    keys = ("completed_requests", "rejected_requests", "failed_requests", "canceled_requests", "incomplete_requests")
    counts = [summary.get(k) for k in keys]
    total = sum(c for c in counts if isinstance(c, int))
    if total != summary.get("num_requests"):
        breaks.append(InvariantBreak(
            "counts_add_up",
            f"completed+rejected+failed+canceled+incomplete = {total}, num_requests = {summary.get('num_requests')}",
        ))

    # -- KV blocks --------------------------------------------------------------------------------
    leaked = 0
    holders: list[int] = []
    for stage in (0, 1):
        for w in runtime.workers(stage):
            if isinstance(w, _KvIntrospect):
                blocks, rids = w.kv_in_use()
                leaked += blocks
                holders.extend(rids)
    leaked_kv = leaked if finished else 0
    if finished and (leaked or holders):
        breaks.append(InvariantBreak(
            "no_leaked_kv",
            f"{leaked} KV block(s) still held or reserved by {len(set(holders))} request(s) at the end",
            _ids(sorted(set(holders))),
        ))
    elif not finished:
        # A stopped run legitimately holds KV for its live requests; only the others leak.
        stray = sorted(set(holders) - set(live))
        if stray:
            breaks.append(InvariantBreak("no_leaked_kv", f"KV still held for {len(stray)} retired request(s)", _ids(stray)))

    # -- router state, coordinators -----------------------------------------------------------------
    open_routes = runtime.routed_unreleased
    routers_busy = [r for r in runtime.routers() if isinstance(r, _RouterIntrospect) and not r.is_empty()]
    if finished and (open_routes or routers_busy):
        breaks.append(InvariantBreak("router_state_empty", f"{open_routes} routing hold(s) never released", _ids(live)))
    incomplete = []
    for rid in live:
        coord = runtime.coordinator_of(rid)
        if coord is not None and not coord.is_complete:
            incomplete.append(rid)
    if finished and incomplete:
        breaks.append(InvariantBreak(
            "coordinators_complete",
            f"{len(incomplete)} coordinator(s) never completed ({_where(runtime, incomplete)})",
            _ids(incomplete),
        ))

    # -- event log -------------------------------------------------------------------------------------
    if events_path is not None and finished:
        problem = _event_log_problem(events_path, order)
        if problem is not None:
            breaks.append(problem)
    return EndOfRun(leaked_kv, tuple(breaks))


def dead_end_breaks(runtime: ClusterControl, stuck: Sequence[str]) -> list[InvariantBreak]:
    """A dead end seen as invariants: the coordinators that never completed (or, if all did,
    the requests the engines never finished)."""
    live = runtime.live_requests()
    incomplete = [rid for rid in live if (c := runtime.coordinator_of(rid)) is not None and not c.is_complete]
    if incomplete:
        return [InvariantBreak(
            "coordinators_complete",
            f"dead end: {len(incomplete)} coordinator(s) never completed and nothing can make progress "
            f"({_where(runtime, incomplete)})",
            _ids(incomplete),
        )]
    return [InvariantBreak("no_dead_end", f"dead end: {len(live)} request(s) the engines never finish", _ids(live))]


def _where(runtime: EndState, ids: Sequence[int]) -> str:
    """Where the first stuck coordinators stopped: request, step (if counted) and protocol state."""
    parts = []
    for rid in sorted(ids)[:3]:
        coord = runtime.coordinator_of(rid)
        if coord is None:
            continue
        steps = getattr(coord, "steps", None)
        at = f" after step {steps}" if isinstance(steps, int) else ""
        parts.append(f"request {rid}{at}, the spec's state for its inputs: {coord.state_label()}")
    more = f"; +{len(ids) - 3} more" if len(ids) > 3 else ""
    return "; ".join(parts) + more


def leaked_blocks_at_dead_end(runtime: ClusterControl) -> int:
    total = 0
    for stage in (0, 1):
        for w in runtime.workers(stage):
            if isinstance(w, _KvIntrospect):
                total += w.kv_in_use()[0]
    return total


def _event_log_problem(path: str | os.PathLike[str], order: HandoffOrder) -> InvariantBreak | None:
    from dmocker.conformance.stream import check_native
    from dmocker.conformance.validator import Validator

    v = Validator(order, max_listed=MAX_IDS)
    with open(path, encoding="utf-8") as fh:
        check_native(fh, v, keep_going=True)
    return conformance_break(v.result())


def conformance_break(r: ConformanceResult) -> InvariantBreak | None:
    """The ``event_log_conforms`` break of a validated event log (None when it conforms)."""
    if r.exit_code == 0:
        return None
    ids: list[int] = []
    for viol in r.violations:
        if isinstance(viol.handoff, int):
            ids.append(viol.handoff)
    for u in r.unfinished:
        if isinstance(u.handoff, int):
            ids.append(u.handoff)
    first = r.violations[0].message if r.violations else (f"{len(r.unfinished)} handoff(s) never finished" if r.unfinished else "unreadable lines")
    return InvariantBreak("event_log_conforms", f"the event log does not conform: {first}", _ids(ids))


def failures_by_cause(collector: Collector, causes: dict[int, FaultCause]) -> dict[str, JsonValue]:
    """Failed, canceled and rejected requests by cause (a fault, a crash, or the engine itself);
    ``heartbeat_loss`` only when a heartbeat loss ended one (a run without that fault reports
    the causes it always did)."""
    seen = set(causes.values())
    out: dict[str, JsonValue] = {c.value: 0 for c in FaultCause if c is not FaultCause.HEARTBEAT_LOSS or c in seen}
    status = collector.status
    bad = (status == int(TerminalStatus.FAILED)) | (status == int(TerminalStatus.CANCELED)) | (status == int(TerminalStatus.REJECTED))
    for rid in np.nonzero(bad)[0].tolist():
        cause = causes.get(rid, FaultCause.ENGINE).value
        n = out[cause]
        assert isinstance(n, int)
        out[cause] = n + 1
    return out
