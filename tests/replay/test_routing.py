"""Routing package units: prefix index (against a plain twin), queue policies, KV router rules."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmocker.engines.interface import EngineRequest, KvRemoved, KvStored
from dmocker.replay.routing import (
    KvIndex,
    KvRouter,
    Pool,
    QueuePolicy,
    RoundRobin,
    RouterConfig,
    RouterContext,
    RouterQueue,
    parse_router,
)

BS = 64


def ctx(pool: Pool = Pool.PREFILL, seed: int = 0, mbt: int = 8192) -> RouterContext:
    return RouterContext(pool, seed, BS, mbt)


def router(n: int, pool: Pool = Pool.PREFILL, **cfg: object) -> KvRouter:
    r = KvRouter(ctx(pool), RouterConfig(**cfg))  # type: ignore[arg-type]
    for w in range(n):
        r.add_worker(w, 0.0)
    return r


def req(rid: int, blocks: tuple[int, ...], isl: int | None = None) -> EngineRequest:
    return EngineRequest(rid, isl if isl is not None else len(blocks) * BS, 4, blocks)


# ------------------------------------------------------------------ prefix index


def _naive_overlaps(held: dict[int, set[int]], hashes: list[int]) -> dict[int, int]:
    out = {}
    for w, s in held.items():
        n = 0
        for h in hashes:
            if h not in s:
                break
            n += 1
        if n:
            out[w] = n
    return out


events_st = st.lists(
    st.tuples(st.integers(0, 3), st.booleans(), st.lists(st.integers(0, 7), min_size=1, max_size=4)),
    max_size=30,
)


@settings(max_examples=150)
@given(events_st, st.lists(st.integers(0, 7), max_size=8))
def test_index_overlaps_match_a_per_worker_set_twin(events: list[tuple[int, bool, list[int]]], query: list[int]) -> None:
    index = KvIndex()
    held: dict[int, set[int]] = {}
    for w, stored, hashes in events:
        index.apply(w, [KvStored(tuple(hashes)) if stored else KvRemoved(tuple(hashes))])
        s = held.setdefault(w, set())
        (s.update if stored else s.difference_update)(hashes)
    assert index.overlaps(query) == _naive_overlaps(held, query)


def test_index_counts_leading_blocks_only_and_forgets_a_worker() -> None:
    index = KvIndex()
    index.apply(0, [KvStored((1, 2, 3))])
    index.apply(1, [KvStored((1, 3))])
    assert index.overlaps([1, 2, 3, 4]) == {0: 3, 1: 1}
    index.apply(0, [KvRemoved((2,))])
    assert index.overlaps([1, 2, 3]) == {0: 1, 1: 1}
    index.forget_worker(0)
    assert index.overlaps([1, 2, 3]) == {1: 1}
    assert index.overlaps([]) == {}


# ------------------------------------------------------------------ queue


@pytest.mark.parametrize(
    ("policy", "expected"),
    [(QueuePolicy.FCFS, [1, 2, 3, 4]), (QueuePolicy.LCFS, [4, 3, 2, 1]), (QueuePolicy.WSPT, [2, 4, 1, 3])],
)
def test_queue_policies(policy: QueuePolicy, expected: list[int]) -> None:
    q: RouterQueue[str] = RouterQueue(policy)
    for rid, uncached in ((1, 300), (2, 100), (3, 500), (4, 100)):
        q.push(rid, f"r{rid}", uncached)
    assert [q.pop()[0] for _ in range(4)] == expected
    assert q.peek() is None


def test_queue_remove_skips_the_entry() -> None:
    q: RouterQueue[int] = RouterQueue(QueuePolicy.FCFS)
    for rid in (1, 2, 3):
        q.push(rid, rid, 0)
    assert q.remove(2) and not q.remove(2)
    assert [q.pop()[0] for _ in range(len(q))] == [1, 3]


# ------------------------------------------------------------------ KV router rules


def test_prefill_prefers_the_worker_holding_the_prefix() -> None:
    r = router(3)
    r.on_kv_events(2, [KvStored((10, 11, 12))], 0.0)
    assert r.route(req(1, (10, 11, 12, 13)), 0.0) == 2
    assert r.overlap_tokens(1) == 3 * BS
    assert r.prefill_tokens_in_flight(2) == BS  # only the uncached block is in flight


def test_prefill_cost_formula_trades_overlap_against_load() -> None:
    # worker 0 holds 4 of 8 blocks but has 8 blocks of prefill in flight; worker 1 is idle.
    r = router(2)
    r.on_kv_events(0, [KvStored((1, 2, 3, 4))], 0.0)
    r.route(req(99, tuple(range(100, 108))), 0.0)  # cold, both idle: tie -> seeded choice
    busy = 0 if r.prefill_tokens_in_flight(0) else 1
    assert r.prefill_tokens_in_flight(busy) == 8 * BS
    chosen = r.route(req(1, (1, 2, 3, 4, 5, 6, 7, 8)), 0.0)
    # costs: w0 = (busy0*8 + 8) - 4, w1 = (busy1*8 + 8) - 0
    cost = {0: (8 if busy == 0 else 0) + 8 - 4, 1: (8 if busy == 1 else 0) + 8}
    assert chosen == min(cost, key=lambda w: cost[w])


def test_prefill_complete_and_free_release_the_load() -> None:
    r = router(1)
    r.route(req(1, (1, 2)), 0.0)
    assert r.prefill_tokens_in_flight(0) == 2 * BS
    r.on_prefill_complete(1, 1.0)
    assert r.prefill_tokens_in_flight(0) == 0
    r.on_free(1, 2.0)
    r.on_free(1, 2.0)  # idempotent
    assert r.prefill_tokens_in_flight(0) == 0


def test_decode_router_forces_its_overrides() -> None:
    """Decode pool: no overlap credit, no prefill tracking: the cost is decode load only."""
    r = router(2, Pool.DECODE, overlap_score_credit=1.0)
    assert not r.wants_kv_events
    r.on_kv_events(0, [KvStored((1, 2, 3, 4))], 0.0)  # even if told, it ignores the cache
    first = r.route(req(1, (7, 8, 9, 10)), 0.0)
    assert r.overlap_tokens(1) == 0 and r.prefill_tokens_in_flight(first) == 0
    assert r.active_blocks(first) == 4
    second = r.route(req(2, (1, 2, 3, 4)), 0.0)
    assert second != first  # the least-loaded worker, although worker 0 "holds" the prefix
    r.on_free(1, 1.0)
    assert r.active_blocks(first) == 0


def test_ties_and_softmax_are_reproducible_from_the_seed() -> None:
    def choices(seed: int, temperature: float) -> list[int]:
        r = KvRouter(ctx(seed=seed), RouterConfig(router_temperature=temperature))
        for w in range(4):
            r.add_worker(w, 0.0)
        out = []
        for i in range(40):
            out.append(r.route(req(i, (1000 + i,)), 0.0))
            r.on_free(i, 0.0)  # keep every worker idle: all ties
        return [c for c in out if c is not None]

    for t in (0.0, 0.7):
        assert choices(3, t) == choices(3, t)
        assert len(set(choices(3, t))) > 1  # ties really are broken at random
    assert choices(3, 0.0) != choices(4, 0.0)


def test_queue_holds_when_every_worker_is_busy_and_drains_on_prefill_complete() -> None:
    r = router(2, router_queue_threshold=0.01)  # busy above ~82 tokens in flight
    assert r.route(req(1, (1, 2)), 0.0) is not None
    assert r.route(req(2, (3, 4)), 0.0) is not None
    assert r.route(req(3, (5, 6)), 0.0) is None  # both busy: held
    assert r.route(req(4, (7, 8)), 0.0) is None  # backlog: held
    assert r.pending_count == 2
    assert r.on_free(4, 0.0) == ()  # a held request is just dropped
    released = r.on_prefill_complete(1, 1.0)
    assert [rid for rid, _ in released] == [3]
    assert r.pending_count == 0


def test_kv_event_lag_delays_what_the_index_sees() -> None:
    r = router(2, kv_event_lag_ms=5.0)
    r.on_kv_events(1, [KvStored((1, 2, 3))], 10.0)
    r.route(req(1, (1, 2, 3)), 12.0)
    assert r.overlap_tokens(1) == 0  # not visible yet
    r.on_free(1, 12.0)
    assert r.route(req(2, (1, 2, 3)), 15.0) == 1
    assert r.overlap_tokens(2) == 3 * BS


def test_topology_change_adds_and_removes_workers() -> None:
    r = router(1)
    r.add_worker(1, 0.0)
    r.on_kv_events(1, [KvStored((5,))], 0.0)
    assert r.route(req(1, (5,)), 0.0) == 1
    r.remove_worker(1, 0.0)
    assert r.route(req(2, (5,)), 0.0) == 0  # no longer eligible, though it holds the prefix
    r.on_free(1, 0.0)


@pytest.mark.parametrize(
    ("field", "value"),
    [("overlap_score_credit", -1.0), ("router_temperature", float("nan")), ("router_queue_threshold", -2.0),
     ("kv_event_lag_ms", "5"), ("router_queue_policy", "random")],
)
def test_config_rejects_bad_values_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=field):
        RouterConfig(**{field: value}).validate()  # type: ignore[arg-type]


def test_config_defaults_are_the_references() -> None:
    c = RouterConfig()
    assert (c.overlap_score_credit, c.prefill_load_scale, c.router_temperature) == (1.0, 1.0, 0.0)
    assert c.router_queue_threshold is None and c.router_queue_policy is QueuePolicy.FCFS
    assert (c.overlap_score_credit_decay, c.decode_active_request_weight, c.kv_event_lag_ms) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize(
    ("value", "message"),
    [("foo", "unknown router"), ("nosuchmodule_xyz:Router", "cannot import"),
     ("dmocker.replay.routing:Nope", "has no attribute"), ("dmocker.replay.routing:NO_ADMISSIONS", "not a class")],
)
def test_parse_router_errors(value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_router(value)


def test_parse_router_builtins() -> None:
    assert parse_router("round-robin").factory is RoundRobin
    assert parse_router("kv").mode == "kv_router"
    assert parse_router("round_robin").mode == "round_robin"
