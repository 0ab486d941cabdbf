"""The conformance suite (conformance/cases.json): every log reproduces its golden report.

Like simpy's examples whose output is diffed: the JSON report of each case must equal
conformance/expected/<name>.json exactly, and the exit code must be the one the case states.
Set DMOCKER_UPDATE_GOLDEN=1 to rewrite the goldens after an intended change (review the diff).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dmocker.cli.conform import main

ROOT = Path(__file__).resolve().parents[2] / "conformance"
CASES = json.loads((ROOT / "cases.json").read_text(encoding="utf-8"))["cases"]
UPDATE = os.environ.get("DMOCKER_UPDATE_GOLDEN") == "1"


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case_matches_golden(case: dict[str, object], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.json"
    junit = tmp_path / "report.xml"
    code = main([str(ROOT / str(case["log"])), *case["args"], "--json", str(out), "--junit", str(junit)])  # type: ignore[misc]
    capsys.readouterr()
    assert code == case["exit"], f"{case['name']}: exit {code}, expected {case['exit']}"
    got = json.loads(out.read_text(encoding="utf-8"))
    golden = ROOT / "expected" / f"{case['name']}.json"
    if UPDATE:
        golden.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    expected = json.loads(golden.read_text(encoding="utf-8"))
    assert got == expected, f"{case['name']}: report differs from {golden}"
    assert junit.read_text(encoding="utf-8").startswith("<?xml")


def test_invalid_cases_have_one_distinct_problem() -> None:
    invalid = [c for c in CASES if c["exit"] != 0]
    assert len(invalid) >= 15
    for case in invalid:
        report = json.loads((ROOT / "expected" / f"{case['name']}.json").read_text(encoding="utf-8"))
        kind = case["violation"]
        problems = len(report["violations"]) + len(report["unfinished"]) + len(report["input_errors"])
        assert problems == 1, f"{case['name']}: {problems} problems, expected exactly one"
        if kind == "input_error":
            assert report["counts"]["input_errors"] == 1 and report["exit_code"] == 2
        elif kind == "incomplete":
            assert report["counts"]["incomplete"] == 1 and report["unfinished"][0]["verdict"] == "incomplete"
        else:
            assert [v["kind"] for v in report["violations"]] == [kind]
    # Distinct: no two invalid cases share the same (kind, offending event, seen-prefix).
    keys = set()
    for case in invalid:
        report = json.loads((ROOT / "expected" / f"{case['name']}.json").read_text(encoding="utf-8"))
        items = report["violations"] or report["unfinished"] or report["input_errors"]
        key = json.dumps(items[0], sort_keys=True)
        assert key not in keys, f"{case['name']} duplicates another case"
        keys.add(key)


def test_every_log_in_the_suite_is_a_case() -> None:
    listed = {str(c["log"]) for c in CASES}
    on_disk = {str(p.relative_to(ROOT)) for p in ROOT.rglob("*.jsonl")}
    assert on_disk <= listed, f"logs without a case: {sorted(on_disk - listed)}"
