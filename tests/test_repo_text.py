"""The repository's text points only at material its readers have.

Code, docs and tests must not cite private notes (numbered sections of a design notebook, a
tracker's work items) or paths of one machine: they state the fact itself, or cite a public
source by repository and path (for example ``ai-dynamo/dynamo`` ``lib/mocker/src/...``).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Built from pieces so that this file does not match itself.
_PATTERNS = (
    "fact" + " sheet",
    r"\bthe " + r"issue\b",
    r"\bissue" + r" [0-9]+",
    "\u00a7",
    "/" + "work/",
)
BANNED = re.compile("|".join(_PATTERNS), re.IGNORECASE)

TEXT_SUFFIXES = {".py", ".md", ".toml", ".txt", ".cfg", ".ini", ".json"}
FOLDERS = ("dmocker", "docs", "bench", "tests", "conformance", "spec", ".ci")
FILES = ("README.md", "setup.py", "pyproject.toml")
SKIP_PARTS = {"__pycache__", ".venv", "build", ".hypothesis", ".pytest_cache"}


def _text_files() -> list[Path]:
    found = [ROOT / name for name in FILES if (ROOT / name).is_file()]
    for folder in FOLDERS:
        base = ROOT / folder
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            if not path.is_file() or SKIP_PARTS.intersection(path.relative_to(ROOT).parts):
                continue
            if path.suffix in TEXT_SUFFIXES or path.name == "run":
                found.append(path)
    return found


def test_the_scan_sees_the_repository() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in _text_files()}
    assert {"README.md", "docs/replay.md", "bench/replay_bench.py", "dmocker/replay/runtime/loop.py"} <= names


def test_no_pointers_to_private_material() -> None:
    hits: list[str] = []
    for path in _text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for lineno, line in enumerate(text.splitlines(), 1):
            m = BANNED.search(line)
            if m:
                hits.append(f"{path.relative_to(ROOT)}:{lineno}: {m.group(0)!r}: {line.strip()[:100]}")
    assert hits == [], "state the fact or cite a public source instead of:\n" + "\n".join(hits)


def test_the_pattern_catches_what_it_should() -> None:
    for bad in ("see the fact" + " sheet", "as the " + "issue asks", "(issue" + " 4)", "\u00a7" + "2.7",
                "/" + "work/refvenv/bin/python"):
        assert BANNED.search(bad), bad
    for fine in ("the issued action", "issues show", "each action is issued twice"):
        assert not BANNED.search(fine), fine
