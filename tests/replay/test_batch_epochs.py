"""Batch epochs (per-batch token counts, fed by the engines' batch deltas) against the plain
per-member collector: identical per-request records, event logs and summaries, byte for byte.

The epoch path updates only the requests that join or leave a decode batch, trusting the
engine's :class:`~dmocker.engines.interface.BatchDelta`; the plain path ignores deltas and
updates every emitted request at every pass.  A wrong delta, a missed leave or a gap sample
folded differently shows up as a difference.  The workloads are the bulk differential's
(small pools for preemption and retraction, sessions, prefix sharing, transfer delay,
injected Canceled / Failed / TimedOut facts), with and without bulk runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dmocker.engines.interface import BatchDelta
from dmocker.replay import ReplayConfig
from dmocker.replay.collector import Collector
from dmocker.replay.faults import FaultPlan, Pool, WorkerCrash
from dmocker.replay.workload import SyntheticSpec

from .helpers import both_ways
from .planner.sample_planners import Stepper
from .test_bulk_differential import _params, _replay


@pytest.mark.slow  # quick twin: test_epochs_are_used_and_match_on_busy_batches
@given(_params(), st.booleans())
def test_epochs_match_the_plain_collector(params: dict[str, object], bulk: bool) -> None:
    both = both_ways(lambda epochs: _replay(params, bulk=bulk, batch_epochs=epochs))
    if both is None:  # a workload the engines cannot serve fails the same way both ways
        return
    epochs, plain = both
    assert epochs[0] == plain[0]  # per-request records
    assert epochs[1] == plain[1]  # event log
    assert epochs[2] == plain[2]  # summary


def test_epochs_are_used_and_match_on_busy_batches() -> None:
    """Large batches that change at most passes, both engines, with and without bulk runs: the
    deltas are handed out and taken (the epoch path runs), and the outputs are the plain ones."""
    for engine in ("vllm", "sglang"):
        for bulk in (False, True):
            params: dict[str, object] = {
                "engine": engine, "block_size": 16 if engine == "vllm" else 64, "blocks": 4096,
                "max_seqs": 256, "bandwidth": 50.0, "decode": 2,
                "spec": SyntheticSpec(requests=120, rate=60.0, isl_mean=600, osl_mean=60, spread=0.5, seed=5,
                                      trace_block_size=64),
                "inject": [(700.0, 5, 0), (900.0, 9, 1)],
            }
            epochs = _replay(params, bulk, True)
            plain = _replay(params, bulk, False)
            assert epochs[4] > 50 and plain[4] == 0, (engine, bulk, epochs[4])
            assert epochs[:3] == plain[:3], (engine, bulk)


def test_a_delta_that_does_not_lead_from_the_last_array_is_ignored() -> None:
    """A delta whose base is not the array the worker emitted last (or whose ids are not the
    ones given) changes nothing: the pass is applied in full."""
    a, b = Collector(10), Collector(10, batch_epochs=False)
    first = np.array([1, 2, 3], dtype=np.int64)
    second = np.array([1, 2, 4], dtype=np.int64)
    stranger = np.array([1, 2, 3], dtype=np.int64)
    for c in (a, b):
        c.on_tokens(first, 10.0, 0)
        c.on_tokens(second, 20.0, 0, None, BatchDelta(stranger, second, [4], [3]))  # wrong base
        c.on_tokens(first, 30.0, 0, None, BatchDelta(second, stranger, [3], [4]))  # wrong ids
        c.on_tokens(second, 40.0, 0, None, BatchDelta(first, second, [4], [3]))  # right
        c.on_tokens(second, 50.0, 0)  # unchanged
    for rid in range(10):
        assert repr(a.output_of(rid)) == repr(b.output_of(rid)), rid  # (NaN where no token)
    assert a.tokens.tolist() == b.tokens.tolist() and repr(a.last_token.tolist()) == repr(b.last_token.tolist())
    assert a.gaps.itl_stats() == b.gaps.itl_stats()


def _run_both(tmp_path: Path, values: dict[str, object]) -> tuple[tuple[str, str], tuple[str, str], int]:
    """The replay of ``values`` with the per-batch collector and with the plain one: (summary, records)
    of each, and the passes the per-batch one applied by batch."""
    import dmocker.replay.api as api

    made: list[Collector] = []

    def per_batch(n: int) -> Collector:
        made.append(Collector(n))
        return made[-1]

    out: list[tuple[str, str]] = []
    saved = api.Collector
    try:
        for name, factory in (("epochs", per_batch), ("plain", lambda n: Collector(n, batch_epochs=False))):
            api.Collector = factory  # type: ignore[assignment,misc]
            records = tmp_path / f"{name}.jsonl"
            report = api.run(ReplayConfig.from_values({"per_request": str(records), **values}))
            out.append((json.dumps(report.summary, sort_keys=True, default=str), records.read_text()))
    finally:
        api.Collector = saved  # type: ignore[misc]
    return out[0], out[1], made[0].epoch_passes


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_epochs_match_through_crashes_restarts_and_a_planner(tmp_path: Path, engine: str) -> None:
    """Workers that die mid-batch (their members re-admitted elsewhere), restart, and a planner
    that adds and removes decode workers: the per-batch counts still give the plain outputs."""
    spec = SyntheticSpec(requests=400, rate=40.0, isl_mean=800, osl_mean=120, spread=0.5, seed=11,
                         trace_block_size=64)
    crashes = FaultPlan(crashes=(WorkerCrash(Pool.DECODE, 0, 2500.0), WorkerCrash(Pool.DECODE, 1, 6000.0)),
                        restart_s=1.0, cancel_rate=0.05, fail_rate=0.02, seed=3)
    block = {"block_size": 64} if engine == "sglang" else {}
    epochs, plain, used = _run_both(tmp_path, {"workload.synthetic": spec, "engine": engine, "prefill_workers": 2,
                                               "decode_workers": 3, "faults": crashes, **block})
    assert used > 100, used
    assert epochs == plain
    # every 200 ms the pools swap between 1 and 3 workers: decode batches drained and refilled
    epochs, plain, used = _run_both(tmp_path, {"workload.synthetic": spec, "engine": engine, "prefill_workers": 1,
                                               "decode_workers": 1, "planner": Stepper(), "startup_time_s": 0.05, **block})
    assert used > 100, used
    assert epochs == plain
    summary = json.loads(epochs[0])
    assert summary["decode_worker_seconds"] != summary["duration_ms"] / 1000.0  # it did scale
