"""The checker's invariant evaluator: each kind on hand-made histories, and spec-driven lists."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from dmocker.check import check, load_target
from dmocker.check.inputs import DeliverFact, DeliverOutcome, EnvInput, Start
from dmocker.check.invariants import BUILTIN_INVARIANTS, InvariantDecl, InvariantError, Monitor, StepEvent, build_monitor
from dmocker.handoff import (
    ActivateDestination,
    CancelDestination,
    Complete,
    Completion,
    DestinationReserved,
    Failed,
    HandoffErrorKind,
    HandoffOrder,
    IssuedAction,
    Outcome,
    OutcomeKind,
    ReleaseSource,
    ReserveDestination,
    SourceHeld,
    StartTransfer,
    SubmitPrefill,
    TransferTiming,
    TransferTimingMode,
    load_spec,
)
from dmocker.handoff.spec import default_spec_path

H = "h"
TIMING = TransferTiming(TransferTimingMode.FULL_PROMPT, 8)


def ev(inp: EnvInput, *issued: IssuedAction, answered: str | None = None, error: HandoffErrorKind | None = None,
       changed: bool = True, completion: Completion | None = None) -> StepEvent:
    return StepEvent(inp, H, answered, tuple(issued), error, None, changed, completion)


def run(monitor: Monitor, events: list[StepEvent]) -> list[list[str]]:
    state = monitor.initial
    out = []
    for e in events:
        state, violations = monitor.step(state, e)
        out.append([v.invariant for v in violations])
    return out


def spec_monitor(order: HandoffOrder) -> Monitor:
    return build_monitor(load_spec(), order)._own  # the checker evaluator: spec + built-ins


def test_precedes_order_rule() -> None:
    m = spec_monitor(HandoffOrder.SOURCE_FIRST)
    early = run(m, [ev(Start(), IssuedAction(0, SubmitPrefill(H)), IssuedAction(1, ReserveDestination(H)))])
    assert "reserve_after_held" in early[0]
    ok = run(m, [
        ev(Start(), IssuedAction(0, SubmitPrefill(H))),
        ev(DeliverOutcome(0, Outcome(OutcomeKind.SUBMITTED)), answered="SubmitPrefill"),
        ev(DeliverFact(SourceHeld(H, TIMING)), IssuedAction(1, ReserveDestination(H))),
    ])
    assert ok == [[], [], []]
    # a foreign-id SourceHeld does not count as the source being held
    foreign = run(m, [ev(DeliverFact(SourceHeld("other", TIMING)), IssuedAction(0, ReserveDestination(H)))])
    assert "reserve_after_held" in foreign[0]


def test_delay_and_rejection_and_release() -> None:
    m = spec_monitor(HandoffOrder.DESTINATION_FIRST)
    res = run(m, [
        ev(DeliverFact(DestinationReserved(H, 8)), IssuedAction(0, StartTransfer(H, math.nan))),
        ev(DeliverOutcome(0, Outcome(OutcomeKind.NOOP)), error=HandoffErrorKind.INVALID_OUTCOME, changed=True),
        ev(DeliverOutcome(0, Outcome(OutcomeKind.NOOP)), IssuedAction(1, ReleaseSource(H))),
    ])
    assert "finite_delay" in res[0] and "transfer_needs_both_sides" in res[0]
    assert res[1] == ["rejection_changes_nothing"]
    assert "release_after_activation" in res[2]


def test_complete_epochs_reopen_and_clean_at_cancel() -> None:
    m = spec_monitor(HandoffOrder.SOURCE_FIRST)
    res = run(m, [
        ev(Start(), IssuedAction(0, ReserveDestination(H))),
        ev(DeliverOutcome(0, Outcome(OutcomeKind.ACCEPTED)), IssuedAction(1, Complete(H)), answered="ReserveDestination",
           completion=Completion.SUCCESS),
        ev(DeliverFact(Failed(H)), changed=False),  # ignored after success: no CancelDestination
        ev(DeliverFact(Failed(H)), IssuedAction(2, Complete(H)), completion=Completion.CANCELED),
        ev(Start(), IssuedAction(3, SubmitPrefill(H)), completion=Completion.CANCELED),
    ])
    assert "reopen_cancels_destination" in res[2]
    assert "canceled_means_clean" in res[3]  # the reserve was never cancelled
    assert "one_complete_per_epoch" not in res[3]  # the reopen started a new epoch
    assert "nothing_after_cancel" in res[4] and "only_cleanup_after_success" in res[4]


def test_builtins() -> None:
    m = Monitor(BUILTIN_INVARIANTS)
    res = run(m, [
        ev(Start(), IssuedAction(0, ActivateDestination(H)), IssuedAction(1, ActivateDestination(H))),
        ev(Start(), IssuedAction(2, CancelDestination(H)), IssuedAction(3, Complete(H)), IssuedAction(4, CancelDestination(H))),
    ])
    assert res == [["each_action_once_per_epoch"], []]
    bad = StepEvent(Start(), H, None, (), None, "raised KeyError", False, None)
    assert m.step(m.initial, bad)[1][0].invariant == "api_contract"


def test_unknown_kind_is_an_error() -> None:
    with pytest.raises(InvariantError, match="unknown kind 'eventually'"):
        Monitor([InvariantDecl("x", "eventually", "", {}, "spec")])
    with pytest.raises(InvariantError, match="'count'"):
        Monitor([InvariantDecl("x", "at_most_between", "", {"atom": "issue:Complete", "count": "one"}, "spec")])


def test_properties_follow_the_spec_file(tmp_path: Path) -> None:
    raw = json.loads(default_spec_path().read_text())
    raw["invariants"] = [i for i in raw["invariants"] if i["id"] != "finite_delay"]
    path = tmp_path / "handoff.json"
    path.write_text(json.dumps(raw))
    report = check(load_target(None), (HandoffOrder.SOURCE_FIRST,), spec=load_spec(path))
    names = [p.name for p in report.orders[0].properties]
    assert "finite_delay" not in names and "release_after_activation" in names
