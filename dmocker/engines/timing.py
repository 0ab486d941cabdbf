"""Pass-duration models of the mock engines (the reference's polynomial model, ``ai-dynamo/aisimulate``
``crates/core/src/engine/common/perf_model.rs``).

A pass lasts ``prefill_ms + decode_ms``; tokens are stamped at its end.  The polynomial model is
the reference's built-in default; the fixed model charges constant costs (useful for tests and
what-if runs).  Both are divided by the speed-up ratios: prefill by ``speedup_ratio``, decode by
``speedup_ratio * decode_speedup_ratio``; a ratio <= 0 means unscaled (as the reference).
"""

from __future__ import annotations

import struct
from typing import Final

import numpy as np
import numpy.typing as npt

from dmocker.engines.interface import EngineArgs
from dmocker.engines.profile import TimingProfile, load_profile

__all__ = [
    "polynomial_prefill_ms",
    "polynomial_decode_ms",
    "PassTiming",
    "run_end_times",
]

_SCALAR_PASSES = 256  # runs up to this long: the scalar loop of PassTiming.run_ends


def polynomial_prefill_ms(batch_size: int, new_tokens_per_request: int) -> float:
    """``4.209989e-7 t^2 + 1.518344e-2 t + 16.50142`` with ``t = batch * new``; 0 if ``t == 0``.

    ``new_tokens_per_request`` is ``mean_isl - mean_prefix`` with both means integer-divided,
    as the reference computes them (so a batch's rounding matches it exactly).
    """
    if batch_size <= 0 or new_tokens_per_request <= 0:
        return 0.0
    t = float(batch_size * new_tokens_per_request)
    return 4.209989e-07 * t * t + 1.518344e-02 * t + 1.650142e01


# The decode model's polynomial in the KV fill p: every path (scalar, numpy, bulk runs) uses
# these, in the order ``_D2 * p * p + _D1 * p + _D0``, so all give the same floats.
_D2: Final = -25.74
_D1: Final = 54.01
_D0: Final = 5.74


def _decode_poly(p: float) -> float:
    return _D2 * p * p + _D1 * p + _D0


def polynomial_decode_ms(active_kv_tokens: int, total_kv_tokens: int) -> float:
    """``max(-25.74 p^2 + 54.01 p + 5.74, 1.0)`` with ``p = min(active / total, 1)``."""
    p = min(active_kv_tokens / total_kv_tokens, 1.0) if total_kv_tokens > 0 else 1.0
    return max(_decode_poly(p), 1.0)


