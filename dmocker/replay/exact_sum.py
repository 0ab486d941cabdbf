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


class ExactSum:
    """Sum of float64 values kept exactly; :meth:`value` is the correctly rounded total."""

    __slots__ = ("_acc",)

    def __init__(self) -> None:
        self._acc = 0

    def add(self, x: float) -> None:
        num, den = x.as_integer_ratio()  # den is a power of two
        self._acc += num << (_SHIFT - den.bit_length() + 1)

    def add_many(self, xs: npt.NDArray[np.float64]) -> None:
        """Add every element (finite values)."""
        if xs.shape[0] == 0:
            return
        mant, exp = np.frexp(xs)  # xs = mant * 2**exp, 0.5 <= |mant| < 1
        ints = np.ldexp(mant, 53).astype(np.int64)  # exact: 53-bit integers
        exps = exp.astype(np.int64)
        lo = int(exps.min())
        hi = int(exps.max())
        acc = self._acc
        if lo == hi:
            acc += sum(ints.tolist()) << (lo - 53 + _SHIFT)
        else:
            for e in range(lo, hi + 1):
                sel = ints[exps == e]
                if sel.shape[0]:
                    acc += sum(sel.tolist()) << (e - 53 + _SHIFT)
        self._acc = acc

    def value(self) -> float:
        return self._acc / _ONE
