"""The ``dmocker`` entry point: ``--version`` says the version and which hot path runs.

pip's quiet install hides the build output, so whether the optional mypyc build worked must be
visible at run time: ``dmocker --version`` prints "compiled" or "pure Python", the same answer
as ``dmocker.replay.accelerated()``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import dmocker
from dmocker import _accel
from dmocker.cli.main import main, version_text


def _run(args: list[str], *, pure: bool | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop(_accel.PURE_ENV, None)
    if pure:
        env[_accel.PURE_ENV] = "1"
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, check=True, timeout=120)


def test_version_names_the_version_and_the_mode(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    out = capsys.readouterr().out.strip()
    assert out == version_text()
    assert out == f"dmocker {dmocker.__version__} (replay hot path: {_accel.hot_path_label()})"


def test_forced_pure_python_says_so() -> None:
    out = _run(["-m", "dmocker", "--version"], pure=True).stdout.strip()
    assert out == f"dmocker {dmocker.__version__} (replay hot path: pure Python)"


def test_version_agrees_with_accelerated_in_the_same_environment() -> None:
    out = _run(["-m", "dmocker", "--version"], pure=False).stdout.strip()
    probe = "import dmocker.replay as r; print(r.accelerated())"
    compiled = _run(["-c", probe], pure=False).stdout.strip() == "True"
    assert out.endswith("(replay hot path: compiled)" if compiled else "(replay hot path: pure Python)")


@pytest.mark.skipif(
    not _accel._read_manifest() or _accel.PLAN.stale != (),
    reason="no up-to-date compiled build (pip install -e . with a C compiler)",
)
def test_compiled_build_says_compiled() -> None:
    out = _run(["-m", "dmocker", "--version"], pure=False).stdout.strip()
    assert out == f"dmocker {dmocker.__version__} (replay hot path: compiled)"
