"""Mock SGLang worker: radix reuse, reservation rounding, chunking, ratio budget, retraction."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings, strategies as st

from dmocker.handoff import DestinationReserved, SourceHeld
from dmocker.engines.hashing import block_hashes_from_tokens
from dmocker.engines.interface import (
    CommandResult,
    EngineArgs,
    EngineCommandError,
    EngineRequest,
    WorkerType,
)
from dmocker.engines.sglang import SglangWorker
from tests.engines.engine_driver import run_pair, stored

FIXTURE = EngineArgs(engine="sglang", block_size=4, num_gpu_blocks=64,
                     max_num_batched_tokens=64, max_num_seqs=2, speedup_ratio=1000.0,
                     decode_speedup_ratio=1000.0, kv_transfer_bandwidth=1.0,
                     kv_bytes_per_token=1_000_000)


def req(rid: int, tokens: list[int], out: int = 2) -> EngineRequest:
    return EngineRequest(rid, len(tokens), out, block_hashes_from_tokens(tokens, 4))


def worker(role: WorkerType, **kw: object) -> SglangWorker:
    return SglangWorker(dataclasses.replace(FIXTURE, worker_type=role, **kw), record_kv_events=True)  # type: ignore[arg-type]


def drain(w: SglangWorker, now: float = 0.0) -> list[tuple[list[int], list[int]]]:
    out = []
    while w.has_work():
        plan = w.start_pass(now)
        if plan is None:
            break
        c = w.finish_pass()
        now = c.end_ms
        out.append((c.emitted.tolist(), list(c.finished)))
    return out


def test_destination_first_fixture() -> None:
    p, d = worker(WorkerType.PREFILL), worker(WorkerType.DECODE)
    r = req(0, list(range(8)))
    e = d.reserve_destination("h", r)
    assert e.lifecycle == (DestinationReserved("h", 8),) and stored(e.kv_events) == []
    assert p.submit_handoff_prefill("h", r).result is CommandResult.SUBMITTED
    plan = p.start_pass(0.0)
    assert plan is not None and plan.admissions[0].reused_input_tokens == 0
    c = p.finish_pass()
    # SGLang (1.6.1) inserts a request's pages into the radix tree when it is released
    assert c.emitted.tolist() == [0] and stored(c.kv_events) == []
    assert isinstance(c.lifecycle[0], SourceHeld)
    a = d.activate_destination("h")
    assert a.result is CommandResult.APPLIED and len(stored(a.kv_events)) == 2
    rel = p.release_source("h")
    assert rel.result is CommandResult.APPLIED and len(stored(rel.kv_events)) == 2
    passes = drain(d)
    assert sum(len(e) for e, _ in passes) == 2 and passes[-1][1] == [0]
    assert p.is_drained() and d.is_drained()
    p.check_invariants()
    d.check_invariants()


def test_source_first_driver_also_works() -> None:
    p, d = worker(WorkerType.PREFILL), worker(WorkerType.DECODE)
    tr = run_pair(p, d, [(0.0, req(0, list(range(8)))), (0.5, req(1, list(range(8))))])
    assert tr.finished == [0, 1] and all(len(v) == 2 for v in tr.tokens.values())
    assert tr.reserve_stored == 0
    assert p.is_drained() and d.is_drained()


@pytest.mark.parametrize(
    "warm,prompt,expected",
    [
        (None, list(range(10)), 12),
        (list(range(8)), list(range(4)) + [90, 91, 92, 93, 94, 95], 8),
        (list(range(8)), list(range(8)), 0),
    ],
)
def test_reservation_rounding(warm: list[int] | None, prompt: list[int], expected: int) -> None:
    d = worker(WorkerType.DECODE)
    if warm is not None:
        d.reserve_destination("w", req(1, warm))
        d.activate_destination("w")
        drain(d)
        assert d.is_drained()
    e = d.reserve_destination("h", req(2, prompt))
    assert e.lifecycle == (DestinationReserved("h", expected),)
    assert stored(e.kv_events) == []
    d.check_invariants()


def test_prompt_too_large_for_destination() -> None:
    d = worker(WorkerType.DECODE, num_gpu_blocks=2)
    with pytest.raises(EngineCommandError, match="exceeds the KV pool"):
        d.reserve_destination("h", req(0, list(range(9))))


def test_radix_prefix_reuse_on_prefill() -> None:
    p = worker(WorkerType.PREFILL)
    p.submit_handoff_prefill("a", req(0, list(range(12))))
    drain(p)
    p.release_source("a")
    p.submit_handoff_prefill("b", req(1, list(range(8)) + [70, 71, 72, 73, 74]))
    plan = p.start_pass(0.0)
    assert plan is not None and plan.admissions[0].reused_input_tokens == 8
    p.finish_pass()
    p.check_invariants()


def test_chunked_prefill() -> None:
    p = worker(WorkerType.PREFILL, chunked_prefill_size=8)
    p.submit_handoff_prefill("h", req(0, list(range(20))))
    chunks = []
    now = 0.0
    while True:
        plan = p.start_pass(now)
        assert plan is not None
        c = p.finish_pass()
        now = c.end_ms
        chunks.append((plan.prefill_tokens, len(stored(c.kv_events)), len(c.emitted)))
        if c.lifecycle:
            break
    # partial chunks publish their aligned prefix; the finished prompt waits for its release
    assert chunks == [(8, 2, 0), (8, 2, 0), (4, 0, 1)]


def test_new_token_ratio_decays_and_resets() -> None:
    d = worker(WorkerType.DECODE)
    init = 0.7
    step = (init - 0.14 * init) / 600
    d.reserve_destination("h", req(0, list(range(8)), out=5))
    d.activate_destination("h")
    for k in range(1, 4):
        assert d.start_pass(0.0) is not None
        d.finish_pass()
        assert d.new_token_ratio == pytest.approx(init - k * step)
    for _ in range(1000):
        if d.start_pass(0.0) is None:
            break
        d.finish_pass()
    assert d.new_token_ratio >= 0.14 * init - 1e-12


def test_retraction_takes_fewest_outputs() -> None:
    # a tiny ratio reserve lets both in; their growth then overflows the 10 pages
    d = worker(WorkerType.DECODE, num_gpu_blocks=10, schedule_conservativeness=0.01)
    d.submit(req(0, list(range(8)), out=24))
    now = 0.0
    # let request 0 produce a few tokens before request 1 arrives
    for _ in range(3):
        assert d.start_pass(now) is not None
        now = d.finish_pass().end_ms
    d.submit(req(1, list(range(100, 108)), out=16))
    tokens = {0: 3, 1: 0}
    retracted_first: int | None = None
    while d.has_work():
        plan = d.start_pass(now)
        assert plan is not None
        c = d.finish_pass()
        now = c.end_ms
        for rid in c.emitted.tolist():
            tokens[rid] += 1
        if d.retractions and retracted_first is None:
            retracted_first = next(r.rid for r in d._queues.waiting)
        d.check_invariants()
    assert d.retractions >= 1
    assert retracted_first == 1  # fewest outputs
    assert tokens == {0: 24, 1: 16}
    assert d.is_drained()


def test_requests_retracted_in_one_step_requeue_in_retraction_order() -> None:
    """Three one-page requests fill a three-page pool; the next step needs a page each, so two
    are retracted (fewest outputs, then batch order: 0, then 1).  They go back to the front of
    the queue in that order, as SGLang re-queues a step's retracted list."""
    d = worker(WorkerType.DECODE, num_gpu_blocks=3, max_num_seqs=4)
    for rid in range(3):
        d.reserve_destination(f"h{rid}", req(rid, [rid * 100 + j for j in range(4)], out=5))
        d.activate_destination(f"h{rid}")
    plan = d.start_pass(0.0)
    assert plan is not None
    c = d.finish_pass()
    assert c.emitted.tolist() == [2] and d.retractions == 2
    assert [r.rid for r in d._queues.waiting] == [0, 1]
    d.check_invariants()


