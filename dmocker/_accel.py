"""Choose between the mypyc-compiled replay hot path and its pure-Python sources.

Why this exists: ``setup.py`` may compile some replay modules with mypyc, and an editable
install puts the extension files next to the ``.py`` sources, where Python prefers them. An
edit to such a source would then be silently ignored. The build records a sha256 of every
compiled source in ``_accel_manifest.json``; at import this module compares them with the
sources on disk and, if any differs (or ``DMOCKER_PURE_PYTHON=1`` is set at run time), makes
every compiled module load from its ``.py`` instead (a ``sys.meta_path`` finder).

It is all or nothing on purpose: compiled modules of one mypyc group call each other's native
code directly, so mixing a compiled caller with an interpreted callee is not safe.
Outputs are byte-identical either way; only speed differs.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType

PURE_ENV = "DMOCKER_PURE_PYTHON"
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_PARENT_DIR = os.path.dirname(_PACKAGE_DIR)
_MANIFEST = os.path.join(_PACKAGE_DIR, "_accel_manifest.json")


@dataclass(frozen=True, slots=True)
class Plan:
    """Which compiled modules must load from source, and which of them were stale."""

    pure: tuple[str, ...]
    stale: tuple[str, ...]


def plan(
    recorded: Mapping[str, str],
    current: Mapping[str, str | None],
    compiled: Sequence[str],
    force_pure: bool,
) -> Plan:
    """Decide from the build's source hashes (``recorded``), today's (``current``, None =
    source missing) and the modules that have an extension file (``compiled``).

    A compiled module is stale when its source hash differs from the recorded one or was
    never recorded. Any stale module, or ``force_pure``, sends every compiled module to source.
    """
    stale = tuple(sorted(name for name in compiled if recorded.get(name) != current.get(name)))
    pure = tuple(sorted(compiled)) if (force_pure or stale) else ()
    return Plan(pure=pure, stale=stale)


def _source_path(module: str) -> str:
    return os.path.join(_PARENT_DIR, *module.split(".")) + ".py"


def _has_extension(module: str) -> bool:
    stem = os.path.join(_PARENT_DIR, *module.split("."))
    return any(os.path.exists(stem + suffix) for suffix in importlib.machinery.EXTENSION_SUFFIXES)


def _sha256(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()
    except OSError:
        return None


def _read_manifest() -> dict[str, str]:
    try:
        with open(_MANIFEST, encoding="utf-8") as fh:
            modules = json.load(fh)["modules"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return {str(name): str(digest) for name, digest in modules.items()}


def _unrecorded_extensions() -> list[str]:
    """Extension modules with a sibling .py but no manifest: a build that did not finish."""
    found: list[str] = []
    for directory, subdirs, files in os.walk(_PACKAGE_DIR):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
        for name in sorted(files):
            for suffix in importlib.machinery.EXTENSION_SUFFIXES:
                stem = name[: -len(suffix)]
                if name.endswith(suffix) and os.path.exists(os.path.join(directory, stem + ".py")):
                    rel = os.path.relpath(os.path.join(directory, stem), _PARENT_DIR)
                    found.append(rel.replace(os.sep, "."))
    return found


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Maps the given module names to their ``.py`` files, ahead of the extension files."""

    def __init__(self, modules: Sequence[str]) -> None:
        self._modules = frozenset(modules)

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self._modules:
            return None
        return importlib.util.spec_from_file_location(fullname, _source_path(fullname))


def _install() -> Plan:
    recorded = _read_manifest()
    compiled = [m for m in sorted(recorded) if _has_extension(m)] if recorded else _unrecorded_extensions()
    if not compiled:
        return Plan(pure=(), stale=())
    current = {m: _sha256(_source_path(m)) for m in compiled}
    force_pure = os.environ.get(PURE_ENV) == "1"
    decision = plan(recorded, current, compiled, force_pure=force_pure)
    if decision.stale and not force_pure:  # asked for pure Python: staleness changes nothing
        # Plain stderr, not warnings.warn: its "file:line" would point into importlib. Runs
        # once per process (module import).
        print(
            "dmocker: warning: the compiled (mypyc) build is older than these sources: "
            + ", ".join(decision.stale)
            + "; using the pure-Python sources for all compiled modules (same outputs, slower)."
            " Rebuild with `pip install -e .` to get the speed back.",
            file=sys.stderr,
        )
    if decision.pure:
        sys.meta_path.insert(0, _SourceFinder(decision.pure))
    return decision


PLAN = _install()


def accelerated() -> bool:
    """True when the replay hot path runs compiled (mypyc), False when it runs as pure Python."""
    spec = importlib.util.find_spec("dmocker.engines.vllm")
    return spec is not None and spec.origin is not None and not spec.origin.endswith(".py")


def hot_path_label() -> str:
    """``"compiled"`` or ``"pure Python"``: what ``dmocker --version`` and the replay's summary
    print, because pip hides the build output that says whether the compile worked."""
    return "compiled" if accelerated() else "pure Python"
