"""The test tree follows tests/README.md: it mirrors dmocker/, "replay" means the cluster replay, and
the quick loop (`pytest -m "not slow"`) leaves slow tests out but no module."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
PACKAGE = TESTS.parent / "dmocker"
# Test folders with no package of the same name: the mutant catalogue (checker test data).
EXTRA_FOLDERS = {"mutants"}
# Where "replay" in a test's name is about something other than the cluster replay.
NOT_CLUSTER_REPLAY = ("check", "testing", "handoff", "mutants", "diagrams")


def _folders() -> list[str]:
    return sorted(p.name for p in TESTS.iterdir() if p.is_dir() and (p / "__init__.py").exists())


def test_every_test_folder_mirrors_a_package_and_is_documented() -> None:
    readme = (TESTS / "README.md").read_text(encoding="utf-8")
    for name in _folders():
        assert (PACKAGE / name).is_dir() or name in EXTRA_FOLDERS, f"tests/{name}/ mirrors no dmocker/{name}/"
        assert f"`tests/{name}/`" in readme, f"tests/README.md does not say what tests/{name}/ holds"


def test_replay_in_a_test_name_means_the_cluster_replay() -> None:
    offenders: list[str] = []
    for folder in NOT_CLUSTER_REPLAY:
        for path in sorted((TESTS / folder).glob("*.py")):
            if "replay" in path.stem:
                offenders.append(str(path.relative_to(TESTS)))
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name.lower().startswith("test") \
                        and "replay" in node.name.lower():
                    offenders.append(f"{path.relative_to(TESTS)}::{node.name}")
    assert offenders == [], "re-running a counterexample is not a replay; rename: " + ", ".join(offenders)


def test_the_slow_marker_is_registered_and_strict() -> None:
    """``pytest -m "not slow"`` is the quick loop: a misspelt marker must fail, not run."""
    options = tomllib.loads((TESTS.parent / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]
    ini = options["ini_options"]
    assert any(m.startswith("slow:") for m in ini["markers"]), ini.get("markers")
    assert "--strict-markers" in ini["addopts"].split()
    assert 'pytest -m "not slow"' in (TESTS / "README.md").read_text(encoding="utf-8")


def test_the_documented_test_commands_run_every_test() -> None:
    """The README's test command and the CI entry point run the slow tests too."""
    root = TESTS.parent
    for path in (root / "README.md", root / ".ci" / "run"):
        commands = [line for line in path.read_text(encoding="utf-8").splitlines() if "&& pytest" in line]
        assert commands, f"{path.name}: no test command found"
        for line in commands:
            assert line.rstrip().endswith("&& pytest"), f"{path.name}: the test command selects tests: {line}"


def _collected_files(*select: str) -> set[str]:
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-qq", "-o", "addopts=--strict-markers",
                          "-p", "no:cacheprovider", *select], cwd=TESTS.parent, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return {line.split(":")[0] for line in run.stdout.splitlines() if line.startswith("tests/") and ": " in line}


@pytest.mark.slow  # collects the suite twice
def test_every_test_module_stays_in_the_quick_loop() -> None:
    everything = _collected_files()
    assert len(everything) > 50
    assert _collected_files("-m", "not slow") == everything, "a module with only slow tests: keep a quick twin"
