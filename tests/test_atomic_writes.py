"""Every output file is written by one helper: atomically, with the mode ``open()`` would give.

``open(path, "w")`` creates a file with mode ``0o666 & ~umask``; a temp file from ``mkstemp`` is
0600, and a fixed chmod ignores the user's umask.  Each writer (replay, conform, check, the
counterexamples, diagrams, the generated docs) is run here under two umasks.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Iterator

import pytest

from dmocker import _atomic
from dmocker.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
MUTANT = "dmocker.check.mutant_catalogue.historical:DestinationMissingDelayNotValidated"


@pytest.fixture(params=[0o022, 0o027, 0o002])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield int(request.param)
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _no_temp_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob(".*") if p.is_file())


def test_helper_mode_follows_the_umask(tmp_path: Path, umask: int) -> None:
    target = tmp_path / "out.txt"
    _atomic.write_atomic(target, "hello\n")
    assert target.read_text(encoding="utf-8") == "hello\n"
    with open(tmp_path / "plain.txt", "w", encoding="utf-8") as fh:  # what open() does
        fh.write("x")
    assert _mode(target) == _mode(tmp_path / "plain.txt") == 0o666 & ~umask
    _atomic.write_atomic(target, b"\x00bytes")
    assert target.read_bytes() == b"\x00bytes" and _mode(target) == 0o666 & ~umask
    assert _no_temp_files(tmp_path) == []


def test_helper_fsyncs_before_rename_and_leaves_nothing_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append("replace"), real_replace(a, b))[1])
    target = tmp_path / "f.json"
    _atomic.write_atomic(target, "{}\n")
    assert calls[:2] == ["fsync", "replace"]
    target.write_text("old", encoding="utf-8")
    with pytest.raises(RuntimeError):
        with _atomic.AtomicFile(target) as fh:
            fh.write("half")
            raise RuntimeError("boom")
    assert target.read_text(encoding="utf-8") == "old"  # untouched
    assert _no_temp_files(tmp_path) == []


def test_replay_outputs(tmp_path: Path, umask: int) -> None:
    out, records, events = tmp_path / "r.json", tmp_path / "r.jsonl", tmp_path / "e.jsonl"
    assert main(["replay", "--synthetic", "4", "--quiet", "--out", str(out), "--per-request", str(records),
                 "--events", str(events)]) == 0
    for path in (out, records, events):
        assert _mode(path) == 0o666 & ~umask, path
    js, junit = tmp_path / "c.json", tmp_path / "c.xml"
    assert main(["conform", str(events), "--quiet", "--json", str(js), "--junit", str(junit)]) == 0
    for path in (js, junit):
        assert _mode(path) == 0o666 & ~umask, path
    assert _no_temp_files(tmp_path) == []


def test_conform_fixture_report(tmp_path: Path, umask: int) -> None:
    js = tmp_path / "fixture.json"
    assert main(["conform", "--fixture", "vllm", "--quiet", "--json", str(js)]) == 0
    assert _mode(js) == 0o666 & ~umask


def test_check_reports_and_counterexamples(tmp_path: Path, umask: int, capsys: pytest.CaptureFixture[str]) -> None:
    js, junit, cex = tmp_path / "k.json", tmp_path / "k.xml", tmp_path / "cex"
    assert main(["check", "--coordinator", MUTANT, "--order", "source-first", "--json", str(js), "--junit",
                 str(junit), "--cex-dir", str(cex)]) == 1
    capsys.readouterr()
    saved = sorted(cex.iterdir())
    assert saved
    for path in (js, junit, *saved):
        assert _mode(path) == 0o666 & ~umask, path
    assert _no_temp_files(tmp_path) == []


def test_diagram_out(tmp_path: Path, umask: int) -> None:
    out = tmp_path / "d.mmd"
    assert main(["diagram", "--order", "source-first", "--format", "mermaid", "--out", str(out)]) == 0
    assert _mode(out) == 0o666 & ~umask


def test_generated_docs(tmp_path: Path, umask: int) -> None:
    from dmocker.diagrams.docs import DIAGRAM_DIR, update
    from dmocker.handoff import load_spec

    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    for dot in (docs / DIAGRAM_DIR).glob("*.dot"):
        dot.write_text("stale\n", encoding="utf-8")
    written = update(load_spec(), docs, svg=False)
    assert written
    for path in written:
        assert _mode(path) == 0o666 & ~umask, path
