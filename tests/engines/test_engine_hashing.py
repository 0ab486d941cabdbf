"""Chained block hashes: deterministic, prefix-identifying, batch == single."""

from __future__ import annotations

import os
import subprocess
import sys

from hypothesis import given, settings, strategies as st

from dmocker.engines.hashing import (
    block_hashes_from_tokens,
    block_hashes_from_trace,
    block_hashes_from_trace_batch,
)

ids = st.lists(st.integers(0, 2**40), min_size=1, max_size=6)


def test_known_values_are_stable() -> None:
    # Pinned: a change here changes every replay's cache behaviour.
    assert block_hashes_from_tokens(list(range(8)), 4) == (264082956750225073, 308723736500224608)


def test_independent_of_pythonhashseed() -> None:
    code = ("from dmocker.engines.hashing import block_hashes_from_trace as f;"
            "print(f([1, 2, 3], 1500, 512, 64))")
    outs = set()
    for seed in ("0", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        outs.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                text=True, check=True).stdout)
    assert len(outs) == 1


@given(ids, ids)
def test_shared_prefix_shares_exactly_the_prefix_blocks(a: list[int], b: list[int]) -> None:
    ha = block_hashes_from_trace(a, len(a) * 512, 512, 64)
    hb = block_hashes_from_trace(b, len(b) * 512, 512, 64)
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    n_equal = 0
    while n_equal < min(len(ha), len(hb)) and ha[n_equal] == hb[n_equal]:
        n_equal += 1
    assert n_equal == common * 8
    assert len(set(ha)) == len(ha)


@settings(max_examples=50)
@given(st.lists(st.tuples(ids, st.integers(1, 3072)), min_size=1, max_size=8),
       st.sampled_from([(512, 64), (512, 512), (64, 16), (100, 64)]))
def test_batch_equals_single(rows: list[tuple[list[int], int]], sizes: tuple[int, int]) -> None:
    tbs, bs = sizes
    hids = [r for r, _ in rows]
    lens = [min(n, len(r) * tbs) for r, n in rows]
    batch = block_hashes_from_trace_batch(hids, lens, tbs, bs)
    assert batch == [block_hashes_from_trace(h, n, tbs, bs) for h, n in zip(hids, lens)]
    for h, n in zip(batch, lens):
        assert len(h) == n // bs


def test_hashes_are_two_digit_ints_below_generated_block_ids() -> None:
    """Prompt hashes stay below 2**59 and generated-block ids in [2**59, 2**60): two-digit
    CPython ints (cheap dict keys) that can never collide with each other."""
    from dmocker.engines.block_pool import PRIVATE_HASH_BASE, generated_block_ids
    from dmocker.engines.hashing import HASH_BITS

    hashes = block_hashes_from_trace(list(range(1000)), 1000 * 512, 512, 16)
    assert len(hashes) == 32000 and max(hashes) < 1 << HASH_BITS
    assert max(hashes) >= 1 << (HASH_BITS - 2)  # the top bits are used, not just masked away
    assert PRIVATE_HASH_BASE == 1 << HASH_BITS
    ids = generated_block_ids((1 << 34) - 1, 0, 3)
    assert min(ids) >= PRIVATE_HASH_BASE and max(ids) < 1 << 60
