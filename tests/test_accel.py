"""The optional mypyc build: same bytes as pure Python, and the staleness guard of _accel.py."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import dmocker
from dmocker import _accel
from dmocker.replay import accelerated

ROOT = Path(dmocker.__file__).resolve().parent.parent


def _no_compiled_build() -> str | None:
    """Why the compiled hot path cannot be tested here (None: it can)."""
    if not _accel._read_manifest():
        return ("nothing is compiled: this is a pure-Python install (DMOCKER_PURE_PYTHON=1 at install, or no "
                "C compiler / mypyc); `pip install -e .` with a C compiler builds it")
    if _accel.PLAN.stale:
        return f"the compiled build is older than the sources of {', '.join(_accel.PLAN.stale)}: run `pip install -e .`"
    return None


_WHY = _no_compiled_build()
#: The tests that compare or load the compiled modules: without a build they would compare pure
#: Python with itself and pass whatever the compiled code does.
needs_compiled = pytest.mark.skipif(_WHY is not None, reason=_WHY or "")


def _env(pure: bool, root: Path = ROOT) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(root))
    env.pop(_accel.PURE_ENV, None)
    if pure:
        env[_accel.PURE_ENV] = "1"
    return env


def _replay(engine: str, out: Path, pure: bool) -> dict[str, bytes]:
    out.mkdir()
    args = [
        sys.executable, "-m", "dmocker", "replay", "--synthetic", "400", "--engine", engine,
        "--block-size", "64", "--out", str(out / "r.json"), "--per-request", str(out / "r.jsonl"),
        "--events", str(out / "r.ev.jsonl"), "--quiet",
    ]
    subprocess.run(args, env=_env(pure), check=True, capture_output=True, cwd=out)
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def _mode(pure: bool, root: Path = ROOT) -> subprocess.CompletedProcess[str]:
    code = "import dmocker.replay as r, dmocker.engines.vllm as v; print(r.accelerated(), v.__file__)"
    return subprocess.run(
        [sys.executable, "-c", code], env=_env(pure, root), cwd=root, check=True, capture_output=True, text=True
    )


@needs_compiled
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_pure_and_compiled_write_identical_files(engine: str, tmp_path: Path) -> None:
    pure = _replay(engine, tmp_path / "pure", pure=True)
    default = _replay(engine, tmp_path / "default", pure=False)
    assert sorted(pure) == ["r.ev.jsonl", "r.json", "r.jsonl"]
    assert all(pure[name] for name in pure)
    assert pure == default


def test_env_var_forces_pure_python_at_run_time() -> None:
    out = _mode(pure=True).stdout.split()
    assert out[0] == "False"
    assert out[1].endswith("vllm.py")


@needs_compiled
def test_default_mode_runs_compiled() -> None:
    out = _mode(pure=False).stdout.split()
    assert out[0] == "True"
    assert not out[1].endswith(".py")
    assert accelerated() is (_accel.PURE_ENV not in os.environ)


def test_plan_keeps_compiled_when_sources_match() -> None:
    decision = _accel.plan({"a": "1", "b": "2"}, {"a": "1", "b": "2"}, ["a", "b"], force_pure=False)
    assert decision == _accel.Plan(pure=(), stale=())


def test_plan_sends_every_module_to_source_when_one_is_stale() -> None:
    decision = _accel.plan({"a": "1", "b": "2"}, {"a": "1", "b": "edited"}, ["b", "a"], force_pure=False)
    assert decision == _accel.Plan(pure=("a", "b"), stale=("b",))


def test_plan_treats_unrecorded_or_missing_sources_as_stale() -> None:
    decision = _accel.plan({"a": "1"}, {"a": None, "b": "2"}, ["a", "b"], force_pure=False)
    assert decision == _accel.Plan(pure=("a", "b"), stale=("a", "b"))


def test_plan_force_pure_is_not_a_staleness_warning() -> None:
    decision = _accel.plan({"a": "1"}, {"a": "1"}, ["a"], force_pure=True)
    assert decision == _accel.Plan(pure=("a",), stale=())


@needs_compiled
def test_edited_source_of_compiled_module_warns_and_loads_source(tmp_path: Path) -> None:
    copy = tmp_path / "dmocker"
    shutil.copytree(ROOT / "dmocker", copy, ignore=shutil.ignore_patterns("__pycache__"))
    vllm = copy / "engines" / "vllm.py"
    vllm.write_text(vllm.read_text(encoding="utf-8") + "\n# edited after the build\n", encoding="utf-8")
    run = _mode(pure=False, root=tmp_path)
    assert run.stdout.split() == ["False", str(vllm)]
    assert "dmocker.engines.vllm" in run.stderr
    assert "pip install -e ." in run.stderr
    assert run.stderr.count("older than these sources") == 1


def test_accelerated_tells_whether_the_engines_run_compiled() -> None:
    # The flag must follow the compiled modules themselves (the engines), not a module that may
    # have left the compiled set (the runtime did, and the flag then said "pure Python").
    import dmocker.engines.vllm as vllm

    assert accelerated() is (not str(vllm.__file__).endswith(".py"))


@pytest.mark.skipif(
    os.environ.get("CI") != "true" or shutil.which("cc") is None or _accel.PURE_ENV in os.environ,
    reason="only CI, with a C compiler and without DMOCKER_PURE_PYTHON, must have the compiled build",
)
def test_ci_install_is_compiled() -> None:
    # pip hides the build's output, so a mypyc failure (which falls back to pure Python) would
    # otherwise go unnoticed: CI installs with a compiler and must get the compiled hot path.
    assert accelerated(), "the install fell back to pure Python: run `pip install -v -e .` to see why"
