"""The examples in docs/*.md and README.md run, so the documented examples stay true.

* every ```python block of the pages below runs (in a scratch folder: some write files);
* every ```console block of docs/replay.md is a real transcript: its ``$ `` commands run, in
  order, in one shell, in a scratch folder that sees ``docs/``, and what they print must be
  the text that follows them (the first line's hot path, "compiled" or "pure Python", aside).

To refresh the transcripts after a deliberate change: ``python tests/test_docs_examples.py
--update docs/replay.md`` reruns every console block of the page and writes the output in.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

# docs/testing.md runs the stateful kit against coordinators: the one slow page
PYTHON_PAGES = [pytest.param("docs/testing.md", marks=pytest.mark.slow), "docs/checker.md", "docs/conformance.md",
                "docs/replay.md", "docs/routing.md", "docs/faults.md", "docs/planner.md", "docs/config.md",
                "README.md"]
TRANSCRIPT_PAGES = ["docs/replay.md"]

_BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)


def blocks(page: str, lang: str) -> list[str]:
    text = (ROOT / page).read_text(encoding="utf-8")
    return [body for kind, body in _BLOCK.findall(text) if kind == lang]


def _normalise(text: str) -> str:
    """Hide what legitimately differs between installs: the hot path (and the rule under it)."""
    text = re.sub(r"\((compiled|pure Python)\)", "(HOT PATH)", text)
    text = re.sub(r"hot path: (compiled|pure Python)", "hot path: HOT PATH", text)
    return re.sub(r"(?m)^-+$", "---", text)


def _commands(block: str) -> list[str]:
    return [line[2:] for line in block.splitlines() if line.startswith("$ ")]


def run_transcript(block: str, workdir: Path) -> str:
    """Run the block's commands in one bash in ``workdir``; return the transcript it makes."""
    shims = workdir / ".bin"
    shims.mkdir(exist_ok=True)
    for name, target in (("dmocker", f'"{sys.executable}" -m dmocker'), ("python3", f'"{sys.executable}"')):
        shim = shims / name
        shim.write_text(f'#!/bin/sh\nexec {target} "$@"\n', encoding="utf-8")
        shim.chmod(0o755)
    if not (workdir / "docs").exists():
        (workdir / "docs").symlink_to(DOCS)
    # `$?` must see the previous command, not the printf of the prompt line: keep and restore it.
    script = "".join(
        f"__status=$?\nprintf '%s\\n' {_sh_quote('$ ' + cmd)}\n( exit $__status )\n{{ {cmd} ; }} 2>&1\n"
        for cmd in _commands(block)
    )
    env = {**os.environ, "PATH": f"{shims}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    res = subprocess.run(["bash", "-c", script], cwd=workdir, env=env, capture_output=True, text=True,
                         timeout=600, check=False)
    return res.stdout + res.stderr


def _sh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\"'\"'") + "'"


@pytest.mark.parametrize("page", PYTHON_PAGES)
def test_python_blocks_run(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    found = blocks(page, "python")
    assert found, f"{page} has no python example"
    monkeypatch.chdir(tmp_path)
    for i, block in enumerate(found):
        exec(compile(block, f"{page} (python block {i + 1})", "exec"), {"__name__": "docs_example"})


@pytest.mark.slow  # each command is a dmocker process, several of them replays
@pytest.mark.parametrize("page", TRANSCRIPT_PAGES)
def test_console_blocks_are_real_transcripts(page: str, tmp_path: Path) -> None:
    found = [b for b in blocks(page, "console") if _commands(b)]
    assert found, f"{page} has no console transcript"
    for block in found:
        got = run_transcript(block, tmp_path)
        assert _normalise(got) == _normalise(block), f"{page}: this block no longer prints what it shows:\n{got}"


def test_normalise_hides_only_the_hot_path() -> None:
    a = "dmocker replay (compiled): vllm\n------\nx 1\n"
    b = "dmocker replay (pure Python): vllm\n---------\nx 1\n"
    assert _normalise(a) == _normalise(b)
    assert _normalise(a) != _normalise(b.replace("x 1", "x 2"))


def update(page: str) -> None:
    """Rewrite every console transcript of ``page`` with what its commands print now."""
    import tempfile

    path = ROOT / page
    text = path.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory() as tmp:

        def redo(m: re.Match[str]) -> str:
            kind, body = m.group(1), m.group(2)
            if kind != "console" or not _commands(body):
                return m.group(0)
            return f"```console\n{run_transcript(body, Path(tmp))}```"

        path.write_text(_BLOCK.sub(redo, text), encoding="utf-8")


if __name__ == "__main__":
    if sys.argv[1:2] != ["--update"] or len(sys.argv) != 3:
        raise SystemExit("usage: python tests/test_docs_examples.py --update docs/replay.md")
    update(sys.argv[2])
