"""`dmocker` (cli/main.py): a verb whose module fails to import is a loud error, never dropped.

A run imports only its own verb's module, so the error shows where the broken module is needed:
the verb itself, and the full listing (``--help``, an unknown verb), never as a verb missing
from it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dmocker.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]


def test_every_verb_is_registered() -> None:
    parser = cli_main.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(sub.choices) == {"demo", "replay", "sweep", "serve", "spec", "check", "conform", "diagram", "fuzz"}  # type: ignore[arg-type]


@pytest.mark.parametrize("broken", ["conform", "check"])
@pytest.mark.parametrize("argv", [["--help"], ["bogus"], []], ids=["help", "unknown-verb", "the-verb"])
def test_a_verb_module_that_fails_to_import_is_a_loud_error(
    broken: str, argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, f"dmocker.cli.{broken}", None)  # import raises ImportError
    code = cli_main.main(argv or [broken])
    err = capsys.readouterr().err
    assert code == 1
    assert f"dmocker.cli.{broken}" in err and "cannot be loaded" in err


def test_another_verb_runs_without_the_broken_module(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "dmocker.cli.conform", None)
    assert cli_main.main(["demo"]) == 0
    assert "cannot be loaded" not in capsys.readouterr().err


def test_the_error_reaches_the_console_script(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "import dmocker.cli.main as m\n"
        "sys.modules['dmocker.cli.diagram'] = None\n"
        "raise SystemExit(m.main(['diagram']))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 1, run.stderr
    assert "dmocker.cli.diagram" in run.stderr and "Traceback" not in run.stderr
