"""`dmocker check` on a coordinator whose fallback delay is only a constructor keyword.

The public API promises ``fallback_transfer_delay_ms`` as a constructor keyword; assigning it
later is our coordinator's extra.  The checker checks such a class with every root that needs
no assignment after construction and names the skipped root (and why) in every report format;
the exit code is the properties', never 2.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from dmocker.check import target_from_factory
from dmocker.check.core import check
from dmocker.check.values import DEFAULT_VALUES
from dmocker.cli.check import main

from tests.check.user_coordinators import ConstructorOnlyFallback

SKIPPED = [c.label for c in DEFAULT_VALUES.configs if c.after_construction is not None]


def test_the_default_values_have_a_root_that_assigns_after_construction() -> None:
    assert SKIPPED  # otherwise this file tests nothing


def test_check_skips_only_the_roots_that_assign(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    js, junit = tmp_path / "r.json", tmp_path / "r.xml"
    code = main(["check", "--coordinator", "tests.check.user_coordinators:ConstructorOnlyFallback",
                 "--json", str(js), "--junit", str(junit), "--cex-dir", str(tmp_path / "cex")])
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    assert "missing assignable attribute" not in captured.err
    for label in SKIPPED:
        assert f"skipped root: {label}" in captured.out
    assert "no assignable fallback_transfer_delay_ms" in captured.out
    data = json.loads(js.read_text())
    assert [s["root"] for s in data["skipped_roots"]] == SKIPPED
    assert all("fallback_transfer_delay_ms" in s["reason"] for s in data["skipped_roots"])
    assert all(p["status"] == "pass" for o in data["orders"] for p in o["properties"])
    root = ET.parse(junit).getroot()
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert any(name and name.startswith("skipped root") and value and SKIPPED[0] in value
               for name, value in props.items()), props


def test_api_roots_used_for_an_assignable_coordinator() -> None:
    from dmocker.handoff import HandoffCoordinator, HandoffOrder

    report = check(target_from_factory(HandoffCoordinator), (HandoffOrder.SOURCE_FIRST,))
    assert report.skipped_roots == ()
    report = check(target_from_factory(ConstructorOnlyFallback), (HandoffOrder.SOURCE_FIRST,))
    assert [label for label, _ in report.skipped_roots] == SKIPPED
    assert report.exit_code == 0