class PassTiming:
    """Pass-duration calculator bound to one worker's args (precomputes the scale factors)."""

    __slots__ = ("_fixed", "_fixed_prefill", "_fixed_decode", "_prefill_div", "_decode_div",
                 "_total_kv", "_profile")

    def __init__(self, args: EngineArgs) -> None:
        # a measured profile replaces the polynomial (docs/models.md, timing profiles)
        self._profile: TimingProfile | None = (
            load_profile(args.timing_profile) if args.timing_profile is not None else None)
        self._fixed = args.fixed_timing
        self._fixed_prefill = float(args.fixed_prefill_ms or 0.0)
        self._fixed_decode = float(args.fixed_decode_ms or 0.0)
        s = float(args.speedup_ratio)
        d = s * float(args.decode_speedup_ratio)
        self._prefill_div = s if s > 0.0 else 1.0
        self._decode_div = d if d > 0.0 else 1.0
        self._total_kv = args.total_kv_tokens

    def prefill_ms(self, batch_size: int, total_isl: int, total_prefix: int) -> float:
        """Scaled prefill time of a batch given its summed ISL and summed prefix."""
        if batch_size <= 0:
            return 0.0
        new = total_isl // batch_size - total_prefix // batch_size
        if new <= 0:
            return 0.0
        profile = self._profile
        if profile is not None:
            ms = profile.prefill_ms(batch_size * new)
        else:
            ms = self._fixed_prefill if self._fixed else polynomial_prefill_ms(batch_size, new)
        return ms / self._prefill_div

    def decode_ms(self, batch_size: int, active_kv_tokens: int) -> float:
        """Scaled decode time of a pass that decodes ``batch_size`` requests (0 if none)."""
        if batch_size <= 0:
            return 0.0
        profile = self._profile
        if profile is not None:
            return profile.decode_ms(active_kv_tokens, active_kv_tokens // batch_size) / self._decode_div
        ms = (
            self._fixed_decode
            if self._fixed
            else polynomial_decode_ms(active_kv_tokens, self._total_kv)
        )
        return ms / self._decode_div

    def decode_ms_many(self, batch_size: int, active_kv_tokens: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """:meth:`decode_ms` of one batch size at many active-KV values, element for element
        the same floats (the same IEEE operations in the same order), for bulk decode runs."""
        n = int(active_kv_tokens.shape[0])
        if batch_size <= 0:
            return np.zeros(n, dtype=np.float64)
        profile = self._profile
        if profile is not None:
            return profile.decode_ms_many(active_kv_tokens, active_kv_tokens // batch_size) / self._decode_div
        if self._fixed:
            ms = np.full(n, self._fixed_decode, dtype=np.float64)
        elif self._total_kv > 0:
            p = np.minimum(active_kv_tokens / self._total_kv, 1.0)
            ms = np.maximum(_D2 * p * p + _D1 * p + _D0, 1.0)
        else:
            ms = np.full(n, polynomial_decode_ms(0, 0), dtype=np.float64)
        return ms / self._decode_div


    def run_end_times(self, start_ms: float, batch_size: int,
                      active_kv_tokens: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """End times of back-to-back decode passes of one batch at these active-KV values: the
        module's :func:`run_end_times` of :meth:`decode_ms_many`, the same floats, computed in
        one buffer with one temporary (it runs once per bulk run, on short arrays, where numpy's
        per-operation cost is what counts)."""
        n = int(active_kv_tokens.shape[0])
        out = np.empty(n + 1, dtype=np.float64)
        ms = out[1:]
        profile = self._profile
        if profile is not None and batch_size > 0:
            ms[:] = self.decode_ms_many(batch_size, active_kv_tokens)
        elif batch_size <= 0:
            ms.fill(0.0)
        elif self._fixed:
            ms.fill(self._fixed_decode)
            ms /= self._decode_div
        elif self._total_kv > 0:
            p = active_kv_tokens / self._total_kv
            np.minimum(p, 1.0, out=p)
            np.multiply(p, _D2, out=ms)  # _D2 * p * p + _D1 * p + _D0, in that order
            ms *= p
            p *= _D1
            ms += p
            ms += _D0
            # (no max(ms, 1.0): for 0 <= p <= 1 the polynomial is at least 5.74, rounding
            # included, as active KV is never negative; and x / 1.0 == x)
            if self._decode_div != 1.0:
                ms /= self._decode_div
        else:
            ms.fill(polynomial_decode_ms(0, 0))
            ms /= self._decode_div
        out[0] = start_ms
        np.add.accumulate(out, out=out)  # cumsum's sequential sum, in place
        return out[1:]

    def run_ends(self, start_ms: float, batch_size: int, active0: int, passes: int) -> npt.NDArray[np.float64]:
        """End times of ``passes`` back-to-back decode passes of one batch whose summed sequence
        lengths are ``active0`` before the first and grow by ``batch_size`` a pass (a bulk
        run): :meth:`run_end_times` of that ``arange``, the same floats.

        Why a scalar loop: a run is computed once per batch change, mostly over a few dozen
        passes, too few for numpy's per-call overhead to pay off; the loop does the same IEEE
        operations in the same order (the active values are integers below 2**53, so float
        steps hold them exactly), and only long runs take the vector path."""
        profiled = batch_size > 0 and self._profile is not None
        poly = batch_size > 0 and not profiled and not self._fixed and self._total_kv > 0
        if passes > _SCALAR_PASSES and (poly or profiled):
            return self.run_end_times(
                start_ms, batch_size,
                np.arange(active0, active0 + batch_size * passes, batch_size, dtype=np.int64))
        ends = [0.0] * passes
        end = start_ms
        div = self._decode_div
        if profiled:  # each pass as decode_ms times it
            act = active0
            for i in range(passes):
                end += self.decode_ms(batch_size, act)
                ends[i] = end
                act += batch_size
        elif poly:
            total = float(self._total_kv)
            a = float(active0)
            step = float(batch_size)
            for i in range(passes):
                p = a / total
                if p > 1.0:
                    p = 1.0
                # as run_end_times: no max(., 1.0) (the polynomial is >= 5.74 on [0, 1])
                end += _decode_poly(p) / div
                ends[i] = end
                a += step
        else:  # one duration for every pass (fixed, no batch, or no KV total: p is then 1)
            ms = self.decode_ms(batch_size, active0)
            for i in range(passes):
                end += ms
                ends[i] = end
        return _to_array(ends)


_packers: dict[int, struct.Struct] = {}
_F64: Final = np.dtype(np.float64)
_empty: Final = np.empty


def _to_array(values: list[float]) -> npt.NDArray[np.float64]:
    """``np.array(values, dtype=np.float64)``, the same floats, for a short list: packed
    straight into an empty array by a ``struct`` of that length (cached), which converts each
    float in one C loop where ``np.array`` first inspects every element for its type."""
    n = len(values)
    if n > _SCALAR_PASSES:  # (a fixed duration's long run: no packer per length kept)
        return np.array(values, dtype=np.float64)
    packer = _packers.get(n)
    if packer is None:
        packer = _packers[n] = struct.Struct(f"{n}d")
    out = _empty(n, _F64)
    packer.pack_into(out, 0, *values)  # type: ignore[arg-type]  # (numpy's stubs name no buffer protocol)
    return out


def run_end_times(start_ms: float, durations: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """End times of back-to-back passes: ``((start + d1) + d2) + ...``, summed in order, so each
    equals what pass-by-pass ``end = start + duration`` produces (``cumsum`` accumulates
    sequentially, unlike ``sum``)."""
    out = np.empty(durations.shape[0] + 1, dtype=np.float64)
    out[0] = start_ms
    out[1:] = durations
    return np.cumsum(out)[1:]
