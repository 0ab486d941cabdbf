"""Optional mypyc build of the replay hot path (pyproject.toml stays the metadata source).

Why a setup.py: setuptools has no declarative way to list C extensions. The modules in
``COMPILED`` are compiled with mypyc when possible; the install still succeeds as pure Python
(with a warning) when there is no C compiler, and ``DMOCKER_PURE_PYTHON=1`` skips the build.
Outputs are byte-identical either way. At build time a manifest of the compiled modules'
source hashes is written next to the package (``dmocker/_accel_manifest.json``) so that
``dmocker/_accel.py`` can fall back to the sources when an editable checkout was edited after
the build (see README, "Speed: compiled hot path").
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

from setuptools import setup
from setuptools.command.build_ext import build_ext

# Keep in sync with nothing: _accel.py reads the manifest written below, not this list.
COMPILED = [
    "dmocker/engines/block_pool.py",
    "dmocker/engines/common.py",
    "dmocker/engines/handoff_base.py",
    "dmocker/engines/hashing.py",
    "dmocker/engines/sglang.py",
    "dmocker/engines/timing.py",
    "dmocker/engines/vllm.py",
    "dmocker/replay/collector.py",
    "dmocker/replay/exact_sum.py",
    "dmocker/replay/routing/kv_index.py",
    "dmocker/replay/routing/queue.py",
    "dmocker/replay/workload/admission.py",
    "dmocker/replay/workload/synthetic.py",
]
MANIFEST = "dmocker/_accel_manifest.json"
HERE = os.path.dirname(os.path.abspath(__file__))


def _warn(message: str) -> None:
    print(f"WARNING (dmocker): {message}", file=sys.stderr)


def _manifest() -> str:
    """Module name -> sha256 of the source that was compiled (read by dmocker/_accel.py)."""
    modules: dict[str, str] = {}
    for path in COMPILED:
        with open(os.path.join(HERE, path), "rb") as fh:
            digest = hashlib.sha256(fh.read()).hexdigest()
        modules[path[: -len(".py")].replace("/", ".")] = digest
    return json.dumps({"modules": modules}, indent=1, sort_keys=True) + "\n"


class OptionalBuildExt(build_ext):
    """Build the mypyc extensions if possible; on any failure install pure Python instead."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, missing headers, ...: pure Python still works
            _warn(f"compiling the replay hot path failed ({exc}); installing pure Python (slower, same outputs)")
            return
        self._write_manifest()

    def _write_manifest(self) -> None:
        text = _manifest()
        targets = {os.path.join(self.build_lib, MANIFEST)}
        if self.inplace or getattr(self, "editable_mode", False):
            targets.add(os.path.join(HERE, MANIFEST))
        for target in sorted(targets):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target, "w", encoding="utf-8") as fh:
                fh.write(text)


def _metadata_only() -> bool:
    """pip runs setup.py for metadata first (egg_info, dist_info): no need to run mypyc then."""
    command = next((arg for arg in sys.argv[1:] if not arg.startswith("-")), None)
    return command in ("egg_info", "dist_info", "sdist")


def _ext_modules() -> list[object]:
    if _metadata_only():
        return []
    if os.environ.get("DMOCKER_PURE_PYTHON") == "1":
        _warn("DMOCKER_PURE_PYTHON=1: not compiling the replay hot path")
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        _warn("mypyc not available; installing pure Python (slower, same outputs)")
        return []
    try:
        # group_name puts mypyc's shared library inside the package (dmocker/_compiled__mypyc*.so)
        # instead of a top-level module with a hashed name.
        return list(mypycify(COMPILED, opt_level="3", group_name="dmocker._compiled"))
    except (Exception, SystemExit) as exc:  # a type error mypyc rejects must not break the install
        _warn(f"mypyc could not compile the replay hot path ({exc!r}, errors above);"
              " installing pure Python (slower, same outputs)")
        return []


setup(ext_modules=_ext_modules(), cmdclass={"build_ext": OptionalBuildExt})
