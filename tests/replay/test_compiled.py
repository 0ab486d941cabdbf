"""The compiled replay core (``setup.py``: mypyc) against its own source, interpreted.

mypyc compiles the same ``.py`` files, but it changes how they run: attributes become C
fields, annotations are enforced at run time, integer arithmetic is native.  So the compiled
build is tested as a fast path against its plain twin: a seeded draw of small workloads over
both engines, preemption and retraction, transfer delay, sessions, KV routing, bulk and
per-pass decoding and injected faults is replayed by both, and the summaries, per-request
records and event logs must be byte-identical.  The heavy workloads of ``bench/replay_bench.py``
are checked the same way by their output md5s (``--outputs``).
"""

from __future__ import annotations

import ast
import os
import runpy
import shutil
import subprocess
import sys
from importlib import import_module
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TWIN = Path(__file__).with_name("twin_runs.py")
COMPILED: list[str] = runpy.run_path(str(ROOT / "setup.py"), run_name="setup_py")["COMPILED"]
PURE_BUILD = os.environ.get("DMOCKER_PURE", "") not in ("", "0")


def _module(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def test_the_listed_modules_are_compiled_unless_the_build_is_pure() -> None:
    """A build that silently fell back to pure Python would be 2x slower and look fine."""
    assert COMPILED, "setup.py compiles nothing"
    for path in COMPILED:
        origin = import_module(_module(path)).__file__ or ""
        assert origin.endswith(".py") == PURE_BUILD, (path, origin, "DMOCKER_PURE" if PURE_BUILD else "compiled")


def _replays(out: Path, pure_copy: Path | None) -> str:
    cmd = [sys.executable, str(TWIN), str(out)]
    if pure_copy is not None:
        cmd += ["--pure", str(pure_copy)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout.strip()


@pytest.mark.slow  # two subprocesses replay 36 workloads
@pytest.mark.skipif(PURE_BUILD, reason="DMOCKER_PURE build: nothing is compiled to compare with")
def test_compiled_and_interpreted_replays_are_byte_identical(tmp_path: Path) -> None:
    pure = tmp_path / "pure"
    shutil.copytree(ROOT / "dmocker", pure / "dmocker", ignore=shutil.ignore_patterns("*.so", "*.pyd", "__pycache__"))
    compiled_origin = _replays(tmp_path / "compiled", None)
    pure_origin = _replays(tmp_path / "interpreted", pure)
    assert not compiled_origin.endswith(".py"), compiled_origin
    assert pure_origin == str(pure / "dmocker" / "replay" / "runtime" / "loop.py"), pure_origin
    names = sorted(p.name for p in (tmp_path / "compiled").iterdir())
    assert len(names) == 3 * 12 and names == sorted(p.name for p in (tmp_path / "interpreted").iterdir())
    for name in names:
        a = (tmp_path / "compiled" / name).read_bytes()
        b = (tmp_path / "interpreted" / name).read_bytes()
        assert a == b, f"{name}: compiled and interpreted replays differ"
    assert any((tmp_path / "compiled" / n).stat().st_size > 0 for n in names if n.endswith("records.jsonl"))


def _declared_attributes() -> dict[str, tuple[set[str], list[str], ast.ClassDef, str]]:
    """Every class of the compiled modules: (attributes its body declares, base names, node, path)."""
    out: dict[str, tuple[set[str], list[str], ast.ClassDef, str]] = {}
    for path in COMPILED:
        tree = ast.parse((ROOT / path).read_text())
        for node in tree.body:
            if not isinstance(node, ast.ClassDef):
                continue
            declared = {s.target.id for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
            bases = [b.value.id if isinstance(b, ast.Subscript) and isinstance(b.value, ast.Name)
                     else b.id if isinstance(b, ast.Name) else "" for b in node.bases]
            out[node.name] = (declared, bases, node, path)
    return out


def test_no_compiled_class_declares_an_inherited_attribute_again() -> None:
    """mypyc lists an attribute annotated both in a base class and again in a subclass (in its
    body or as ``self.x: T = ...``) twice in the subclass's GC traversal, though the object
    holds one reference: the collector's reference counting is then off by one per such field,
    and an object held there and by a long-lived container can be judged garbage and cleared
    (seen: a user router's ``__dict__`` emptied after a run).  Subclasses assign inherited
    attributes without an annotation."""
    classes = _declared_attributes()

    def inherited(name: str) -> set[str]:
        _, bases, _, _ = classes[name]
        got: set[str] = set()
        for b in bases:
            if b in classes:
                got |= classes[b][0] | inherited(b)
        return got

    offenders: list[str] = []
    for name, (declared, _, node, path) in classes.items():
        base_attrs = inherited(name)
        offenders += [f"{path}:{name}.{a} (class body)" for a in sorted(declared & base_attrs)]
        for fn in ast.walk(node):
            if isinstance(fn, ast.AnnAssign) and isinstance(fn.target, ast.Attribute) \
                    and isinstance(fn.target.value, ast.Name) and fn.target.value.id == "self" \
                    and fn.target.attr in base_attrs:
                offenders.append(f"{path}:{fn.lineno}: self.{fn.target.attr}")
    assert not offenders, offenders


#: Project modules a compiled module may import that stay interpreted, and why.  Anything else a
#: compiled module imports at module level must be compiled too: a module on the per-request
#: path left out of ``setup.py`` runs as interpreted code with nothing to say so (one such
#: omission once cost 14 % of a replay's instructions).
INTERPRETED_BY_DESIGN: dict[str, str] = {
    "dmocker.replay.errors": "exceptions (mypyc cannot compile a subclass of a built-in exception)",
    "dmocker.replay.workload.errors": "exceptions",
    "dmocker.engines.errors": "exceptions",
    "dmocker.handoff": "the package's face: re-exports",
    "dmocker.replay.routing": "the package's face: re-exports",
    "dmocker.replay.workload": "the package's face: re-exports",
    "dmocker.engines.engine_args": "EngineArgs validates any value field by field (a compiled class would raise a bare TypeError first)",
    "dmocker.engines.engine_spec": "an engine's declaration, read when a worker is built",
    "dmocker.engines.profile": "a measured timing profile: read once, interpolated with numpy or bisect",
    "dmocker.handoff._registry": "name -> class maps, read when the spec loads",
    "dmocker.handoff._spec": "the spec's value classes, built once when it loads",
    "dmocker.handoff._spec_load": "reads the spec file, once",
    "dmocker.replay.report": "summary and JSON writing, after the run (and one line per record)",
    "dmocker.replay.exact_sum": "exact sums of the sketches, once per flush of a buffer",
    "dmocker.replay.routing.config": "the KV router's settings, read at construction",
    "dmocker.replay.routing.context": "values handed to a router at construction",
    "dmocker.replay.routing.protocol": "the router protocol (a typing.Protocol)",
    "dmocker.replay.runtime.observer": "the planner's protocols (typing.Protocol)",
    "dmocker.replay.timeseries": "the HTML report's time series, sampled once per bucket and only when asked",
}


def _module_level_imports(module: str) -> set[str]:
    """Project modules ``module`` imports at module level (not under TYPE_CHECKING)."""
    path = ROOT / (module.replace(".", "/") + ".py")
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for n in node.body if isinstance(node, ast.Try) else [node]:
            if isinstance(n, ast.ImportFrom):
                parts = module.split(".")
                base = ".".join([*parts[: len(parts) - n.level], *([n.module] if n.module else [])]) if n.level \
                    else (n.module or "")
                for alias in n.names:
                    sub = f"{base}.{alias.name}"
                    out.add(sub if (ROOT / (sub.replace(".", "/") + ".py")).exists() else base)
            elif isinstance(n, ast.Import):
                out.update(a.name for a in n.names)
    return {m for m in out if m == "dmocker" or m.startswith("dmocker.")}


def test_what_compiled_modules_import_is_compiled_or_interpreted_by_design() -> None:
    compiled = {p.removesuffix(".py").replace("/", ".") for p in COMPILED}
    missing = sorted(
        f"{dep} (imported by {mod})"
        for mod in compiled
        for dep in _module_level_imports(mod)
        if dep not in compiled and dep not in INTERPRETED_BY_DESIGN
    )
    assert not missing, "compile these (setup.py COMPILED) or say why not in INTERPRETED_BY_DESIGN: " + ", ".join(missing)
    stale = sorted(set(INTERPRETED_BY_DESIGN) & compiled)
    assert not stale, f"compiled now, drop them from INTERPRETED_BY_DESIGN: {stale}"
