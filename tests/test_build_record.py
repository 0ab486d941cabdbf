"""A compiled module edited without rebuilding stops the import instead of running its old code.

Python imports an extension module before the ``.py`` file beside it, and an editable install
keeps the compiled extensions (``setup.py``: mypyc) in the tree.  The build records the sources
it compiled (``dmocker/_build_record.py``), and importing dmocker compares them with the sources
in place.  The checker is tested on fake packages in a temporary folder; a real build (one small
module compiled in a copy of the project: editable, wheel, then pure) is marked slow.
"""

from __future__ import annotations

import os
import re
import runpy
import shutil
import subprocess
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmocker._build_record import RECORD_NAME, StaleBuildError, check, record_line, stale_modules, write_record

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {"engines/vllm.py": "def step() -> int:\n    return 1\n", "replay/runtime.py": "X = 1\n"}


def _built(tmp_path: Path, *, extensions: bool = True, checkout: bool = True) -> Path:
    """A fake package as a compiled build leaves it: sources, extensions beside them, the record."""
    package = tmp_path / "dmocker"
    for source, text in SOURCES.items():
        path = package / source
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if extensions:
            path.with_name(path.stem + EXTENSION_SUFFIXES[0]).write_bytes(b"\x7fELF")
    if extensions:
        (package / f"_native__mypyc{EXTENSION_SUFFIXES[0]}").write_bytes(b"\x7fELF")
    write_record(str(package / RECORD_NAME), [record_line(str(package), s) for s in SOURCES])
    if checkout:
        (tmp_path / "setup.py").write_text("", encoding="utf-8")
    return package


