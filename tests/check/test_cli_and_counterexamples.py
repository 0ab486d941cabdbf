"""`dmocker check` end to end: exit codes, reports, saved counterexamples and re-running them
(`dmocker check --replay CEX`)."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from dmocker.check.counterexample import CounterexampleKind, counterexample_from_json, load_counterexample
from dmocker.check.inputs import DeliverFact, DeliverOutcome, InputFormatError, Start, input_from_json, input_to_json
from dmocker.cli.check import main
from dmocker.handoff import Outcome, OutcomeKind, SourceHeld, TransferTiming, TransferTimingMode

MUTANT = "dmocker.check.mutant_catalogue.historical:DestinationMissingDelayNotValidated"


def test_ours_exits_0_with_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    js, junit = tmp_path / "r.json", tmp_path / "r.xml"
    code = main(["check", "--json", str(js), "--junit", str(junit), "--cex-dir", str(tmp_path / "cex")])
    out = capsys.readouterr().out
    assert code == 0
    assert "order source-first:" in out and "order destination-first:" in out and "states/s" in out
    assert "PASS" in out and "FAIL" not in out
    data = json.loads(js.read_text())
    assert data["exit_code"] == 0 and [o["order"] for o in data["orders"]] == ["source-first", "destination-first"]
    assert all(p["status"] == "pass" for o in data["orders"] for p in o["properties"])
    suites = ET.parse(junit).getroot().findall("testsuite")
    assert len(suites) == 2
    assert all(len(s.findall("testcase")) == int(s.get("tests", "0")) > 10 for s in suites)
    assert not (tmp_path / "cex").exists()  # nothing failed, nothing saved


def test_failing_mutant_exits_1_and_its_counterexample_reruns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cex_dir = tmp_path / "cex"
    junit = tmp_path / "r.xml"
    code = main(["check", "--coordinator", MUTANT, "--order", "source-first", "--cex-dir", str(cex_dir), "--junit", str(junit)])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL         finite_delay" in out
    assert "counterexample for finite_delay (5 steps" in out
    saved = cex_dir / "source-first-finite_delay.json"
    assert saved.is_file() and f"--replay {saved}" in out
    failures = ET.parse(junit).getroot().findall(".//failure")
    assert len(failures) == 1 and "StartTransfer" in (failures[0].get("message") or "")
    raw = json.loads(saved.read_text())
    assert raw["coordinator"] == MUTANT and raw["property"] == "finite_delay" and len(raw["steps"]) == 5
    # re-run (--replay): still fails against the mutant (exit 1) ...
    assert main(["check", "--replay", str(saved)]) == 1
    out = capsys.readouterr().out
    assert "VIOLATES finite_delay" in out and "REPRODUCED" in out
    # ... and passes against our coordinator (exit 0): the counterexample is a regression test
    assert main(["check", "--replay", str(saved), "--coordinator", "dmocker.handoff:HandoffCoordinator"]) == 0
    out = capsys.readouterr().out
    assert "rejected INVALID_DELAY" in out and "not reproduced" in out


def test_liveness_counterexample_reruns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["check", "--coordinator", "dmocker.check.mutant_catalogue.plausible:SilentAfterFailedSubmit",
                 "--order", "source-first", "--cex-dir", str(tmp_path)])
    assert code == 1
    saved = tmp_path / "source-first-no_deadlock.json"
    cex = load_counterexample(saved)
    assert cex.kind is CounterexampleKind.DEADLOCK and cex.length == 2
    capsys.readouterr()
    assert main(["check", "--replay", str(saved)]) == 1
    assert "deadlock: not complete and no input makes progress" in capsys.readouterr().out


def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--coordinator", "no_such_pkg.mod:C"]) == 2
    assert "cannot import module 'no_such_pkg.mod'" in capsys.readouterr().err
    assert main(["check", "--coordinator", "dmocker.handoff:TransferTiming"]) == 2
    assert "missing method start()" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "dmocker-check-counterexample", "version": 1, "steps": [}')
    assert main(["check", "--replay", str(bad)]) == 2
    assert "line 1: invalid JSON" in capsys.readouterr().err
    bad.write_text(json.dumps({
        "format": "dmocker-check-counterexample", "version": 1, "coordinator": "dmocker.handoff:HandoffCoordinator",
        "order": "source-first", "property": "x", "kind": "safety", "handoff_id": "h",
        "construction": {"fallback_transfer_delay_ms": 0.0}, "steps": [{"input": "outcome", "action_id": 0, "kind": "Bogus"}],
    }))
    assert main(["check", "--replay", str(bad)]) == 2
    assert "steps[0].kind: unknown outcome kind 'Bogus'" in capsys.readouterr().err


def test_max_states_exits_3(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--order", "destination-first", "--max-states", "40"]) == 3
    assert "inconclusive" in capsys.readouterr().out


def test_mutants_flag_prints_the_kill_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a two-mutant catalogue keeps this fast; test_mutants_killed runs the whole one
    cat = tmp_path / "cat"
    cat.mkdir()
    (cat / "__init__.py").write_text("from dmocker.check.mutant_catalogue import MUTANTS as _ALL\nMUTANTS = _ALL[:2]\n")
    assert main(["check", "--mutants", str(cat)]) == 0
    out = capsys.readouterr().out
    assert "start_after_terminal_submits" in out and "reopen_only_for_canceled" in out
    assert "killed 2/2 mutants (100%); historical reference bugs killed 2/2" in out
    (cat / "__init__.py").write_text("MUTANTS = 3\n")
    assert main(["check", "--mutants", str(tmp_path / "nowhere")]) == 2
    assert "not a mutant catalogue" in capsys.readouterr().err


def test_inputs_round_trip_through_json_including_non_finite_floats() -> None:
    timing = TransferTiming(TransferTimingMode.DESTINATION_MISSING, 0, 1_000_000, math.nan, 3)
    for inp in (Start(), DeliverFact(SourceHeld("h", timing)), DeliverOutcome(4, Outcome(OutcomeKind.FAILED, "x"))):
        raw = json.loads(json.dumps(input_to_json(inp), allow_nan=False))
        back = input_from_json(raw, "t")
        if isinstance(inp, DeliverFact):
            assert isinstance(back, DeliverFact) and isinstance(back.fact, SourceHeld)
            assert back.fact.transfer_timing.bandwidth_gb_s is not None and math.isnan(back.fact.transfer_timing.bandwidth_gb_s)
            assert back.fact.transfer_timing.state_bytes == 3
        else:
            assert back == inp
    with pytest.raises(InputFormatError, match=r"t\.input"):
        input_from_json({"input": "poke"}, "t")
    with pytest.raises(InputFormatError, match="format"):
        counterexample_from_json({"format": "nope"}, "f.json")


def test_all_keeps_exploring_for_more_counterexamples(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # complete-before-release breaks several properties; --all reports a counterexample for each
    code = main(["check", "--coordinator", "dmocker.check.mutant_catalogue.plausible:CompleteBeforeSourceReleased", "--order",
                 "source-first", "--all", "--cex-dir", str(tmp_path), "--json", str(tmp_path / "r.json")])
    assert code == 1
    data = json.loads((tmp_path / "r.json").read_text())
    failed = [p["name"] for p in data["orders"][0]["properties"] if p["status"] == "fail"]
    assert len(failed) >= 2 and "only_cleanup_after_success" in failed
    assert all((tmp_path / f"source-first-{name}.json").is_file() for name in failed)
    assert "not-run" not in capsys.readouterr().out
