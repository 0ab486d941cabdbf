"""ExactSum: the correctly rounded sum of any floats, whatever the order and batching."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmocker.replay.exact_sum import ExactSum

_FLOATS = st.one_of(
    st.floats(-1e300, 1e300),  # (almost) every exponent, subnormals, zeros
    st.floats(-1e4, 1e4),
    st.integers(-(2**53), 2**53).map(float),
)


def _exact(values: list[float]) -> float:
    return float(sum((Fraction(v) for v in values), Fraction(0)))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(_FLOATS, max_size=40), max_size=5), st.lists(_FLOATS, max_size=5))
def test_sum_is_correctly_rounded_in_any_batching(batches: list[list[float]], singles: list[float]) -> None:
    s = ExactSum()
    for batch in batches:
        s.add_many(np.array(batch, dtype=np.float64))
    for v in singles:
        s.add(v)
    everything = [v for b in batches for v in b] + singles
    assert s.value() == _exact(everything)


def test_large_batches_same_exponent_and_spread() -> None:
    rng = np.random.default_rng(7)
    same = rng.uniform(1.0, 2.0, 70_000)  # one exponent
    spread = rng.standard_normal(70_000) * 10.0 ** rng.integers(-12, 12, 70_000)
    for xs in (same, spread):
        s = ExactSum()
        s.add_many(xs)
        assert s.value() == _exact(xs.tolist())


@pytest.mark.slow  # exact Fractions over 2^16 values, five times
def test_positive_values_every_path() -> None:
    """Positive normal values take the bit-level paths (int64 sums for a narrow exponent
    spread, per-exponent sums for a wide one); their totals are the exact ones too."""
    rng = np.random.default_rng(11)
    n = 1 << 16  # the most the int64 path sums at once
    top = np.nextafter(2.0 ** rng.integers(1, 22, n), 0.0)  # all-ones significands, spread 20
    gaps = rng.uniform(5.0, 20.0, n) * rng.integers(1, 17, n)
    wide = rng.uniform(1.0, 2.0, n) * 2.0 ** rng.integers(-40, 40, n)
    for xs in (top, gaps, gaps * gaps, wide, np.concatenate((gaps, gaps))):
        s = ExactSum()
        s.add_many(xs)
        assert s.value() == _exact(xs.tolist())