def test_extend_pass_on_a_decode_worker_takes_no_time() -> None:
    """An extend pass is charged its prefill time only (Dynamo 1.6.1), and a decode worker's
    prefill time is 0: re-extending a retracted request on a decode worker emits its token at
    the pass start; the following decode pass takes time."""
    d = worker(WorkerType.DECODE, speedup_ratio=1.0, decode_speedup_ratio=1.0)
    d.submit(req(0, list(range(8)), out=3))
    plan = d.start_pass(5.0)
    assert plan is not None
    c = d.finish_pass()
    assert c.emitted.tolist() == [0] and plan.end_ms == c.end_ms == 5.0
    plan = d.start_pass(5.0)
    assert plan is not None and plan.end_ms > 5.0
    d.finish_pass()


workload = st.lists(
    st.tuples(st.floats(0, 50), st.integers(0, 3), st.integers(1, 30), st.integers(0, 12)),
    min_size=1, max_size=12,
)


@settings(max_examples=30, deadline=None)
@given(workload, st.integers(8, 40), st.integers(1, 4), st.sampled_from([8, 16, 8192]))
def test_random_workloads_conserve_and_finish(rows: list[tuple[float, int, int, int]], blocks: int,
                                              seqs: int, chunk: int) -> None:
    args = dataclasses.replace(FIXTURE, num_gpu_blocks=blocks, max_num_seqs=seqs,
                               chunked_prefill_size=chunk, speedup_ratio=1.0)
    arrivals = []
    t = 0.0
    for i, (gap, group, n, out) in enumerate(rows):
        t += gap
        arrivals.append((t, req(i, [group * 1000 + j for j in range(n)], out)))
    p = SglangWorker(dataclasses.replace(args, worker_type=WorkerType.PREFILL))
    d = SglangWorker(dataclasses.replace(args, worker_type=WorkerType.DECODE))
    tr = run_pair(p, d, arrivals)
    p.check_invariants()
    d.check_invariants()
    for _, r in arrivals:
        if r.request_id in tr.finished:
            assert len(tr.tokens.get(r.request_id, [])) == r.max_output_tokens


