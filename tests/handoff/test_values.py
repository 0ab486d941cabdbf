"""The protocol's value types (facts, actions, outcomes, timing): frozen values a driver can
build, compare, hash, copy and pickle, compiled or interpreted alike."""

from __future__ import annotations

import copy
import dataclasses
import os
import pickle
import sys

import pytest

from dmocker.handoff import (
    ACTION_CLASSES,
    FACT_CLASSES,
    IssuedAction,
    Outcome,
    OutcomeKind,
    SourceHeld,
    StartTransfer,
    TransferTiming,
    TransferTimingMode,
)

PURE_BUILD = os.environ.get("DMOCKER_PURE", "") not in ("", "0")
TIMING = TransferTiming(TransferTimingMode.DESTINATION_MISSING, 100, 1024, 2.5, state_bytes=7)


def _example(cls: type) -> object:
    if cls is SourceHeld:
        return SourceHeld(("h", 1), TIMING)
    if cls is StartTransfer:
        return StartTransfer("h", 12.5)
    names = [f.name for f in dataclasses.fields(cls)]
    if names == ["handoff_id"]:
        return cls("h")
    assert names == ["handoff_id", "transferable_prompt_tokens"], (cls, names)
    return cls("h", 1 << 60)


VALUES = [
    *(_example(cls) for cls in (*ACTION_CLASSES.values(), *FACT_CLASSES.values())),
    TIMING,
    TransferTiming(TransferTimingMode.FULL_PROMPT, 5),
    Outcome(OutcomeKind.FAILED, "no room"),
    Outcome(OutcomeKind.APPLIED),
    IssuedAction(3, StartTransfer("h", 1.0)),
]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_values_compare_hash_copy_and_pickle_by_their_fields(value: object) -> None:
    fields = dataclasses.fields(value)  # type: ignore[arg-type]
    again = type(value)(*(getattr(value, f.name) for f in fields))
    assert again == value and hash(again) == hash(value) and repr(again) == repr(value)
    assert repr(value).startswith(f"{type(value).__name__}(")
    assert copy.copy(value) is value and copy.deepcopy(value) is value  # immutable: shared
    back = pickle.loads(pickle.dumps(value))
    assert back == value and type(back) is type(value) and hash(back) == hash(value)
    names = [f.name for f in fields]
    last = "handoff_id" if "handoff_id" in names else "id" if "id" in names else names[-1]
    changed = {str: "other", int: 99, float: 99.5}.get(type(getattr(value, last)), "other")
    other = dataclasses.replace(value, **{last: changed})  # type: ignore[type-var]
    assert other != value and getattr(other, last) == changed


def test_defaults_and_field_order_are_the_documented_ones() -> None:
    t = TransferTiming(TransferTimingMode.FULL_PROMPT, 10)
    assert (t.kv_bytes_per_token, t.bandwidth_gb_s, t.state_bytes) == (None, None, 0)
    assert Outcome(OutcomeKind.NOOP).message == ""
    assert Outcome(OutcomeKind.NOOP) == Outcome(OutcomeKind.NOOP, "")
    assert SourceHeld("h", t) != SourceHeld("g", t)
    assert StartTransfer("h", 1.0) != StartTransfer("h", 2.0)
    # an int bandwidth is kept as given (the delay formula converts), as the reference's config
    assert TransferTiming(TransferTimingMode.FULL_PROMPT, 10, 1, 50).bandwidth_gb_s == 50


@pytest.mark.skipif(PURE_BUILD, reason="DMOCKER_PURE build: Final fields are enforced by the compiled build")
@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_compiled_values_refuse_assignment(value: object) -> None:
    assert not (sys.modules[type(value).__module__].__file__ or "").endswith(".py")  # compiled
    name = dataclasses.fields(value)[0].name  # type: ignore[arg-type]
    before = getattr(value, name)
    with pytest.raises(AttributeError):
        setattr(value, name, "changed")
    assert getattr(value, name) == before
