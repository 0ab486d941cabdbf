"""`dmocker fuzz --clocks` finds each clock mutant in the worker composition, shrunk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dmocker.check.clock_mutants import CLOCK_MUTANTS
from dmocker.cli.main import main
from dmocker.fuzz.clocks import search_clocks

# mutant -> the shortest move sequence the checker finds (the search must shrink to it)
SHORTEST = {
    "expiry_frees_without_failing_transfer": 6,
    "decode_retries_load_after_expiry": 5,
    "destination_never_times_out": 2,
    "cancel_does_not_notify_source": 1,
}


def test_fuzz_clocks_cli_finds_a_mutant(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cex.json"
    assert main(["fuzz", "--clocks", "--clock-mutant", "cancel_does_not_notify_source", "--out", str(out)]) == 1
    saved = json.loads(out.read_text())
    assert saved["moves"] == ["client_cancel"] and "one_terminal_status_agreed" in saved["properties"]
    assert "broken:" in capsys.readouterr().out
    assert main(["fuzz", "--clocks", "--clock-mutant", "nonesuch"]) == 2


@pytest.mark.slow
@pytest.mark.parametrize("name", [m.name for m in CLOCK_MUTANTS])
def test_fuzz_clocks_finds_every_mutant_shrunk(name: str) -> None:
    result = search_clocks(None, name)
    assert result.finding is not None
    assert len(result.finding.moves) <= SHORTEST[name]


@pytest.mark.slow
def test_fuzz_clocks_finds_nothing_in_the_reference() -> None:
    assert search_clocks(None, None, max_examples=1500).finding is None