def test_pages_of_a_held_source_are_not_hit_until_release() -> None:
    p = worker(WorkerType.PREFILL)
    p.submit_handoff_prefill("a", req(0, list(range(12))))
    drain(p)  # held
    p.submit_handoff_prefill("b", req(1, list(range(12))))
    plan = p.start_pass(0.0)
    assert plan is not None and plan.admissions[0].reused_input_tokens == 0
    p.finish_pass()
    p.release_source("a")
    p.release_source("b")
    p.submit_handoff_prefill("c", req(2, list(range(12))))
    plan = p.start_pass(0.0)
    assert plan is not None and plan.admissions[0].reused_input_tokens == 8  # capped: last page
    p.finish_pass()
    p.check_invariants()


def test_last_request_is_chunked_to_fill_the_budget() -> None:
    p = worker(WorkerType.PREFILL, chunked_prefill_size=16)
    p.submit_handoff_prefill("a", req(0, list(range(12))))
    p.submit_handoff_prefill("b", req(1, list(range(100, 112))))
    plan = p.start_pass(0.0)
    assert plan is not None and plan.prefill_tokens == 16  # 12 + a 4-token chunk of b
    assert [a.request_id for a in plan.admissions] == [0, 1]
    c = p.finish_pass()
    assert c.emitted.tolist() == [0]


@settings(max_examples=40, deadline=None)
@given(workload, st.integers(8, 40), st.integers(1, 6), st.sampled_from([8, 16, 8192]))
def test_vectorized_decode_matches_per_request(rows: list[tuple[float, int, int, int]], blocks: int,
                                               seqs: int, chunk: int) -> None:
    """The numpy decode fast path and the per-request step give identical runs."""
    args = dataclasses.replace(FIXTURE, num_gpu_blocks=blocks, max_num_seqs=seqs,
                               chunked_prefill_size=chunk, speedup_ratio=1.0)
    arrivals = []
    t = 0.0
    for i, (gap, group, n, out) in enumerate(rows):
        t += gap
        arrivals.append((t, req(i, [group * 1000 + j for j in range(n)], out)))
    results = []
    for vec in (True, False):
        p = SglangWorker(dataclasses.replace(args, worker_type=WorkerType.PREFILL),
                         record_kv_events=True, vectorized=vec)
        d = SglangWorker(dataclasses.replace(args, worker_type=WorkerType.DECODE),
                         record_kv_events=True, vectorized=vec)
        tr = run_pair(p, d, arrivals)
        p.check_invariants()
        d.check_invariants()
        results.append((tr, d.vectorized_passes, d.retractions))
    (a, vec_passes, ra), (b, none, rb) = results
    assert none == 0
    assert a.tokens == b.tokens
    assert a.finished == b.finished and a.rejected == b.rejected
    assert a.admissions == b.admissions and a.reserved_tokens == b.reserved_tokens
    assert a.activate_stored == b.activate_stored and a.decode_stored == b.decode_stored
    assert ra == rb


