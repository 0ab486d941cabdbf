"""The one invariant evaluator (dmocker.handoff.Monitor): each kind on hand-made histories, spec-driven lists,
and the checker's own api_contract on top."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from dmocker.check import check, load_target
from dmocker.check.inputs import DeliverFact, DeliverOutcome, EnvInput, Start
from dmocker.check.invariants import API_CONTRACT, safety_properties, safety_step, step_event
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
from dmocker.handoff import InvariantError, Monitor, StepEvent
from dmocker.handoff import Invariant, SpecError, default_spec_path

H = "h"
TIMING = TransferTiming(TransferTimingMode.FULL_PROMPT, 8)


def ev(inp: EnvInput, *issued: IssuedAction, answered: str | None = None, error: HandoffErrorKind | None = None,
       changed: bool = True, completion: Completion | None = None) -> StepEvent:
    return step_event(inp, H, answered, tuple(issued), error, None, changed, completion)


def run(monitor: Monitor, events: list[StepEvent]) -> list[list[str]]:
    state = monitor.initial
    out = []
    for e in events:
        state, violations = monitor.step(state, e)
        out.append([v.invariant for v in violations])
    return out


def spec_monitor(order: HandoffOrder) -> Monitor:
    return Monitor.for_order(load_spec(), order)


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


def test_each_action_once_per_epoch_is_a_spec_invariant() -> None:
    m = spec_monitor(HandoffOrder.SOURCE_FIRST)
    assert "each_action_once_per_epoch" in m.ids
    res = run(m, [
        ev(Start(), IssuedAction(0, ActivateDestination(H)), IssuedAction(1, ActivateDestination(H))),
        ev(Start(), IssuedAction(2, CancelDestination(H)), IssuedAction(3, Complete(H)), IssuedAction(4, CancelDestination(H))),
    ])
    assert "each_action_once_per_epoch" in res[0]
    assert "each_action_once_per_epoch" not in res[1]  # Complete starts a new epoch


def _inv(kind: str, **params: object) -> Invariant:
    return Invariant("x", kind, tuple(HandoffOrder), "", params)  # type: ignore[arg-type]


def test_at_most_between_counts_its_declared_atom() -> None:
    """The old shared evaluator counted Completes whatever the declared atom was."""
    m = Monitor([_inv("at_most_between", atom="issue:StartTransfer", count=1, reset="issue:Complete")])
    two_completes = ev(Start(), IssuedAction(0, Complete(H)), IssuedAction(1, Complete(H)), completion=Completion.SUCCESS)
    assert run(m, [two_completes]) == [[]]
    res = run(m, [
        ev(Start(), IssuedAction(0, StartTransfer(H, 1.0))),
        ev(Start(), IssuedAction(1, Complete(H)), completion=Completion.SUCCESS),
        ev(Start(), IssuedAction(2, StartTransfer(H, 1.0))),
        ev(Start(), IssuedAction(3, StartTransfer(H, 1.0))),
    ])
    assert res == [[], [], [], ["x"]]


def test_once_between() -> None:
    m = Monitor([_inv("once_between", atoms=["issue:SubmitPrefill", "fact:SourceHeld"], reset="issue:Complete")])
    res = run(m, [
        ev(Start(), IssuedAction(0, SubmitPrefill(H)), IssuedAction(1, ReserveDestination(H)),
           IssuedAction(2, ReserveDestination(H))),  # ReserveDestination is not watched
        ev(DeliverFact(SourceHeld(H, TIMING))),
        ev(DeliverFact(SourceHeld(H, TIMING)), changed=False),  # ignored duplicate: no atom
        ev(DeliverFact(SourceHeld(H, TIMING))),  # a second one that changed something: twice
        ev(Start(), IssuedAction(3, Complete(H)), IssuedAction(4, SubmitPrefill(H)), completion=Completion.CANCELED),
    ])
    assert res == [[], [], [], ["x"], []]


def test_api_contract_is_the_checkers_own() -> None:
    m = spec_monitor(HandoffOrder.SOURCE_FIRST)
    assert "api_contract" not in m.ids  # not a protocol invariant: not in the spec
    props = safety_properties(m)
    assert [p.id for p in props] == [*m.ids, "api_contract"] and props[-1] == API_CONTRACT
    bad = step_event(Start(), H, None, (), None, "raised KeyError", False, None)
    _, found = safety_step(m, m.initial, bad)
    assert [v.invariant for v in found] == ["api_contract"] and found[0].message == "raised KeyError"
    # a broken call contributes no input atoms: this SourceHeld does not count as the source held
    state, _ = safety_step(m, m.initial, step_event(DeliverFact(SourceHeld(H, TIMING)), H, None, (), None, "bad", True, None))
    _, found = m.step(state, ev(Start(), IssuedAction(0, ReserveDestination(H))))
    assert [v.invariant for v in found] == ["reserve_after_held"]


def test_kit_events_and_checker_events_agree() -> None:
    """The kit builds StepEvent directly; the checker via step_event: same event, same verdict."""
    fact = SourceHeld(H, TIMING)
    direct = StepEvent(H, fact=fact, issued=(IssuedAction(0, ReserveDestination(H)),), changed=True)
    assert step_event(DeliverFact(fact), H, None, direct.issued, None, None, True, None) == direct
    outcome = Outcome(OutcomeKind.APPLIED)
    assert step_event(DeliverOutcome(3, outcome), H, "ReleaseSource", (), None, None, True, None) == StepEvent(
        H, outcome=outcome, answered_action="ReleaseSource", changed=True)


def test_unknown_kind_is_an_error() -> None:
    with pytest.raises(InvariantError, match="unknown invariant kind 'eventually'"):
        Monitor([_inv("eventually")])
    with pytest.raises(InvariantError, match="'count'"):
        Monitor([_inv("at_most_between", atom="issue:Complete", count="one")])
    with pytest.raises(InvariantError, match="missing parameter 'reset'"):
        Monitor([_inv("once_between", atoms=["issue:Complete"])])


def _spec_with(tmp_path: Path, edit: object) -> Path:
    raw = json.loads(default_spec_path().read_text())
    assert callable(edit)
    edit(raw["invariants"])
    path = tmp_path / "handoff.json"
    path.write_text(json.dumps(raw))
    return path


@pytest.mark.parametrize(("inv", "message"), [
    ({"id": "y", "kind": "once_between", "atoms": ["issue:Submit"], "reset": "issue:Complete"}, "unknown action 'Submit'"),
    ({"id": "y", "kind": "precedes", "first": "answer:ReleaseSource:Done", "then": "issue:Complete"},
     "unknown outcome kind 'Done'"),
    ({"id": "y", "kind": "after_only", "after": "complete:maybe", "allowed": []}, "unknown atom 'complete:maybe'"),
    ({"id": "y", "kind": "responds", "trigger": "fact:SourceHeld"}, "missing parameter 'response'"),
    ({"id": "y", "kind": "precedes", "first": "fact:SourceHeld", "then": "issue:Complete", "extra": 1},
     "unknown parameter 'extra'"),
    ({"id": "y", "kind": "clean_at_cancel", "sides": {"SubmitPrefill": ["Release"]}}, "unknown action 'Release'"),
    ({"id": "finite_delay", "kind": "rejection_atomic"}, "duplicate invariant id 'finite_delay'"),
])
def test_spec_validates_invariants(tmp_path: Path, inv: dict[str, object], message: str) -> None:
    path = _spec_with(tmp_path, lambda invs: invs.append(inv))
    with pytest.raises(SpecError, match=message) as info:
        load_spec(path)
    assert str(path) in str(info.value) and "invariants[" in str(info.value)


def test_properties_follow_the_spec_file(tmp_path: Path) -> None:
    raw = json.loads(default_spec_path().read_text())
    raw["invariants"] = [i for i in raw["invariants"] if i["id"] != "finite_delay"]
    path = tmp_path / "handoff.json"
    path.write_text(json.dumps(raw))
    report = check(load_target(None), (HandoffOrder.SOURCE_FIRST,), spec=load_spec(path))
    names = [p.name for p in report.orders[0].properties]
    assert "finite_delay" not in names and "release_after_activation" in names