def _later(path: Path) -> None:
    """Give ``path`` a new modification time, as saving it in an editor does."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def test_an_unchanged_build_imports(tmp_path: Path) -> None:
    package = _built(tmp_path)
    assert stale_modules(str(package)) == []
    check(str(package))


def test_a_touched_source_with_the_same_content_imports(tmp_path: Path) -> None:
    package = _built(tmp_path)
    for source in SOURCES:
        _later(package / source)
    assert stale_modules(str(package)) == []


def test_an_edited_source_stops_the_import_naming_the_module_and_the_fix(tmp_path: Path) -> None:
    package = _built(tmp_path)
    (package / "engines/vllm.py").write_text(SOURCES["engines/vllm.py"] + "# edited\n", encoding="utf-8")
    with pytest.raises(StaleBuildError) as caught:
        check(str(package))
    message = str(caught.value)
    assert "dmocker.engines.vllm: engines/vllm.py changed since the build" in message
    assert "runtime" not in message
    assert f"pip install -e {tmp_path}" in message
    assert f"DMOCKER_PURE=1 pip install -e {tmp_path}" in message
    assert isinstance(caught.value, ImportError)


def test_an_edit_of_the_same_size_is_caught_by_the_checksum(tmp_path: Path) -> None:
    package = _built(tmp_path)
    path = package / "engines/vllm.py"
    path.write_text(SOURCES["engines/vllm.py"].replace("1", "2"), encoding="utf-8")
    _later(path)
    assert stale_modules(str(package)) == ["dmocker.engines.vllm: engines/vllm.py changed since the build"]


def test_a_removed_source_whose_extension_is_still_there_is_stale(tmp_path: Path) -> None:
    package = _built(tmp_path)
    (package / "replay/runtime.py").unlink()
    assert stale_modules(str(package)) == ["dmocker.replay.runtime: replay/runtime.py was removed after the build"]


def test_a_source_without_an_extension_beside_it_runs_as_edited(tmp_path: Path) -> None:
    # a copy of the sources with the record but no extensions (tests/replay/test_compiled.py
    # makes one), or an extension built for another interpreter
    package = _built(tmp_path, extensions=False)
    (package / "engines/vllm.py").write_text("# edited\n", encoding="utf-8")
    (package / "replay/runtime.py").unlink()
    assert stale_modules(str(package)) == []


def test_extensions_without_a_record_cannot_be_trusted(tmp_path: Path) -> None:
    package = _built(tmp_path)
    (package / RECORD_NAME).unlink()
    with pytest.raises(StaleBuildError, match=f"_native__mypyc{re.escape(EXTENSION_SUFFIXES[0])}: built without"):
        check(str(package))


def test_an_unreadable_record_cannot_be_trusted(tmp_path: Path) -> None:
    package = _built(tmp_path)
    with (package / RECORD_NAME).open("a", encoding="utf-8") as f:
        f.write("0 x\n")
    with pytest.raises(StaleBuildError, match="unreadable line '0 x'"):
        check(str(package))


def test_a_pure_install_has_nothing_to_check(tmp_path: Path) -> None:
    package = _built(tmp_path, extensions=False)
    (package / RECORD_NAME).unlink()
    (package / "engines/vllm.py").write_text("# edited\n", encoding="utf-8")
    assert stale_modules(str(package)) == []


def test_an_installed_wheel_says_reinstall(tmp_path: Path) -> None:
    package = _built(tmp_path, checkout=False)
    (package / "engines/vllm.py").write_text("# edited\n", encoding="utf-8")
    with pytest.raises(StaleBuildError, match="Reinstall dmocker") as caught:
        check(str(package))
    assert "pip install -e" not in str(caught.value)


@settings(max_examples=50)
@given(st.binary(max_size=200), st.binary(max_size=200), st.booleans())
def test_stale_exactly_when_the_content_differs(built: bytes, now: bytes, touched: bool) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        package = Path(tmp) / "dmocker"
        package.mkdir()
        source = package / "mod.py"
        source.write_bytes(built)
        (package / f"mod{EXTENSION_SUFFIXES[0]}").write_bytes(b"")
        write_record(str(package / RECORD_NAME), [record_line(str(package), "mod.py")])
        if touched or now != built:
            source.write_bytes(now)
            _later(source)
        assert stale_modules(str(package)) == ([] if now == built else ["dmocker.mod: mod.py changed since the build"])


def test_the_build_in_this_tree_records_exactly_the_compiled_modules() -> None:
    """This checkout's own build: the record lists setup.py's COMPILED, and it is current."""
    record = ROOT / "dmocker" / RECORD_NAME
    if not record.exists():
        pytest.skip("no compiled build in this tree (DMOCKER_PURE=1, or installed elsewhere)")
    compiled: list[str] = runpy.run_path(str(ROOT / "setup.py"), run_name="setup_py")["COMPILED"]
    listed = [line.split(" ", 3)[3] for line in record.read_text(encoding="utf-8").splitlines()
              if not line.startswith("#")]
    assert sorted(f"dmocker/{s}" for s in listed) == sorted(compiled)
    assert stale_modules(str(ROOT / "dmocker")) == []


# A real build: one tiny module compiled in a copy of the project.

PROBE = "dmocker/_stale_probe.py"


def _run(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in ("DMOCKER_PURE", "DMOCKER_SPEC")}
    return subprocess.run(args, cwd=cwd, env={**full, "PIP_DISABLE_PIP_VERSION_CHECK": "1", **env},
                          capture_output=True, text=True, timeout=900)


def _build(copy: Path, hook: str, **env: str) -> Path:
    """A PEP 517 hook of setuptools, as pip runs it (``pip install -e``: ``build_editable``); the
    wheel it made."""
    out = copy.parent / f"{hook}-{'pure' if env.get('DMOCKER_PURE') else 'compiled'}"
    run = _run([sys.executable, "-c", f"from setuptools import build_meta; build_meta.{hook}({str(out)!r})"], copy,
               **env)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    (wheel,) = out.glob("dmocker-*.whl")
    return wheel


def _probe(where: Path, pythonpath: str) -> subprocess.CompletedProcess[str]:
    code = "import dmocker._stale_probe as m; print(m.__file__); print(m.value())"
    return _run([sys.executable, "-c", code], where, PYTHONPATH=pythonpath)


@pytest.mark.slow  # compiles a module with mypyc twice (editable, wheel)
def test_a_real_build_stops_a_stale_import_and_a_pure_one_runs_the_edit(tmp_path: Path) -> None:
    copy = tmp_path / "src"
    shutil.copytree(ROOT, copy, symlinks=True, ignore=shutil.ignore_patterns(
        ".venv*", ".git", "build", "dist", "*.egg-info", "__pycache__", ".mypy_cache", ".pytest_cache",
        ".hypothesis", "dmocker-counterexamples", "*.so", "*.pyd", RECORD_NAME))
    probe = copy / PROBE
    probe.write_text("def value() -> int:\n    return 1\n", encoding="utf-8")
    setup_py = copy / "setup.py"
    text, n = re.subn(r"(?ms)^COMPILED = \[.*?^\]", f'COMPILED = ["{PROBE}"]', setup_py.read_text(encoding="utf-8"))
    assert n == 1, "setup.py: no `COMPILED = [...]` list to replace"
    setup_py.write_text(text, encoding="utf-8")

    # editable (in place), compiled: the extension is imported, then an edit stops the import
    _build(copy, "build_editable")
    assert (copy / "dmocker" / RECORD_NAME).exists()
    ok = _probe(copy, str(copy))
    assert ok.returncode == 0 and ok.stdout.split() == [str(probe.with_suffix(EXTENSION_SUFFIXES[0])), "1"], ok
    built = probe.read_bytes()
    probe.write_text("def value() -> int:\n    return 2\n", encoding="utf-8")
    stale = _probe(copy, str(copy))
    assert stale.returncode != 0
    assert "dmocker._stale_probe: _stale_probe.py changed since the build" in stale.stderr, stale.stderr
    assert f"pip install -e {copy}" in stale.stderr and "DMOCKER_PURE=1 pip install -e" in stale.stderr
    probe.write_bytes(built)  # restored: a new modification time, the built content
    assert _probe(copy, str(copy)).returncode == 0

    # a compiled wheel carries the record; editing the installed source stops the import too
    wheel = _build(copy, "build_wheel")
    target = tmp_path / "site"
    run = _run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(target),
                str(wheel)], tmp_path)
    assert run.returncode == 0, run.stderr
    site = os.pathsep.join([str(target), *(p for p in sys.path if p.endswith("site-packages"))])
    installed = _probe(tmp_path, site)
    assert installed.returncode == 0 and installed.stdout.split()[1] == "1", installed
    assert installed.stdout.split()[0].startswith(str(target)) and not installed.stdout.split()[0].endswith(".py")
    (target / PROBE).write_text("def value() -> int:\n    return 3\n", encoding="utf-8")
    edited = _probe(tmp_path, site)
    assert edited.returncode != 0 and "dmocker._stale_probe" in edited.stderr and "Reinstall" in edited.stderr

    # editable, pure: the extensions and the record leave the tree, and the edited source runs
    probe.write_text("def value() -> int:\n    return 2\n", encoding="utf-8")
    _build(copy, "build_editable", DMOCKER_PURE="1")
    assert not any(p.name.endswith((".so", ".pyd")) for p in (copy / "dmocker").rglob("*"))
    assert not (copy / "dmocker" / RECORD_NAME).exists()
    assert _probe(copy, str(copy)).stdout.split() == [str(probe), "2"]
