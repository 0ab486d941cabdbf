"""Mock vLLM worker: prefix reuse, chunking, rejection, preemption, holds and reservations."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings, strategies as st

from dmocker.handoff import DestinationReserved, SourceHeld
from dmocker.engines.hashing import block_hashes_from_tokens
from dmocker.engines.interface import (
    CommandResult,
    DecodeKvAccounting,
    EngineArgs,
    EngineCommandError,
    EngineRequest,
    KvStored,
    WorkerType,
)
from dmocker.engines.registry import make_worker
from dmocker.engines.vllm import VllmWorker
from tests.engines.engine_driver import run_pair, stored

FIXTURE = EngineArgs(block_size=4, num_gpu_blocks=64, max_num_batched_tokens=64, max_num_seqs=2,
                     speedup_ratio=1000.0, decode_speedup_ratio=1000.0,
                     kv_transfer_bandwidth=1.0, kv_bytes_per_token=1_000_000)


def req(rid: int, tokens: list[int], out: int = 2, bs: int = 4) -> EngineRequest:
    return EngineRequest(rid, len(tokens), out, block_hashes_from_tokens(tokens, bs))


def pair(args: EngineArgs = FIXTURE, lockstep: bool = True) -> tuple[VllmWorker, VllmWorker]:
    p = VllmWorker(dataclasses.replace(args, worker_type=WorkerType.PREFILL), 0,
                   record_kv_events=True, lockstep=lockstep)
    d = VllmWorker(dataclasses.replace(args, worker_type=WorkerType.DECODE), 0,
                   record_kv_events=True, lockstep=lockstep)
    return p, d


def drain(w: VllmWorker, now: float = 0.0) -> list[tuple[float, list[int], list[int]]]:
    """Run passes until the worker has nothing to do; (end, emitted, finished) per pass."""
    out = []
    while w.has_work():
        plan = w.start_pass(now)
        if plan is None:
            break
        c = w.finish_pass()
        now = c.end_ms
        out.append((now, c.emitted.tolist(), list(c.finished)))
    return out


def test_one_request_fixture_stores_only_on_activation() -> None:
    p, d = pair()
    tr = run_pair(p, d, [(0.0, req(0, list(range(8))))])
    assert tr.prefill_tokens == {0: 1}
    assert len(tr.tokens[0]) == 2 and tr.finished == [0]
    assert tr.reserve_stored == 0
    assert len(tr.activate_stored) == 2
    assert not set(tr.decode_stored) & set(tr.activate_stored)
    assert tr.reserved_tokens == {0: 8}
    assert p.is_drained() and d.is_drained()
    p.check_invariants()
    d.check_invariants()


def test_source_hold_keeps_kv_until_release() -> None:
    p, _ = pair()
    p.submit_handoff_prefill("h", req(0, list(range(10))))
    plan = p.start_pass(0.0)
    assert plan is not None and plan.admissions[0].reused_input_tokens == 0
    assert [e for e in plan.pass_start_kv_events if isinstance(e, KvStored)]
    c = p.finish_pass()
    assert isinstance(c.lifecycle[0], SourceHeld)
    timing = c.lifecycle[0].transfer_timing
    assert timing.full_prompt_tokens == 10 and timing.delay_ms(0) == pytest.approx(10.0)
    assert p.pool.num_active_blocks == 3  # 2 cached + 1 private tail, still referenced
    assert p.start_pass(c.end_ms) is None
    e = p.release_source("h")
    assert e.result is CommandResult.APPLIED and e.kv_events == ()  # release emits nothing
    assert p.pool.num_active_blocks == 0 and p.pool.num_inactive == 2
    assert p.release_source("h").result is CommandResult.NOOP
    assert p.is_drained()
    p.check_invariants()


@pytest.mark.parametrize(
    "cached_tokens,prompt,expected",
    [
        (None, list(range(10)), 12),  # cold 10-token prompt, page 4
        (list(range(8)), list(range(4)) + [90, 91, 92, 93, 94, 95], 8),  # 4-token cached prefix
        (list(range(8)), list(range(8)), 0),  # fully cached, aligned
    ],
)
def test_reservation_rounding(cached_tokens: list[int] | None, prompt: list[int], expected: int) -> None:
    _, d = pair()
    if cached_tokens is not None:
        e = d.reserve_destination("warm", req(1, cached_tokens))
        assert d.activate_destination("warm").result is CommandResult.APPLIED
        drain(d)
        assert d.is_drained()
    e = d.reserve_destination("h", req(2, prompt))
    assert e.result is CommandResult.ACCEPTED
    assert e.lifecycle == (DestinationReserved("h", expected),)
    assert stored(e.kv_events) == []
    d.check_invariants()


def test_prefix_reuse_and_last_block_recompute() -> None:
    w = make_worker(dataclasses.replace(FIXTURE, worker_type=WorkerType.DECODE))
    assert isinstance(w, VllmWorker)
    w.submit(req(0, list(range(12))))
    drain(w)
    w.submit(req(1, list(range(8)) + [50, 51, 52, 53]))
    plan = w.start_pass(0.0)
    assert plan is not None and plan.admissions[0].reused_input_tokens == 8
    w.finish_pass()
    drain(w)
    w.submit(req(2, list(range(12))))  # fully cached aligned: recomputes its last block
    plan = w.start_pass(0.0)
    assert plan is not None and plan.admissions[0].reused_input_tokens == 8
    w.finish_pass()
    drain(w)
    w.check_invariants()


def test_rejections() -> None:
    small = dataclasses.replace(FIXTURE, num_gpu_blocks=4, worker_type=WorkerType.PREFILL)
    w = make_worker(small)
    w.submit_handoff_prefill("big", req(0, list(range(17))))
    plan = w.start_pass(0.0)
    assert plan is not None
    c = w.finish_pass()
    assert c.rejected == (0,) and len(c.emitted) == 0 and c.lifecycle == ()
    assert w.cancel_source("big").result is CommandResult.NOOP  # registration dropped
    limited = make_worker(dataclasses.replace(small, max_model_len=16))
    limited.submit_handoff_prefill("long", req(1, list(range(16))))
    assert limited.start_pass(0.0) is not None
    assert limited.finish_pass().rejected == (1,)
    dest = make_worker(dataclasses.replace(small, worker_type=WorkerType.DECODE))
    with pytest.raises(EngineCommandError, match="exceeds the KV pool"):
        dest.reserve_destination("x", req(2, list(range(17))))
    with pytest.raises(EngineCommandError, match="block hashes"):
        dest.reserve_destination("y", EngineRequest(3, 8, 1, ()))


def test_chunked_prefill_holds_only_after_last_chunk() -> None:
    args = dataclasses.replace(FIXTURE, max_num_batched_tokens=8, worker_type=WorkerType.PREFILL)
    w = VllmWorker(args, record_kv_events=True)
    w.submit_handoff_prefill("h", req(0, list(range(20))))
    chunks = []
    now = 0.0
    while True:
        plan = w.start_pass(now)
        if plan is None:
            break
        chunks.append((plan.prefill_tokens, stored(plan.pass_start_kv_events)))
        c = w.finish_pass()
        now = c.end_ms
        if c.lifecycle:
            assert isinstance(c.lifecycle[0], SourceHeld)
            break
        assert len(c.emitted) == 0
    assert [n for n, _ in chunks] == [8, 8, 4]
    assert [len(s) for _, s in chunks] == [2, 2, 1]
    no_chunk = make_worker(dataclasses.replace(args, enable_chunked_prefill=False))
    no_chunk.submit_handoff_prefill("h", req(0, list(range(20))))
    assert no_chunk.start_pass(0.0) is None  # blocked: does not fit the batch budget


def test_lifo_preemption_requeues_the_newest() -> None:
    args = dataclasses.replace(FIXTURE, num_gpu_blocks=6, worker_type=WorkerType.DECODE)
    w = VllmWorker(args)
    w.submit(req(0, list(range(8)), out=10))
    w.submit(req(1, list(range(100, 108)), out=10))
    admits: list[int] = []
    tokens: dict[int, int] = {0: 0, 1: 0}
    now = 0.0
    while w.has_work():
        plan = w.start_pass(now)
        assert plan is not None
        admits.extend(a.request_id for a in plan.admissions)
        c = w.finish_pass()
        now = c.end_ms
        for rid in c.emitted.tolist():
            tokens[rid] += 1
        w.check_invariants()
    assert w.preemptions >= 1
    assert admits[:2] == [0, 1] and admits[2] == 1  # the newest was preempted and re-admitted
    assert tokens == {0: 10, 1: 10}
    assert w.is_drained()


def test_destination_waits_for_capacity_then_reserves() -> None:
    args = dataclasses.replace(FIXTURE, num_gpu_blocks=4, worker_type=WorkerType.DECODE)
    d = VllmWorker(args)
    e1 = d.reserve_destination("a", req(0, list(range(12))))
    assert e1.lifecycle == (DestinationReserved("a", 12),)
    e2 = d.reserve_destination("b", req(1, list(range(50, 58))))
    assert e2.lifecycle == ()  # 1 block left: waits
    e3 = d.cancel_destination("a")
    assert e3.result is CommandResult.APPLIED
    assert e3.lifecycle == (DestinationReserved("b", 8),)
    assert d.cancel_destination("a").result is CommandResult.NOOP
    assert d.cancel_destination("b").result is CommandResult.APPLIED
    assert d.is_drained()
    d.check_invariants()


def test_cancel_pending_source_frees_running_prefill() -> None:
    args = dataclasses.replace(FIXTURE, max_num_batched_tokens=4, worker_type=WorkerType.PREFILL)
    p = VllmWorker(args)
    p.submit_handoff_prefill("h", req(0, list(range(12))))
    assert p.start_pass(0.0) is not None
    p.finish_pass()
    assert p.pool.num_active_blocks == 1
    assert p.cancel_source("h").result is CommandResult.APPLIED
    assert p.is_drained() and p.pool.num_active_blocks == 0
    p.check_invariants()


workload = st.lists(
    st.tuples(
        st.floats(0, 50),  # arrival gap
        st.integers(0, 3),  # prefix group
        st.integers(1, 30),  # prompt length
        st.integers(0, 12),  # output length
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(workload, st.integers(6, 40), st.integers(1, 4), st.integers(4, 32),
       st.sampled_from(list(DecodeKvAccounting)))
def test_lockstep_matches_exact(rows: list[tuple[float, int, int, int]], blocks: int, seqs: int,
                                budget: int, accounting: DecodeKvAccounting) -> None:
    args = dataclasses.replace(FIXTURE, num_gpu_blocks=blocks, max_num_seqs=seqs,
                               max_num_batched_tokens=budget, speedup_ratio=1.0,
                               decode_kv_accounting=accounting)
    arrivals = []
    t = 0.0
    for i, (gap, group, n, out) in enumerate(rows):
        t += gap
        tokens = [group * 1000 + j for j in range(n)]
        arrivals.append((t, req(i, tokens, out)))
    results = []
    for lockstep in (True, False):
        p, d = pair(args, lockstep)
        tr = run_pair(p, d, arrivals)
        p.check_invariants()
        d.check_invariants()
        results.append(tr)
        for rid, r in ((a.request_id, a) for _, a in arrivals):
            if rid in tr.rejected:
                continue
            if 4 * blocks >= r.input_length and rid in tr.finished:
                assert len(tr.tokens.get(rid, [])) == r.max_output_tokens
    a, b = results
    assert a.tokens == b.tokens
    assert a.finished == b.finished and a.rejected == b.rejected
    assert a.admissions == b.admissions and a.reserved_tokens == b.reserved_tokens
    assert a.activate_stored == b.activate_stored


def test_decode_kv_accounting_logical_vs_resident() -> None:
    """Two requests sharing an 8-token prefix: logical counts it twice, resident once."""
    times = {}
    for acc in DecodeKvAccounting:
        args = dataclasses.replace(FIXTURE, num_gpu_blocks=8, speedup_ratio=1.0,
                                   decode_speedup_ratio=1.0, decode_kv_accounting=acc,
                                   worker_type=WorkerType.DECODE)
        d = VllmWorker(args)
        for i in range(2):
            d.reserve_destination(i, req(i, list(range(8)), out=3))
            d.activate_destination(i)
        plan = d.start_pass(0.0)
        assert plan is not None
        times[acc] = plan.end_ms
        d.finish_pass()
    from dmocker.engines.timing import polynomial_decode_ms
    assert times[DecodeKvAccounting.LOGICAL] == pytest.approx(polynomial_decode_ms(16, 32))
    assert times[DecodeKvAccounting.RESIDENT] == pytest.approx(polynomial_decode_ms(8, 32))


@given(st.lists(st.integers(0, 5), min_size=1, max_size=70), st.integers(0, 500),
       st.lists(st.integers(1, 5000), max_size=4), st.integers(1, 400))
def test_bulk_run_block_demand_closed_form(bcount: list[int], k: int, joiner_prompts: list[int], n_pass: int) -> None:
    """A bulk run's blocks through each pass (bucket cycle prefix sums) equal the pass-by-pass
    sums: pass k + i takes bcount[(k + i) % bs] blocks, joiners included from the second pass."""
    from itertools import accumulate

    from dmocker.engines.vllm_request import blocks_through as _blocks_through

    bs = len(bcount)
    after = list(bcount)
    for prompt in joiner_prompts:
        after[(1 + k - prompt) % bs] += 1
    per_pass = [bcount[k % bs] if i == 0 else after[(k + i) % bs] for i in range(n_pass)]
    rot = after[k % bs:] + after[: k % bs]
    demand = (list(accumulate(rot, initial=0)), rot[0] - bcount[k % bs])
    assert [_blocks_through(demand, j) for j in range(n_pass + 1)] == list(accumulate(per_pass, initial=0))


def test_destinations_queue_in_reservation_order() -> None:
    """Activated destinations wait for a decode slot in the order they were reserved (Dynamo
    1.6.1), not the order their transfers finished: B activated before A still runs after A."""
    _, d = pair()
    d.reserve_destination("a", req(0, list(range(8))))
    d.reserve_destination("b", req(1, list(range(100, 108))))
    d.activate_destination("b")
    d.activate_destination("a")
    plan = d.start_pass(0.0)
    assert plan is not None
    assert [a.request_id for a in plan.admissions] == [0, 1]
    d.finish_pass()
    d.check_invariants()
