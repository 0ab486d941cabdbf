"""The KV router's fused fast path (no queue, temperature 0) against its plain twin.

Two routers with the same seed and configuration, one forced onto the general path
(``_admit`` + ``_choose``), are driven by the same random sequence of arrivals, KV events,
prefill completions, frees and topology changes; every answer and every piece of load
bookkeeping must agree, tie-breaking draws included.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmocker.engines.interface import EngineRequest, KvRemoved, KvStored
from dmocker.replay.routing import KvRouter, Pool, RouterConfig, RouterContext

BS = 16

_route = st.tuples(st.just("route"), st.lists(st.integers(0, 2), max_size=8), st.integers(0, 3 * BS))
_op = st.one_of(
    _route, _route, _route,
    st.tuples(st.just("kv"), st.integers(0, 3), st.booleans(), st.lists(st.integers(0, 2), min_size=1, max_size=8)),
    st.tuples(st.just("complete"), st.integers(0, 30)),
    st.tuples(st.just("free"), st.integers(0, 30)),
    st.tuples(st.just("topology"), st.integers(0, 3), st.booleans()),
)


def _chain(blocks: list[int]) -> tuple[int, ...]:
    """Chained hashes, as the engines name blocks: a block's hash covers its whole prefix."""
    out: list[int] = []
    h = 0
    for b in blocks:
        h = h * 7 + b + 1
        out.append(h)
    return tuple(out)


def _state(r: KvRouter) -> tuple[object, ...]:
    return (dict(r._prefill_tokens), dict(r._blocks), dict(r._requests),
            {k: list(v) for k, v in r._active.items()}, r._rng.getstate())


_CONFIGS = pytest.mark.parametrize(
    ("pool", "decay", "weight"),
    [(Pool.PREFILL, 0.0, 0.0), (Pool.PREFILL, 1.0, 0.0), (Pool.PREFILL, 0.5, 0.3), (Pool.DECODE, 0.0, 0.0),
     (Pool.DECODE, 0.0, 0.3)],
)


@pytest.mark.slow  # quick twin: the seeded sequences below
@_CONFIGS
@settings(max_examples=60, deadline=None)
@given(st.sampled_from([0.5, 1.0]), st.integers(0, 3), st.lists(_op, min_size=20, max_size=80))
def test_fast_path_matches_the_plain_path(
    pool: Pool, decay: float, weight: float, credit: float, seed: int, ops: list[tuple[object, ...]]
) -> None:
    _drive(pool, decay, weight, credit, seed, ops)


def _random_ops(rng: random.Random, n: int) -> list[tuple[object, ...]]:
    """Route-heavy sequences over a three-block alphabet, so prefixes overlap often."""
    def blocks(lo: int) -> list[int]:
        return [rng.randint(0, 2) for _ in range(rng.randint(lo, 8))]

    ops: list[tuple[object, ...]] = []
    for _ in range(n):
        kind = rng.choice(["route", "route", "route", "kv", "complete", "free", "topology"])
        if kind == "route":
            ops.append((kind, blocks(0), rng.randint(0, 3 * BS)))
        elif kind == "kv":
            ops.append((kind, rng.randint(0, 3), rng.random() < 0.7, blocks(1)))
        elif kind == "topology":
            ops.append((kind, rng.randint(0, 3), rng.random() < 0.5))
        else:
            ops.append((kind, rng.randint(0, 30)))
    return ops


@_CONFIGS
def test_fast_path_matches_the_plain_path_on_seeded_sequences(pool: Pool, decay: float, weight: float) -> None:
    """Long seeded sequences besides Hypothesis's: every cost term gets to decide choices."""
    for k in range(60):
        rng = random.Random(k)
        _drive(pool, decay, weight, rng.choice([0.5, 1.0]), k % 4, _random_ops(rng, 80))


def _drive(pool: Pool, decay: float, weight: float, credit: float, seed: int, ops: list[tuple[object, ...]]) -> None:
    cfg = RouterConfig(overlap_score_credit=credit, overlap_score_credit_decay=decay,
                       decode_active_request_weight=weight)
    fast = KvRouter(RouterContext(pool, seed, BS, 8192), cfg)
    plain = KvRouter(RouterContext(pool, seed, BS, 8192), cfg)
    assert fast._fast
    plain._fast = False
    for r in (fast, plain):
        for w in range(3):
            r.add_worker(w, 0.0)
    rid = 0
    for op in ops:
        kind = op[0]
        answers = []
        for r in (fast, plain):
            if kind == "route":
                blocks, extra = op[1], op[2]
                assert isinstance(blocks, list) and isinstance(extra, int)
                hashes = _chain(blocks)
                request = EngineRequest(rid, len(hashes) * BS + extra, 4, hashes)
                try:
                    answers.append((r.route(request, 0.0), r.overlap_tokens(rid)))
                except ValueError as exc:  # no worker left
                    answers.append((str(exc), -1))
            elif kind == "kv":
                worker, stored, blocks = op[1], op[2], op[3]
                assert isinstance(worker, int) and isinstance(blocks, list)
                hashes = _chain(blocks)
                r.on_kv_events(worker, [KvStored(hashes) if stored else KvRemoved(hashes[-1:])], 0.0)
            elif kind == "complete":
                answers.append(tuple(r.on_prefill_complete(int(op[1]), 0.0)))  # type: ignore[call-overload]
            elif kind == "free":
                answers.append(tuple(r.on_free(int(op[1]), 0.0)))  # type: ignore[call-overload]
            else:
                worker, added = op[1], op[2]
                assert isinstance(worker, int)
                answers.append(tuple(r.add_worker(worker, 0.0) if added else r.remove_worker(worker, 0.0)))
        if kind == "route":
            rid += 1
        assert answers[:1] == answers[1:], (kind, answers)
        assert _state(fast) == _state(plain)
