"""A built wheel carries the spec as package data and reads it from there, wherever it is installed.

The spec used to be found by walking up the package's parent folders for ``spec/handoff.json``
(then ``sys.prefix/share``): an install with ``--target`` or ``--user`` could not find it, and an
unrelated ``spec/handoff.json`` above the install folder was silently used instead.  Here the
wheel is installed with ``--target`` under a folder holding a bogus ``spec/handoff.json``, and
``python -m dmocker spec validate`` runs from another folder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC_FILES = ("handoff.json", "event-log.schema.json")


def _pip(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # DMOCKER_PURE: these tests are about the spec files a wheel carries, not about the compiled
    # core (tests/replay/test_compiled.py); skipping mypyc saves two minutes of C compilation.
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1", DMOCKER_PURE="1")
    env.pop("DMOCKER_SPEC", None)
    return subprocess.run([sys.executable, "-m", "pip", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


_NO_INDEX = ("Could not find a version that satisfies", "NewConnectionError", "Network is unreachable",
             "Temporary failure in name resolution")


def _builds_without_isolation() -> bool:
    """True when this interpreter can build the wheel itself: setuptools >= 68 with bdist_wheel
    (built in from setuptools 70.1, else from the ``wheel`` package)."""
    from importlib.metadata import PackageNotFoundError, version

    def release(name: str) -> tuple[int, ...] | None:
        try:
            return tuple(int(p) for p in version(name).split(".")[:2] if p.isdigit())
        except PackageNotFoundError:
            return None

    tools = release("setuptools")
    if tools is None or tools < (68,):
        return False
    return tools >= (70, 1) or release("wheel") is not None


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pip wheel --no-deps .`` of a copy of the checkout (pure Python: ``DMOCKER_PURE``)."""
    work = tmp_path_factory.mktemp("build")
    src = work / "src"
    # a copy: building in place would leave build/ and *.egg-info in the checkout
    shutil.copytree(ROOT, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".venv*", ".git", "build", "dist", "*.egg-info", "__pycache__", ".mypy_cache", ".pytest_cache",
        ".hypothesis", "dmocker-counterexamples", "*.so"))
    out = work / "dist"
    if _builds_without_isolation():  # fast: this interpreter's setuptools
        run = _pip("wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), ".", cwd=src)
    else:  # pip installs the build requirements (pyproject.toml) in a fresh environment first
        run = _pip("wheel", "--no-deps", "-q", "-w", str(out), ".", cwd=src)
        if run.returncode != 0 and any(s in run.stderr for s in _NO_INDEX):
            pytest.skip("cannot build a wheel here: the build requirements cannot be fetched from the "
                        f"package index: {run.stderr.strip()[-400:]}")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (found,) = out.glob("dmocker-*.whl")
    return found


@pytest.mark.slow  # builds a wheel
def test_wheel_ships_the_spec_files(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    for name in SPEC_FILES:
        assert f"dmocker/_spec/{name}" in names, names
        shipped = zipfile.ZipFile(wheel).read(f"dmocker/_spec/{name}")
        assert shipped == (ROOT / "spec" / name).read_bytes()  # the repository's spec/, copied
    assert not any(n.endswith(".data/data/share/dmocker/spec/handoff.json") for n in names)
    assert not any(n.startswith("tests/") for n in names)
    # the bundled model presets (--model NAME) are package data too
    assert zipfile.ZipFile(wheel).read("dmocker/models/presets.json") == (ROOT / "dmocker" / "models" / "presets.json").read_bytes()


@pytest.mark.slow
def test_target_install_uses_its_own_spec_not_one_above_it(wheel: Path, tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    bogus = outer / "spec" / "handoff.json"
    bogus.parent.mkdir(parents=True)
    bogus.write_text('{"spec_version": "bogus"}', encoding="utf-8")
    target = outer / "site"
    run = _pip("install", "--no-deps", "--no-index", "-q", "--target", str(target), str(wheel), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # the installed package first, then this interpreter's dependencies (numpy, statemachine, ...)
    site = [p for p in sys.path if p.endswith("site-packages")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), *site]))
    env.pop("DMOCKER_SPEC", None)
    code = "import dmocker, dmocker.handoff as h; print(dmocker.__file__); print(h.default_spec_path())"
    where = subprocess.run([sys.executable, "-c", code], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert where.returncode == 0, where.stderr
    module_file, spec_path = where.stdout.split()
    assert module_file.startswith(str(target)), module_file
    assert spec_path.startswith(str(target)), spec_path
    run = subprocess.run([sys.executable, "-m", "dmocker", "spec", "validate"], cwd=elsewhere, env=env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "bogus" not in run.stdout + run.stderr
    assert json.loads((Path(spec_path)).read_text(encoding="utf-8"))["spec_version"] != "bogus"
    # DMOCKER_SPEC still overrides (here: with the bogus file, which then fails to load)
    run = subprocess.run([sys.executable, "-m", "dmocker", "spec", "validate"], cwd=elsewhere,
                         env=dict(env, DMOCKER_SPEC=str(bogus)), capture_output=True, text=True)
    assert run.returncode == 2 and str(bogus) in run.stdout + run.stderr


def test_version_has_one_source() -> None:
    import tomllib

    doc = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in doc["project"] and "version" in doc["project"].get("dynamic", [])
    assert doc["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "dmocker.__version__"}


@pytest.mark.slow
def test_wheel_version_is_the_package_version(wheel: Path) -> None:
    import dmocker

    assert wheel.name.startswith(f"dmocker-{dmocker.__version__}-")
