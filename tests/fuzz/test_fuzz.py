"""``dmocker fuzz`` and ``dmocker replay --scenario``: finds the planted leaks (shrunk to at most
three requests), passes our coordinator in a bounded profile, re-runs saved scenarios exactly."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from dmocker.cli.main import main
from dmocker.fuzz.scenario import (
    Request,
    Scenario,
    ScenarioError,
    coordinator_factory,
    load_scenario,
    run_scenario,
    save_scenario,
    scenario_from_json,
)
from dmocker.fuzz.search import search
from dmocker.replay.faults import FaultKind, Pool, ScheduledFault, WorkerCrash

# Bounded in CI (the suite's budget), wider on a developer's machine.
EXAMPLES = 40 if os.environ.get("CI") else 150


@pytest.mark.slow
def test_ours_passes_a_bounded_fuzz(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.json"
    assert main(["fuzz", "--max-examples", str(EXAMPLES), "--seed", "1", "--out", str(out)]) == 0
    assert "nothing broke" in capsys.readouterr().out
    assert not out.exists()


@pytest.mark.parametrize("name", ["SkipsReleaseSource", "NeverCancelsDestination"])
def test_finds_each_leak_shrunk_to_at_most_three_requests(tmp_path: Path, name: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.json"
    coord = f"tests.fuzz.leaky:{name}"
    assert main(["fuzz", "--coordinator", coord, "--max-examples", str(EXAMPLES), "--out", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "timeline:" in printed and "broken:" in printed and "arrives" in printed
    saved = json.loads(out.read_text())
    assert 1 <= len(saved["requests"]) <= 3
    assert saved["coordinator"] == coord and saved["problems"]
    # Re-run exactly: it still breaks with that coordinator, and ours passes the same scenario.
    assert main(["replay", "--scenario", str(out), "--coordinator", coord, "--quiet"]) == 1
    assert main(["replay", "--scenario", str(out), "--quiet"]) == 0


def test_search_is_deterministic_for_a_seed() -> None:
    factory = coordinator_factory("tests.fuzz.leaky:SkipsReleaseSource")
    a = search(factory, max_examples=20, seed=5)
    b = search(factory, max_examples=20, seed=5)
    assert a.scenario is not None and a.scenario == b.scenario


def _scenario() -> Scenario:
    return Scenario(
        engine="sglang", prefill_workers=2, decode_workers=1, num_gpu_blocks=30,
        requests=(Request(0.0, 40, 2, 1), Request(3.0, 17, 1)), kv_transfer_bandwidth=0.01,
        faults=(ScheduledFault(5.0, 1, FaultKind.TIMEOUT),), crashes=(WorkerCrash(Pool.PREFILL, 1, 2.0),),
        restart_s=0.01,
    )


def test_scenario_json_round_trips_and_runs_step_by_step(tmp_path: Path) -> None:
    sc = _scenario()
    save_scenario(tmp_path / "s.json", sc)
    assert load_scenario(tmp_path / "s.json") == sc
    outcome = run_scenario(sc, coordinator_factory(None), record=True)
    assert not outcome.failed, outcome.problems
    assert outcome.steps and all(text.startswith("step ") for _, _, text in outcome.steps)


@pytest.mark.parametrize("change,message", [
    ({"format": "x"}, "format"),
    ({"engine": "trtllm"}, "engine"),
    ({"requests": []}, "requests"),
    ({"faults": [{"t_ms": 1, "request": 9, "kind": "cancel"}]}, "request 9"),
    ({"faults": [{"t_ms": -1, "request": 0, "kind": "cancel"}]}, "t_ms"),
    ({"faults": [{"t_ms": 1, "request": 0, "kind": "explode"}]}, "kind"),
    ({"worker_crashes": [{"pool": "decode", "index": 4, "t_ms": 1}]}, "decode pool"),
    ({"num_gpu_blocks": 0}, "num_gpu_blocks"),
])
def test_bad_scenarios_are_rejected(tmp_path: Path, change: dict[str, object], message: str) -> None:
    data = _scenario().to_json()
    data.update(change)
    with pytest.raises(ScenarioError, match=message):
        scenario_from_json(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    assert main(["replay", "--scenario", str(path), "--quiet"]) == 2


def test_cli_bad_input_exits_2(tmp_path: Path) -> None:
    assert main(["fuzz", "--coordinator", "no.such:Thing", "--max-examples", "1"]) == 2
    assert main(["replay", "--scenario", str(tmp_path / "missing.json")]) == 2
    assert main(["replay", "--synthetic", "3", "--scenario", str(tmp_path / "missing.json")]) == 2
    (tmp_path / "x.json").write_text("{not json")
    assert main(["replay", "--scenario", str(tmp_path / "x.json")]) == 2
