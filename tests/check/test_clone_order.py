"""The checker's structural clone is faithful to order: insertion order of instance dicts and
dicts, list order and set iteration order survive a copy, so a coordinator whose snapshot
observes them is not reported as changed by an input that changed nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dmocker.check import DEFAULT_VALUES, target_from_factory
from dmocker.cli.check import main
from dmocker.handoff import HandoffOrder

from tests.check.user_coordinators import AttributeOrderCoordinator


class _Plain:
    pass


def test_clone_keeps_insertion_order_everywhere() -> None:
    target = target_from_factory(AttributeOrderCoordinator)
    obj = target.make("h", HandoffOrder.SOURCE_FIRST, DEFAULT_VALUES.configs[0])
    extra = _Plain()
    extra.b = {"y": 1, "b": 2}  # type: ignore[attr-defined]
    extra.a = {"q", "b", "zz", "a", "mm"}  # type: ignore[attr-defined]
    obj.extra = extra  # type: ignore[attr-defined]
    copy = target.clone(obj)
    assert list(vars(copy)) == list(vars(obj)) == ["zeta", "alpha", "middle", "extra"]
    assert list(copy.alpha) == ["z", "a", "m"]  # type: ignore[attr-defined]
    assert list(vars(copy.extra)) == ["b", "a"]  # type: ignore[attr-defined]
    assert list(copy.extra.b) == ["y", "b"]  # type: ignore[attr-defined]
    assert list(copy.extra.a) == list(extra.a)  # type: ignore[attr-defined]
    assert copy.extra is not extra and copy.extra.b is not extra.b  # type: ignore[attr-defined]
    assert target.snapshot(copy) == target.snapshot(obj)


def test_structural_key_sees_dict_order() -> None:
    cloner = target_from_factory(AttributeOrderCoordinator).cloner
    one, two = _Plain(), _Plain()
    one.d = {"a": 1, "b": 2}  # type: ignore[attr-defined]
    two.d = {"b": 2, "a": 1}  # type: ignore[attr-defined]
    assert cloner.key(one) != cloner.key(two)  # iterating them gives different results
    three, four = _Plain(), _Plain()
    three.x, three.y = 1, 2  # type: ignore[attr-defined]
    four.y, four.x = 2, 1  # type: ignore[attr-defined]
    assert cloner.key(three) != cloner.key(four)


def test_check_accepts_an_attribute_order_coordinator(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    js = tmp_path / "r.json"
    code = main(["check", "--coordinator", "tests.check.user_coordinators:AttributeOrderCoordinator",
                 "--json", str(js), "--cex-dir", str(tmp_path / "cex")])
    out = capsys.readouterr().out
    assert "rejection_changes_nothing" not in [p["name"] for o in json.loads(js.read_text())["orders"]
                                               for p in o["properties"] if p["status"] == "fail"], out
    assert code == 0, out
