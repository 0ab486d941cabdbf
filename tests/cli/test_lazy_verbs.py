"""`dmocker VERB ...` imports the module of the verb it runs, not every verb's.

Each case runs ``python -m dmocker`` in a subprocess (as a user does) with a hook that writes
``sys.modules`` at exit, and checks what a replay does not need is not there: the checker (and
networkx under it), conformance, sweep, diagrams, fuzz and the HTML report.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dmocker.cli import main as cli_main

#: Run the ``dmocker`` command's main with ARGS, then write the names in sys.modules to
#: MODULES_FILE (a replay's process exits without the interpreter's teardown, so no exit hook).
RUNNER = """
import json, sys
out, sys.argv = sys.argv[1], ["dmocker", *sys.argv[2:]]
from dmocker.cli.main import main
try:
    code = main()  # (--help exits from inside)
finally:
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(sorted(sys.modules), fh)
sys.exit(code)
"""

NOT_FOR_A_REPLAY = (
    "networkx",
    "statemachine",
    "hypothesis",
    "dmocker.check",
    "dmocker.conformance",
    "dmocker.sweep",
    "dmocker.diagrams",
    "dmocker.fuzz",
    "dmocker.report_html",
)


def modules_after(args: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    out = cwd / "modules.json"
    run = subprocess.run([sys.executable, "-c", RUNNER, str(out), *args], capture_output=True, text=True,
                         cwd=cwd, timeout=300)
    return run, set(json.loads(out.read_text(encoding="utf-8")))


def loaded(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


@pytest.mark.parametrize("args", [["replay", "--synthetic", "20", "--quiet"], ["replay", "--help"]],
                         ids=["replay", "replay-help"])
def test_a_replay_imports_no_other_verb(args: list[str], tmp_path: Path) -> None:
    run, modules = modules_after(args, tmp_path)
    assert run.returncode == 0, run.stderr
    assert "dmocker.cli.replay" in modules  # the hook saw the run
    assert loaded(modules, NOT_FOR_A_REPLAY) == []
    others = {f"dmocker.cli.{m}" for v, m in cli_main.VERBS.items() if v != "replay"}
    assert sorted(others & modules) == []


def test_a_replay_writing_an_event_log_checks_it_without_the_checker(tmp_path: Path) -> None:
    # The end-of-run invariants validate the event log with dmocker.conformance; nothing else.
    args = ["replay", "--synthetic", "20", "--quiet", "--events", str(tmp_path / "events.jsonl")]
    run, modules = modules_after(args, tmp_path)
    assert run.returncode == 0, run.stderr
    assert "dmocker.conformance.validator" in modules
    assert loaded(modules, tuple(p for p in NOT_FOR_A_REPLAY if p != "dmocker.conformance")) == []


def test_the_full_listing_still_loads_every_verb(tmp_path: Path) -> None:
    run, modules = modules_after(["--help"], tmp_path)
    assert run.returncode == 0, run.stderr
    assert {f"dmocker.cli.{m}" for m in cli_main.VERBS.values()} <= modules
    assert all(f"\n    {verb} " in run.stdout for verb in cli_main.VERBS), run.stdout
