"""Timing model: the reference's polynomial formulas, speed-up scaling and fixed timing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from dmocker.engines.interface import EngineArgs
from dmocker.engines.timing import PassTiming, polynomial_decode_ms, polynomial_prefill_ms


def test_prefill_example_t1000() -> None:
    assert polynomial_prefill_ms(1, 1000) == pytest.approx(32.1059, abs=1e-3)
    assert polynomial_prefill_ms(4, 250) == polynomial_prefill_ms(1, 1000)


def test_prefill_zero_tokens_is_free() -> None:
    assert polynomial_prefill_ms(0, 100) == 0.0
    assert polynomial_prefill_ms(3, 0) == 0.0


def test_decode_example_half_full() -> None:
    assert polynomial_decode_ms(50, 100) == pytest.approx(26.31, abs=1e-9)


def test_decode_floor_and_clamp() -> None:
    assert polynomial_decode_ms(0, 100) == pytest.approx(5.74)
    assert polynomial_decode_ms(500, 100) == polynomial_decode_ms(100, 100)
    assert polynomial_decode_ms(0, 0) == polynomial_decode_ms(1, 1)


@given(st.integers(0, 10**6), st.integers(1, 10**6))
def test_decode_at_least_one_ms(active: int, total: int) -> None:
    assert polynomial_decode_ms(active, total) >= 1.0


def test_speedup_scaling() -> None:
    base = PassTiming(EngineArgs(block_size=4, num_gpu_blocks=25))
    fast = PassTiming(EngineArgs(block_size=4, num_gpu_blocks=25, speedup_ratio=10.0,
                                 decode_speedup_ratio=2.0))
    assert fast.prefill_ms(1, 1000, 0) == pytest.approx(base.prefill_ms(1, 1000, 0) / 10)
    assert fast.decode_ms(3, 50) == pytest.approx(base.decode_ms(3, 50) / 20)
    assert base.decode_ms(3, 50) == pytest.approx(26.31, abs=1e-9)


def test_non_positive_ratio_means_unscaled() -> None:
    base = PassTiming(EngineArgs())
    zero = PassTiming(EngineArgs(speedup_ratio=0.0))
    neg = PassTiming(EngineArgs(speedup_ratio=2.0, decode_speedup_ratio=-1.0))
    assert zero.prefill_ms(2, 3000, 1000) == base.prefill_ms(2, 3000, 1000)
    assert neg.decode_ms(1, 10) == base.decode_ms(1, 10)
    assert neg.prefill_ms(1, 100, 0) == base.prefill_ms(1, 100, 0) / 2


def test_means_are_integer_divided_like_the_reference() -> None:
    t = PassTiming(EngineArgs())
    # batch 2, isl 1001+1000, prefix 1+0: mean_isl 1000, mean_prefix 0 -> t = 2*1000
    assert t.prefill_ms(2, 2001, 1) == pytest.approx(polynomial_prefill_ms(2, 1000))
    assert t.prefill_ms(2, 10, 10) == 0.0


def test_fixed_timing() -> None:
    t = PassTiming(EngineArgs(fixed_prefill_ms=3.0, fixed_decode_ms=1.5, speedup_ratio=2.0))
    assert t.prefill_ms(5, 5000, 0) == 1.5
    assert t.prefill_ms(1, 64, 64) == 0.0
    assert t.decode_ms(7, 10**9) == 0.75
    assert t.decode_ms(0, 10) == 0.0
    assert math.isfinite(t.decode_ms(1, 0))


@given(
    st.integers(0, 300),
    st.lists(st.integers(0, 3_000_000), min_size=1, max_size=40),
    st.floats(0.0, 1e7, allow_nan=False),
    st.sampled_from([(1.0, 1.0), (2.5, 1.0), (1.0, 0.0), (0.7, 3.0)]),
    st.booleans(),
    st.sampled_from([1, 16384]),
)
def test_bulk_run_end_times_match_pass_by_pass(batch: int, active: list[int], start: float,
                                                speedups: tuple[float, float], fixed: bool,
                                                blocks: int) -> None:
    """A bulk run's pass end times are, element for element, ``end = start + decode_ms`` pass
    after pass (the one-buffer path and the plain array path alike)."""
    import numpy as np

    from dmocker.engines.timing import run_end_times

    args = EngineArgs(speedup_ratio=speedups[0], decode_speedup_ratio=speedups[1], num_gpu_blocks=blocks,
                      fixed_prefill_ms=3.0 if fixed else None, fixed_decode_ms=1.7 if fixed else None)
    timing = PassTiming(args)
    expected = []
    t = start
    for a in active:
        t = t + timing.decode_ms(batch, a)
        expected.append(t)
    arr = np.array(active, dtype=np.int64)
    assert timing.run_end_times(start, batch, arr).tolist() == expected
    assert run_end_times(start, timing.decode_ms_many(batch, arr)).tolist() == expected


@given(
    st.integers(0, 300),
    st.integers(0, 3_000_000),
    st.sampled_from([1, 2, 3, 255, 256, 257, 700]),
    st.floats(0.0, 1e7, allow_nan=False),
    st.sampled_from([(1.0, 1.0), (2.5, 1.0), (1.0, 0.0), (0.7, 3.0)]),
    st.booleans(),
    st.sampled_from([1, 64, 16384]),
)
def test_run_ends_match_pass_by_pass(batch: int, active0: int, passes: int, start: float,
                                     speedups: tuple[float, float], fixed: bool, blocks: int) -> None:
    """``run_ends`` (scalar loop for short runs, numpy for long ones) gives, element for
    element, ``end = start + decode_ms`` pass after pass, the active KV growing by the batch."""
    args = EngineArgs(speedup_ratio=speedups[0], decode_speedup_ratio=speedups[1], num_gpu_blocks=blocks,
                      fixed_prefill_ms=3.0 if fixed else None, fixed_decode_ms=1.7 if fixed else None)
    timing = PassTiming(args)
    expected = []
    t = start
    for i in range(passes):
        t = t + timing.decode_ms(batch, active0 + i * batch)
        expected.append(t)
    ends = timing.run_ends(start, batch, active0, passes)
    assert ends.tolist() == expected
    # the array itself as np.array of the floats builds it: dtype, shape, writable, bit for bit
    plain = np.array(expected, dtype=np.float64)
    assert ends.dtype == plain.dtype and ends.shape == plain.shape and ends.flags.writeable
    assert ends.tobytes() == plain.tobytes()
