"""Random scaling scripts: routing, admission and accounting invariants; end-of-run state.

Properties (the reference planner's): no request is routed to or admitted on a worker before
it is ready, nothing is routed to a draining worker, every request ends with one terminal
status, every worker ends drained, and provisioned worker-seconds equal each worker's
lifetime (start to removal or end of run).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dmocker.handoff import HandoffOrder
from dmocker.replay import PlannerMetrics

from ..fake_engine import FakeWorker
from .helpers import Scripted, planner_run, workload

_target = st.one_of(st.none(), st.integers(0, 3))


@st.composite
def _scripts(draw: st.DrawFn) -> list[tuple[float, int | None, int | None]]:
    times = sorted(draw(st.sets(st.integers(1, 300), min_size=1, max_size=6)))
    steps: list[tuple[float, int | None, int | None]] = [(float(t), draw(_target), draw(_target)) for t in times]
    steps.append((400.0, 1, 1))  # both pools serve again, so all work can finish
    return steps


@settings(max_examples=60, deadline=None)
@given(
    script=_scripts(),
    order=st.sampled_from([HandoffOrder.SOURCE_FIRST, HandoffOrder.DESTINATION_FIRST]),
    startup=st.sampled_from([0.0, 0.03]),
    n_p=st.integers(0, 2),
    n_d=st.integers(0, 2),
)
def test_scaling_invariants(
    script: list[tuple[float, int | None, int | None]], order: HandoffOrder, startup: float, n_p: int, n_d: int
) -> None:
    marks: list[tuple[float, dict[tuple[int, int], int]]] = []
    live: list[list[FakeWorker]] = []

    def mark(m: PlannerMetrics) -> None:  # log length of every worker when the tick fired
        marks.append((m.now_ms, {(s, w.worker_idx): len(w.log) for s, ws in enumerate(live) for w in ws}))

    planner = Scripted(script, on_tick_hook=mark)
    run = planner_run(planner, workload(8, rate=50.0, osl=4), order=order, n_prefill=n_p, n_decode=n_d,
                      startup_s=startup, expose=lambda p, d: live.extend([p, d]))

    n = 8
    assert run.summary["completed_requests"] == n
    assert run.summary["incomplete_requests"] == 0
    assert sorted(r["request_id"] for r in run.records) == list(range(n))
    assert not run.runtime.table.live

    for stage, (name, fakes) in enumerate((("prefill", run.prefill), ("decode", run.decode))):
        timeline = {w["worker"]: w for w in run.report[f"{name}_workers"]}
        assert sorted(timeline) == [w.worker_idx for w in fakes]
        for w in fakes:
            rec = timeline[w.worker_idx]
            assert w.is_drained(), (name, w.worker_idx)
            routed = [(i, t) for i, (k, _, t) in enumerate(w.log) if k in ("submit", "reserve")]
            for i, t in routed:
                assert rec["ready_ms"] is not None and t >= rec["ready_ms"]
                if rec["drain_ms"] is not None:
                    assert t <= rec["drain_ms"]
                    # routed before the draining tick fired, never after it
                    at = next(lens for tm, lens in marks if tm == rec["drain_ms"])
                    assert i < at[(stage, w.worker_idx)]
            if rec["state"] == "canceled":
                assert not w.log
        end = run.runtime.now_ms
        lifetime = sum(
            (min(r["removed_ms"], end) if r["removed_ms"] is not None else end) - r["start_ms"]
            for r in timeline.values()
        )
        assert abs(run.summary[f"{name}_worker_seconds"] - lifetime / 1000.0) < 1e-9

    for r in run.records:
        p = next(w for w in run.report["prefill_workers"] if w["worker"] == r["prefill_worker_idx"])
        d = next(w for w in run.report["decode_workers"] if w["worker"] == r["decode_worker_idx"])
        assert r["prefill_admit_ms"] >= p["ready_ms"]
        assert r["decode_admit_ms"] >= d["ready_ms"]
