"""The ``dmocker`` entry point: ``--version`` prints the version, from the one place it is written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import dmocker
from dmocker.cli.main import main, version_text


def test_version_names_the_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    out = capsys.readouterr().out.strip()
    assert out == version_text() == f"dmocker {dmocker.__version__}"


def test_module_entry_point_prints_the_version() -> None:
    res = subprocess.run([sys.executable, "-m", "dmocker", "--version"], capture_output=True, text=True,
                         check=True, timeout=120)
    assert res.stdout.strip() == f"dmocker {dmocker.__version__}"


@pytest.mark.parametrize("args", [["demo"], ["replay", "--synthetic", "5", "--quiet"], ["spec", "validate"]])
def test_a_bad_spec_file_is_bad_input_for_every_verb(args: list[str], tmp_path: Path) -> None:
    # A verb reads $DMOCKER_SPEC when it first needs the protocol (at import or while it runs).
    bad = tmp_path / "bad.json"
    bad.write_text('{"spec_version": ', encoding="utf-8")
    env = {**os.environ, "DMOCKER_SPEC": str(bad)}
    res = subprocess.run([sys.executable, "-m", "dmocker", *args], capture_output=True, text=True, env=env,
                         cwd=tmp_path, timeout=300)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr
    assert str(bad) in res.stderr and "invalid JSON" in res.stderr
