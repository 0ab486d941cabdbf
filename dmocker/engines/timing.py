"""Pass-duration models of the mock engines (the reference's polynomial model, ``ai-dynamo/aisimulate``
``crates/core/src/engine/common/perf_model.rs``).

A pass lasts ``prefill_ms + decode_ms``; tokens are stamped at its end.  The polynomial model is
the reference's built-in default; the fixed model charges constant costs (useful for tests and
what-if runs).  Both are divided by the speed-up ratios: prefill by ``speedup_ratio``, decode by
``speedup_ratio * decode_speedup_ratio``; a ratio <= 0 means unscaled (as the reference).
"""

from __future__ import annotations

from dmocker.engines.interface import EngineArgs

__all__ = [
    "polynomial_prefill_ms",
    "polynomial_decode_ms",
    "PassTiming",
]


def polynomial_prefill_ms(batch_size: int, new_tokens_per_request: int) -> float:
    """``4.209989e-7 t^2 + 1.518344e-2 t + 16.50142`` with ``t = batch * new``; 0 if ``t == 0``.

    ``new_tokens_per_request`` is ``mean_isl - mean_prefix`` with both means integer-divided,
    as the reference computes them (so a batch's rounding matches it exactly).
    """
    if batch_size <= 0 or new_tokens_per_request <= 0:
        return 0.0
    t = float(batch_size * new_tokens_per_request)
    return 4.209989e-07 * t * t + 1.518344e-02 * t + 1.650142e01


def polynomial_decode_ms(active_kv_tokens: int, total_kv_tokens: int) -> float:
    """``max(-25.74 p^2 + 54.01 p + 5.74, 1.0)`` with ``p = min(active / total, 1)``."""
    p = min(active_kv_tokens / total_kv_tokens, 1.0) if total_kv_tokens > 0 else 1.0
    return max(-25.74 * p * p + 54.01 * p + 5.74, 1.0)


class PassTiming:
    """Pass-duration calculator bound to one worker's args (precomputes the scale factors)."""

    __slots__ = ("_fixed", "_fixed_prefill", "_fixed_decode", "_prefill_div", "_decode_div",
                 "_total_kv")

    def __init__(self, args: EngineArgs) -> None:
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
        ms = self._fixed_prefill if self._fixed else polynomial_prefill_ms(batch_size, new)
        return ms / self._prefill_div

    def decode_ms(self, batch_size: int, active_kv_tokens: int) -> float:
        """Scaled decode time of a pass that decodes ``batch_size`` requests (0 if none)."""
        if batch_size <= 0:
            return 0.0
        ms = (
            self._fixed_decode
            if self._fixed
            else polynomial_decode_ms(active_kv_tokens, self._total_kv)
        )
        return ms / self._decode_div
