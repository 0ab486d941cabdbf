"""An exactly rounded running sum of floats, independent of the order of the additions.

Why: a bulk decode run hands the collector a whole run of inter-token gaps at once, so gaps of
different decode workers arrive in a different order than pass by pass.  A float ``+=`` would
then round differently; summing exactly (as an integer multiple of 2**-1126, which every float64
is) and rounding once when read makes the result the same for any order, and bit for bit the
correctly rounded sum of the added values.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["ExactSum"]

_SHIFT = 1126  # every finite float64 is an integer multiple of 2**-(1074 + 52)
_ONE = 1 << _SHIFT
_PART = 26  # a 53-bit integer is high * 2**26 + low, |high| < 2**27, 0 <= low < 2**26
_MASK = (1 << _PART) - 1
_CHUNK = 1 << 24  # values per bincount: partial sums stay below 2**53 (exact in float64)
_FRACTION = (1 << 52) - 1  # the stored bits of a float64's significand
_HIDDEN = 1 << 52  # its implicit leading bit (normal values)
_MAX_EXP = 2046  # the largest biased exponent of a finite float64
_NARROW = 20  # exponent spread summed in int64 (see add_many)
_NARROW_CHUNK = 1 << 16  # values summed at once there: 2**16 * 2**47 < 2**63


class ExactSum:
    """Sum of float64 values kept exactly; :meth:`value` is the correctly rounded total."""

    __slots__ = ("_acc",)

    def __init__(self) -> None:
        self._acc = 0

    def add(self, x: float) -> None:
        num, den = x.as_integer_ratio()  # den is a power of two
        self._acc += num << (_SHIFT - den.bit_length() + 1)

    def add_many(self, xs: npt.NDArray[np.float64]) -> None:
        """Add every element (finite values).

        Each value is an integer ``m`` of at most 53 bits times a power of two.  Positive
        normal values (every gap, rate and weighted square the collector adds) are taken apart
        with integer operations on their bits, several times cheaper than ``frexp`` and
        ``ldexp``; when their exponents span at most ``_NARROW`` (the usual case) the parts of
        ``m`` are shifted to the smallest exponent and summed in int64, exactly, without the
        per-exponent ``bincount`` (the slowest step).  Anything else (zeros, negatives,
        subnormals, a wide spread) is summed per exponent as in :func:`_combine`.  Every path
        adds the exact value of every element, so the total is the same whichever runs.
        """
        n = int(xs.shape[0])
        if n == 0:
            return
        if n > _CHUNK:
            for i in range(0, n, _CHUNK):
                self.add_many(xs[i:i + _CHUNK])
            return
        bits = np.ascontiguousarray(xs, dtype=np.float64).view(np.int64)
        exp = bits >> 52  # the biased exponent (negative with the sign bit set)
        lo = int(exp.min())
        hi = int(exp.max())
        if lo < 1 or hi > _MAX_EXP:
            self._add_frexp(xs)
            return
        if hi - lo <= _NARROW and n <= _NARROW_CHUNK:
            # x = (high * 2**26 + low) * 2**(exp - 1075) with the significand's 27 high bits
            # (the implicit one included) and 26 low bits; shifted to the smallest exponent,
            # each part stays below 2**(27 + 20), so the int64 sums of 2**16 of them are exact.
            k = exp - lo
            low = bits & _MASK
            low <<= k
            high = bits >> _PART
            high &= _MASK
            high |= 1 << _PART
            high <<= k
            total = (int(np.add.reduce(high)) << _PART) + int(np.add.reduce(low))
        else:
            ints = (bits & _FRACTION) | _HIDDEN  # x = ints * 2**(exp - 1075)
            total = _combine(ints, exp, lo, hi)
        self._acc += total << (lo - 1075 + _SHIFT)

    def _add_frexp(self, xs: npt.NDArray[np.float64]) -> None:
        """:meth:`add_many` of any finite values (zeros, negatives, subnormals included)."""
        mant, exp = np.frexp(xs)  # xs = mant * 2**exp, 0.5 <= |mant| < 1 (0 for a zero)
        ints = np.ldexp(mant, 53).astype(np.int64)  # exact: 53-bit integers
        lo = int(exp.min())
        hi = int(exp.max())
        self._acc += _combine(ints, exp, lo, hi) << (lo - 53 + _SHIFT)

    def value(self) -> float:
        return self._acc / _ONE


def _combine(ints: npt.NDArray[np.int64], exp: npt.NDArray[np.int64] | npt.NDArray[np.intc],
             lo: int, hi: int) -> int:
    """``sum(ints * 2**(exp - lo))`` exactly, for at most ``_CHUNK`` integers of <= 53 bits."""
    high = ints >> _PART
    low = ints & _MASK
    if lo == hi:
        return (int(high.sum()) << _PART) + int(low.sum())
    k = exp - lo
    width = hi - lo + 1
    sh = np.bincount(k, weights=high, minlength=width).tolist()
    sl = np.bincount(k, weights=low, minlength=width).tolist()
    total = 0
    for j in range(width - 1, -1, -1):
        total = (total << 1) + (int(sh[j]) << _PART) + int(sl[j])
    return total
