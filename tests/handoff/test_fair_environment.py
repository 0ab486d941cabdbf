"""The fair environment and the terminal facts are derived from the spec, once.

The checker (termination under fairness, cleanup liveness) and the Hypothesis kit's healthy
progress both use :func:`dmocker.handoff.fair_environment`; the replay, the kit, the checker's
exploration and the monitor read the terminal facts from ``ProtocolSpec.terminal_facts``.
"""

from __future__ import annotations

import dataclasses

import pytest

from dmocker.check import env as check_env
from dmocker.handoff import (
    ACTION_CLASSES,
    FACT_CLASSES,
    DestinationReserved,
    Monitor,
    OutcomeKind,
    SourceHeld,
    SpecError,
    TransferCompleted,
    TransferTiming,
    TransferTimingMode,
    fair_environment,
    load_spec,
    terminal_fact_classes,
)
from dmocker.handoff import HandoffOrder


def test_fair_environment_of_the_bundled_spec() -> None:
    fair = fair_environment()
    assert [(d.action, d.outcome, d.fact) for d in fair.due_facts] == [
        ("SubmitPrefill", OutcomeKind.SUBMITTED, "SourceHeld"),
        ("ReserveDestination", OutcomeKind.ACCEPTED, "DestinationReserved"),
        ("StartTransfer", OutcomeKind.SCHEDULED, "TransferCompleted"),
    ]
    assert fair.cleanup_actions == ("CancelSource", "CancelDestination")
    assert fair.unanswered == frozenset({"Complete"}) == fair.journal_clearing
    assert fair.success["ReleaseSource"] is OutcomeKind.APPLIED
    timing = TransferTiming(TransferTimingMode.FULL_PROMPT, 8)
    payloads: dict[str, object] = {"transfer_timing": timing, "transferable_prompt_tokens": 5}
    built = [d.build("h", payloads) for d in fair.due_facts]
    assert built == [SourceHeld("h", timing), DestinationReserved("h", 5), TransferCompleted("h")]


def test_fair_environment_follows_the_spec() -> None:
    """If SourceHeld needed the destination accepted instead, it would wait for ReserveDestination."""
    spec = load_spec()
    moved = tuple(
        dataclasses.replace(t, when=(("destination", ("accepted",)),)) if t.id == "held" else t for t in spec.transitions
    )
    fair = fair_environment(dataclasses.replace(spec, transitions=moved))
    assert fair.due_facts[0].fact == "SourceHeld" and fair.due_facts[0].action == "ReserveDestination"
    unreachable = tuple(t for t in spec.transitions if t.id != "held")
    with pytest.raises(SpecError, match="SourceHeld"):
        fair_environment(dataclasses.replace(spec, transitions=unreachable))


def test_terminal_facts_have_one_source() -> None:
    spec = load_spec()
    assert spec.terminal_facts == ("Failed", "TimedOut", "Canceled")
    assert tuple(FACT_CLASSES[n] for n in spec.terminal_facts) == terminal_fact_classes(spec.terminal_facts)
    with pytest.raises(ValueError, match="SourceHeld"):
        terminal_fact_classes(["Failed", "SourceHeld"])
    assert Monitor.for_order(spec, HandoffOrder.SOURCE_FIRST).terminal_facts == spec.terminal_facts
    assert Monitor([]).terminal_facts == spec.terminal_facts


def test_registry_matches_the_spec() -> None:
    spec = load_spec()
    assert list(ACTION_CLASSES) == [a.name for a in spec.actions]
    assert list(FACT_CLASSES) == [f.name for f in spec.facts]
    assert check_env.ACTION_NAMES == {cls: name for name, cls in ACTION_CLASSES.items()}
