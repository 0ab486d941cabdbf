"""Bulk decode runs against the per-pass simulation when workers crash mid-run.

A crash loses the pass in flight, but the passes of a bulk run that ended before it did happen:
their tokens count (``ClusterControl._deliver_ended_passes``).  Whole replays with crashes of
decode and prefill workers, with and without restarts, must give identical records, event logs
and summaries both ways.
"""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import example, given, settings
from hypothesis import strategies as st

from dmocker.replay import ReplayConfig, run, run_pass_by_pass
from dmocker.replay.faults import FaultPlan, Pool, WorkerCrash


def _replay(tmp: Path, kw: dict[str, object], bulk: bool) -> tuple[str, str, str]:
    rec, ev = tmp / f"r{int(bulk)}.jsonl", tmp / f"e{int(bulk)}.jsonl"
    replay = run if bulk else run_pass_by_pass
    report = replay(ReplayConfig.from_values({"per_request": rec, "events": ev, **kw}))
    return rec.read_text(), ev.read_text(), json.dumps(report.summary, sort_keys=True)


_CASE = dict(engine="vllm", seed=3, rate=40.0, isl_mean=600, osl_mean=60, requests=300, crash_ms=8000.0,
             pool="decode", restart=2.0)


@settings(max_examples=12, deadline=None)
@given(st.fixed_dictionaries({
    "engine": st.sampled_from(["vllm", "sglang"]),
    "seed": st.integers(0, 50),
    "rate": st.sampled_from([20.0, 40.0, 120.0]),
    "isl_mean": st.sampled_from([200, 600]),
    "osl_mean": st.sampled_from([20, 60, 150]),
    "requests": st.integers(20, 120),
    "crash_ms": st.floats(100.0, 3000.0),
    "pool": st.sampled_from(["decode", "prefill"]),
    "restart": st.sampled_from([None, 0.5]),
}))
@example(_CASE)
def test_crashes_mid_run_match_the_per_pass_simulation(tmp_path_factory: object, case: dict[str, object]) -> None:
    tmp = tmp_path_factory.mktemp("crash")  # type: ignore[attr-defined]
    pool = Pool.DECODE if case["pool"] == "decode" else Pool.PREFILL
    kw: dict[str, object] = dict(
        synthetic=case["requests"], rate=case["rate"], isl_mean=case["isl_mean"], osl_mean=case["osl_mean"],
        seed=case["seed"], engine=case["engine"],
        faults=FaultPlan(crashes=(WorkerCrash(pool, 0, float(case["crash_ms"])),),  # type: ignore[arg-type]
                         restart_s=case["restart"]),  # type: ignore[arg-type]
    )
    assert _replay(tmp, kw, True) == _replay(tmp, kw, False)