def test_vectorized_decode_is_used_and_exact() -> None:
    """Three destinations decoding together take the fast path, with per-token times equal to
    the per-request step's."""
    out = []
    for vec in (True, False):
        d = SglangWorker(dataclasses.replace(FIXTURE, worker_type=WorkerType.DECODE, speedup_ratio=1.0),
                         record_kv_events=True, vectorized=vec)
        for i in range(3):
            d.reserve_destination(i, req(i, list(range(10 * i, 10 * i + 6 + i)), out=5 + i))
            d.activate_destination(i)
        out.append(drain(d))
        d.check_invariants()
        assert d.is_drained()
        assert (d.vectorized_passes > 0) == vec
    assert out[0] == out[1]


def _decode_tokens(d: SglangWorker, joins: list[tuple[float, EngineRequest]], bulk: bool
                   ) -> tuple[list[tuple[float, int]], list[tuple[float, int]]]:
    """Drive decode worker ``d`` with destinations that arrive at the given times (each reserved
    on arrival, activated once reserved), as the replay does: a bulk run is cut at the next
    arrival inside it.  Returns every (time, id) of an emitted token and of a finish."""
    tokens: list[tuple[float, int]] = []
    finished: list[tuple[float, int]] = []
    now = 0.0
    i = 0

    def activate(lifecycle: tuple[object, ...]) -> None:
        for ev in lifecycle:
            if isinstance(ev, DestinationReserved):
                d.activate_destination(ev.handoff_id)

    while True:
        while i < len(joins) and joins[i][0] <= now:
            r = joins[i][1]
            activate(d.reserve_destination(r.request_id, r).lifecycle)
            i += 1
        plan = d.start_pass(now, bulk)
        if plan is None:
            if i == len(joins):
                return tokens, finished
            now = joins[i][0]
            continue
        end = plan.end_ms
        if i < len(joins) and joins[i][0] < end:
            cut = d.split_run(joins[i][0], False)
            if cut is not None:
                end = cut[0]
        c = d.finish_pass()
        assert c.end_ms == end
        times = c.run_times.tolist() if c.run_times is not None else [end]
        for t in times:
            tokens.extend((t, rid) for rid in c.emitted.tolist())
        finished.extend((end, rid) for rid in c.finished)
        now = end
        activate(c.lifecycle)
        d.check_lazy_batch()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 400), st.integers(1, 40), st.integers(0, 30)), min_size=1, max_size=10),
       st.integers(18, 60), st.integers(1, 5))
def test_event_driven_decode_and_runs_match_per_request(rows: list[tuple[float, int, int]], blocks: int,
                                                       seqs: int) -> None:
    """Destinations join a decode worker at random times.  The event-driven batch (per pass,
    and in bulk runs cut at each arrival) keeps every request filed where it belongs and yields
    the same tokens at the same times as the per-request step, retractions included."""
    args = dataclasses.replace(FIXTURE, worker_type=WorkerType.DECODE, num_gpu_blocks=blocks,
                               max_num_seqs=seqs, speedup_ratio=1.0, decode_speedup_ratio=1.0)
    joins = []
    t = 0.0
    for i, (gap, n, out) in enumerate(rows):
        t += gap
        joins.append((t, req(i, [(7 * i + j) % 23 for j in range(n)], out)))
    results = []
    for vec, bulk in ((False, False), (True, False), (True, True)):
        d = SglangWorker(args, vectorized=vec)
        # (a lone request that outgrows the pool stalls, on every path alike)
        results.append((_decode_tokens(d, joins, bulk), d.retractions, d.is_drained()))
        d.check_invariants()
        assert (d.vectorized_passes > 0) <= vec and (d.bulk_runs > 0) <= bulk
    assert results[1] == results[0]
    assert results[2] == results[0]


def test_bulk_runs_are_cut_at_arrivals() -> None:
    """The driver above really runs and cuts bulk runs (so the comparison covers them)."""
    args = dataclasses.replace(FIXTURE, worker_type=WorkerType.DECODE, num_gpu_blocks=200,
                               max_num_seqs=8, speedup_ratio=1.0, decode_speedup_ratio=1.0)
    joins = [(40.0 * i, req(i, list(range(i, i + 9)), 30)) for i in range(5)]
    out = []
    for vec, bulk in ((False, False), (True, True)):
        d = SglangWorker(args, vectorized=vec)
        out.append(_decode_tokens(d, joins, bulk))
        assert (d.bulk_runs >= 3) == bulk and (d.bulk_joins >= 2) == bulk and (d.bulk_tails >= 1) == bulk
    assert out[0] == out[1]
