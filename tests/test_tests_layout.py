"""The test tree follows tests/README.md: it mirrors dmocker/, and "replay" means the cluster replay."""

from __future__ import annotations

import ast
from pathlib import Path

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
