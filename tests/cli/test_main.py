"""The ``dmocker`` entry point: ``--version`` prints the version, from the one place it is written."""

from __future__ import annotations

import subprocess
import sys

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
