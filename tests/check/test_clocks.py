"""The workers' own clocks: every configuration breaks exactly what its spec entry says, with
pinned shortest counterexamples; the clock mutants are caught; the section is validated."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from dmocker.check.clock_mutants import CLOCK_MUTANTS, REFERENCE, run_clock_mutants
from dmocker.check.clocks import as_expected, check_clocks, check_configurations, replay_moves
from dmocker.cli.main import main
from dmocker.handoff import HandoffOrder, SpecError, default_spec_path, load_spec, load_workers, parse_workers

SF, DF = HandoffOrder.SOURCE_FIRST, HandoffOrder.DESTINATION_FIRST
W = load_workers()


def test_every_configuration_breaks_what_the_spec_says() -> None:
    reports = check_configurations(W)
    assert as_expected(W, reports)
    assert {(r.configuration, r.order) for r in reports} == {
        (c.name, o) for c in W.configurations.values() for o in c.orders
    }
    assert sum(r.seconds for r in reports) < 2.0


def test_real_configurations_fall_on_their_side() -> None:
    safe = {r.configuration for r in check_configurations(W) if not r.failed}
    assert safe == {"dmocker", "dmocker-recompute", "sglang"}


def test_vllm_abort_timeout_use_after_free_is_the_shortest_story() -> None:
    r = check_clocks(W, W.configurations["vllm-abort-timeout"], SF)
    uaf = next(x for x in r.results if x.prop == "no_read_from_freed_source")
    # the decode side is queued past the abort timeout, then reads what the source freed
    assert uaf.moves == ("prefill_done", "hold_expiry", "room_free", "transfer_done")
    logs, violations = replay_moves(W, W.configurations["vllm-abort-timeout"], SF, uaf.moves)
    assert {v.prop for v in violations} >= {"no_read_from_freed_source", "one_terminal_status_agreed"}
    assert logs[-1].after[W.machine_index("destination_worker")] == "active"


def test_vllm_lease_needs_a_lost_heartbeat() -> None:
    r = check_clocks(W, W.configurations["vllm-lease"], SF)
    uaf = next(x for x in r.results if x.prop == "no_read_from_freed_source")
    assert uaf.moves == ("prefill_done", "heartbeat_loss", "hold_expiry", "room_free", "transfer_done")


@pytest.mark.parametrize("order", [SF, DF])
def test_reference_settles_quickly(order: HandoffOrder) -> None:
    r = check_clocks(W, W.configurations[REFERENCE], order)
    assert not r.failed
    assert r.states < 100


# mutant -> (source-first, destination-first): {property: shortest length}
EXPECTED_KILLS = {
    "expiry_frees_without_failing_transfer": (
        {"no_read_from_freed_source": 6, "one_terminal_status_agreed": 6},
        {"no_read_from_freed_source": 6, "one_terminal_status_agreed": 6}),
    "decode_retries_load_after_expiry": (
        {"no_read_from_freed_source": 5, "one_terminal_status_agreed": 5},
        {"no_read_from_freed_source": 6, "one_terminal_status_agreed": 6}),
    "destination_never_times_out": ({}, {"held_kv_freed_within_bound": 2}),
    "cancel_does_not_notify_source": (
        {"held_kv_freed_within_bound": 4, "one_terminal_status_agreed": 1, "fair_timers_liveness": 3},
        {"held_kv_freed_within_bound": 4, "one_terminal_status_agreed": 2, "fair_timers_liveness": 3}),
}


def test_clock_mutants_are_caught() -> None:
    results = run_clock_mutants(W)
    assert [r.mutant.name for r in results] == [m.name for m in CLOCK_MUTANTS] == list(EXPECTED_KILLS)
    for res in results:
        assert res.killed, res.mutant.name
        got = tuple({x.prop: len(x.moves) for x in rep.results if not x.ok} for rep in res.reports)
        assert got == EXPECTED_KILLS[res.mutant.name], res.mutant.name


def test_cli_clocks_exit_codes(tmp_path: object, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(str(tmp_path))
    assert main(["check", "--clocks", "sglang"]) == 0
    assert main(["check", "--clocks", "vllm-abort-timeout", "--cex-dir", "cex"]) == 0
    out = capsys.readouterr().out
    assert "UNSAFE" in out and "shortest counterexample" in out
    saved = json.loads(open("cex/clocks-vllm-abort-timeout-source-first-no_read_from_freed_source.json").read())
    assert saved["moves"] == ["prefill_done", "hold_expiry", "room_free", "transfer_done"]
    assert main(["check", "--clocks", "nonesuch"]) == 2
    assert main(["check", "--clocks", "--mutants"]) == 0


def _raw() -> dict[str, object]:
    top = json.loads(default_spec_path().read_text(encoding="utf-8"))
    return copy.deepcopy(top["workers"])


def _parse(raw: object) -> None:
    spec = load_spec()
    parse_workers(raw, "spec", frozenset(f.name for f in spec.facts), frozenset(a.name for a in spec.actions),
                  {o.value: o for o in HandoffOrder})


@pytest.mark.parametrize("edit, message", [
    (lambda w: w["moves"][0].update({"when": {"source_worker": "nowhere"}}), "unknown state 'nowhere'"),
    (lambda w: w["moves"][0].update({"fact": "Nonesuch"}), "unknown fact"),
    (lambda w: w["commands"][0].update({"action": "Nonesuch"}), "unknown action"),
    (lambda w: w["moves"][0].update({"if": {"hold_timer": "forever"}}), "unknown value 'forever'"),
    (lambda w: w["configurations"]["sglang"]["parameters"].pop("heartbeat"), "must set exactly"),
    (lambda w: w["configurations"]["sglang"].update({"expect": ["nonesuch"]}), "unknown property"),
])
def test_workers_section_is_validated(edit: object, message: str) -> None:
    raw = _raw()
    edit(raw)  # type: ignore[operator]
    with pytest.raises(SpecError, match=message):
        _parse(raw)


def test_protocol_md_states_the_verdicts_the_checker_finds() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text(encoding="utf-8")
    section = text[text.index("### Which real configurations are safe"):text.index("### The bugs this class produces")]
    rows = [line.split("|") for line in section.splitlines() if line.startswith("| `")]
    documented = {r[1].strip().strip("`").split("`")[0]: "unsafe" in r[3] for r in rows}
    found: dict[str, bool] = {}
    for r in check_configurations(W):
        found[r.configuration] = found.get(r.configuration, False) or bool(r.failed)
    assert documented == found
