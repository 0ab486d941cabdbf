"""Build dmocker with its replay core compiled by mypyc (pure Python with ``DMOCKER_PURE=1``).

Why compiled: the replay's per-request path (runtime, engines, block pool, collector, queues,
trace reader) is plain typed Python; mypyc turns its classes into C structs and its calls into
direct C calls, which is what lets the replay outrun the reference (``bench/replay_bench.py``).
The compiled modules are the same source as the pure ones: ``tests/replay/test_compiled.py``
replays randomized workloads with both and compares the outputs byte for byte.

``DMOCKER_PURE=1 pip install -e .`` skips compilation (for editing the compiled modules without
rebuilding: an extension module shadows its ``.py`` file until the next install).
"""

from __future__ import annotations

import os

from setuptools import setup

# The modules on the replay's per-request path; everything else stays interpreted.
COMPILED = [
    "dmocker/engines/block_pool.py",
    "dmocker/engines/common.py",
    "dmocker/engines/handoff_base.py",
    "dmocker/engines/hashing.py",
    "dmocker/engines/interface.py",
    "dmocker/engines/sglang.py",
    "dmocker/engines/sglang_decode.py",
    "dmocker/engines/sglang_request.py",
    "dmocker/engines/timing.py",
    "dmocker/engines/vllm.py",
    "dmocker/engines/vllm_lockstep.py",
    "dmocker/engines/vllm_request.py",
    "dmocker/handoff/_coordinator.py",
    "dmocker/handoff/_table.py",
    "dmocker/handoff/_types.py",
    "dmocker/replay/batch_epochs.py",
    "dmocker/replay/collector.py",
    "dmocker/replay/events.py",
    "dmocker/replay/records.py",
    "dmocker/replay/request_state.py",
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


def _ext_modules() -> list[object]:
    if os.environ.get("DMOCKER_PURE", "") not in ("", "0"):
        return []
    from mypyc.build import mypycify

    return list(mypycify(COMPILED, opt_level="3", group_name="dmocker._native"))


if __name__ == "__main__":  # setuptools runs this file as __main__; tests read COMPILED only
    setup(ext_modules=_ext_modules())
