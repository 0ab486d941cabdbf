"""Build dmocker with its replay core compiled by mypyc (pure Python with ``DMOCKER_PURE=1``).

Why compiled: the replay's per-request path (runtime, engines, block pool, collector, queues,
trace reader) is plain typed Python; mypyc turns its classes into C structs and its calls into
direct C calls, which is what lets the replay outrun the reference (``bench/replay_bench.py``).
The compiled modules are the same source as the pure ones: ``tests/replay/test_compiled.py``
replays randomized workloads with both and compares the outputs byte for byte.

``DMOCKER_PURE=1 pip install -e .`` skips compilation (for editing the compiled modules without
rebuilding), and removes the extension modules an earlier build left in the tree.

An extension module is imported instead of the ``.py`` file beside it, so the build records the
sources it compiled (``dmocker/_build_record.py``: checksum, size, modification time) beside the
extensions; importing dmocker stops with an error naming the modules whose sources changed since.
"""

from __future__ import annotations

import os
import runpy
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
PACKAGE = "dmocker"

# The modules on the replay's per-request path; everything else stays interpreted.
COMPILED = [
    "dmocker/engines/block_pool.py",
    "dmocker/engines/block_runs.py",
    "dmocker/engines/bulk_run.py",
    "dmocker/engines/common.py",
    "dmocker/engines/handoff_book.py",
    "dmocker/engines/handoff_commands.py",
    "dmocker/engines/hashing.py",
    "dmocker/engines/interface.py",
    "dmocker/engines/outbox.py",
    "dmocker/engines/sglang.py",
    "dmocker/engines/sglang_bulk.py",
    "dmocker/engines/sglang_decode.py",
    "dmocker/engines/sglang_queues.py",
    "dmocker/engines/sglang_request.py",
    "dmocker/engines/sglang_scheduler.py",
    "dmocker/engines/timing.py",
    "dmocker/engines/vllm.py",
    "dmocker/engines/vllm_bulk.py",
    "dmocker/engines/vllm_lockstep.py",
    "dmocker/engines/vllm_queues.py",
    "dmocker/engines/vllm_request.py",
    "dmocker/engines/vllm_scheduler.py",
    "dmocker/handoff/_coordinator.py",
    "dmocker/handoff/_table.py",
    "dmocker/handoff/_types.py",
    "dmocker/replay/batch_epochs.py",
    "dmocker/replay/collector.py",
    "dmocker/replay/events.py",
    "dmocker/replay/records.py",
    "dmocker/replay/request_state.py",
    "dmocker/replay/runtime/agg.py",
    "dmocker/replay/runtime/clock.py",
    "dmocker/replay/runtime/control.py",
    "dmocker/replay/runtime/executor.py",
    "dmocker/replay/runtime/handoffs.py",
    "dmocker/replay/runtime/lifecycle.py",
    "dmocker/replay/runtime/loop.py",
    "dmocker/replay/runtime/pass_effects.py",
    "dmocker/replay/runtime/passes.py",
    "dmocker/replay/runtime/pool.py",
    "dmocker/replay/runtime/requests.py",
    "dmocker/replay/runtime/routes.py",
    "dmocker/replay/routing/base.py",
    "dmocker/replay/routing/kv_index.py",
    "dmocker/replay/routing/kv_router.py",
    "dmocker/replay/routing/queue.py",
    "dmocker/replay/routing/round_robin.py",
    "dmocker/replay/sketch.py",
    "dmocker/replay/workload/admission.py",
    "dmocker/replay/workload/mooncake.py",
    "dmocker/replay/workload/types.py",
]


def _pure() -> bool:
    return os.environ.get("DMOCKER_PURE", "") not in ("", "0")


# The package's build record, loaded as a plain file: the package is not importable mid-build.
_RECORD = runpy.run_path(str(ROOT / PACKAGE / "_build_record.py"))


def _extensions_in_tree() -> list[Path]:
    """Extension modules in the source tree's package (git-ignored build outputs)."""
    return [p for p in (ROOT / PACKAGE).rglob("*") if p.name.endswith((".so", ".pyd")) and p.is_file()]


def _in_parallel(compile_one: Callable[..., list[str]], jobs: int) -> Callable[..., list[str]]:
    """A compiler's ``compile`` that runs one compiler process per source file, ``jobs`` at a
    time (setuptools compiles an extension's sources one after the other)."""

    def compile_all(sources: list[str], *args: object, **kwargs: object) -> list[str]:
        if jobs < 2 or len(sources) < 2:
            return compile_one(sources, *args, **kwargs)
        with ThreadPoolExecutor(jobs) as pool:
            parts = list(pool.map(lambda source: compile_one([source], *args, **kwargs), sources))
        return [obj for part in parts for obj in part]

    return compile_all


def _compiled_build_ext(record_lines: list[str]) -> type[build_ext]:
    class BuildExtWithRecord(build_ext):
        """Compiles the C sources of the core on every core of the machine; writes the record
        of the compiled sources beside the extensions (into the wheel; into the tree too when
        building in place, as an editable install does), and removes from the tree the
        extension modules of an earlier build that this one did not make."""

        def build_extensions(self) -> None:
            self.compiler.compile = _in_parallel(self.compiler.compile, os.cpu_count() or 1)  # type: ignore[method-assign]
            super().build_extensions()

        def run(self) -> None:
            super().run()
            target = Path(self.build_lib) / PACKAGE
            target.mkdir(parents=True, exist_ok=True)
            _RECORD["write_record"](str(target / _RECORD["RECORD_NAME"]), record_lines)
            if self.inplace:
                made = {Path(p).resolve() for p in self.get_output_mapping().values()}  # the in-tree copies
                for stale in _extensions_in_tree():
                    if stale.resolve() not in made:
                        stale.unlink()
                _RECORD["write_record"](str(ROOT / PACKAGE / _RECORD["RECORD_NAME"]), record_lines)

    return BuildExtWithRecord


class PureBuildPy(build_py):
    """An editable pure install removes the extension modules and the record an earlier compiled
    build left in the tree: they would be imported instead of the sources."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            for path in [*_extensions_in_tree(), ROOT / PACKAGE / _RECORD["RECORD_NAME"]]:
                path.unlink(missing_ok=True)


def _setup_compiled() -> None:
    from mypyc.build import mypycify

    package_dir = str(ROOT / PACKAGE)
    prefix = PACKAGE + "/"
    # recorded before mypyc reads the sources: an edit made during the build is seen at import
    lines = [_RECORD["record_line"](package_dir, path.removeprefix(prefix)) for path in COMPILED]
    # One C file per module (multi_file), so that the compiler runs on all cores at once.
    extensions = list(mypycify(COMPILED, opt_level="3", group_name=f"{PACKAGE}._native", multi_file=True))
    for ext in extensions:  # the per-module files include the group's header, written beside its C file
        ext.include_dirs.append(os.path.join("build", PACKAGE))
    setup(ext_modules=extensions,
          cmdclass={"build_ext": _compiled_build_ext(lines)})


if __name__ == "__main__":  # setuptools runs this file as __main__; tests read COMPILED only
    if _pure():
        setup(cmdclass={"build_py": PureBuildPy})
    else:
        _setup_compiled()
