"""Layering: consumers use ``dmocker.handoff``'s public API only.

The modules behind ``dmocker.handoff`` are private by name (``_spec``, ``_table``, ...).  Every
Python file outside ``dmocker/handoff`` (the other packages, the CLI, benches and tests) is
parsed and each import is checked: none may name a private handoff module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import dmocker.handoff as handoff

ROOT = Path(__file__).resolve().parents[2]
HANDOFF = ROOT / "dmocker" / "handoff"


def private_handoff_imports(source: str) -> list[str]:
    """The imports in ``source`` that reach into a private module of dmocker.handoff."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend(a.name for a in node.names if _private(a.name))
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            if _private(node.module):
                found.append(node.module)
            elif node.module == "dmocker.handoff":
                found.extend(f"dmocker.handoff.{a.name}" for a in node.names if a.name.startswith("_"))
    return found


def _private(module: str) -> bool:
    parts = module.split(".")
    return parts[:2] == ["dmocker", "handoff"] and len(parts) > 2 and parts[2].startswith("_")


def _consumer_files() -> list[Path]:
    files: list[Path] = []
    for folder in ("dmocker", "bench", "tests"):
        files.extend(p for p in sorted((ROOT / folder).rglob("*.py")) if HANDOFF not in p.parents)
    return files


def test_the_scanner_sees_private_imports() -> None:
    bad = (
        "import dmocker.handoff._table\n"
        "from dmocker.handoff._spec import load_spec\n"
        "from dmocker.handoff import _monitor, load_spec\n"
        "def f():\n    from dmocker.handoff._types import Failed\n"
    )
    assert private_handoff_imports(bad) == [
        "dmocker.handoff._table",
        "dmocker.handoff._spec",
        "dmocker.handoff._monitor",
        "dmocker.handoff._types",
    ]
    assert private_handoff_imports("from dmocker.handoff import Step, load_spec\nimport dmocker.handoff\n") == []


def test_no_consumer_imports_a_private_handoff_module() -> None:
    files = _consumer_files()
    assert len(files) > 50  # the scan really covers the repository
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in files
        if (found := private_handoff_imports(path.read_text(encoding="utf-8")))
    }
    assert offenders == {}


def test_the_handoff_modules_are_private_by_name() -> None:
    public = sorted(p.name for p in HANDOFF.glob("*.py") if not p.name.startswith("_"))
    assert public == []
    for name in handoff.__all__:
        assert hasattr(handoff, name), name
