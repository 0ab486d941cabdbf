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

        Each value is ``m * 2**(e - 53)`` with a 53-bit integer ``m``; ``m`` is split into a
        high and a low part of at most 27 bits, and the parts are summed per exponent with
        ``bincount``, whose float64 sums stay exact (below 2**53 for up to 2**24 values).
        The few per-exponent sums are then combined in Python integers.
        """
        n = int(xs.shape[0])
        if n == 0:
            return
        if n > _CHUNK:
            for i in range(0, n, _CHUNK):
                self.add_many(xs[i:i + _CHUNK])
            return
        mant, exp = np.frexp(xs)  # xs = mant * 2**exp, 0.5 <= |mant| < 1 (0 for a zero)
        ints = np.ldexp(mant, 53).astype(np.int64)  # exact: 53-bit integers
        high = ints >> _PART
        low = ints & _MASK
        lo = int(exp.min())
        hi = int(exp.max())
        if lo == hi:
            total = (int(high.sum()) << _PART) + int(low.sum())
        else:
            k = exp - lo
            width = hi - lo + 1
            sh = np.bincount(k, weights=high, minlength=width).tolist()
            sl = np.bincount(k, weights=low, minlength=width).tolist()
            total = 0
            for j in range(width - 1, -1, -1):
                total = (total << 1) + (int(sh[j]) << _PART) + int(sl[j])
        self._acc += total << (lo - 53 + _SHIFT)

    def value(self) -> float:
        return self._acc / _ONE
