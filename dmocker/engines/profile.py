"""Pass timing from a measured profile (``--timing-profile FILE``), instead of the built-in
polynomial.

What it holds, and how it is read, follows the profile data NVIDIA Dynamo's mocker takes
(``ai-dynamo/dynamo``, ``lib/mocker/src/common/perf_model.rs``, ``PerfModel::from_npz``):

* prefill: the time of a prefill pass against the new (not cached) tokens it computes,
  ``batch size x (prompt - cached prefix)``; linear interpolation between the points, extended
  past the first and last along their segments, and never below 0;
* decode: the time of a decode pass on a grid of (active KV tokens of the batch, the batch's mean
  context length = active KV tokens // batch size); bilinear interpolation in the grid's cell,
  extended past its edges the same way, and never below 1 ms (token steps do not collapse).

Two files give one:

* the mocker's NPZ (``perf_data.npz``, as ``dynamo.mocker``'s profile conversion writes it):
  arrays ``prefill_isl``, ``prefill_ttft_ms``, ``decode_active_kv_tokens``,
  ``decode_context_length`` and ``decode_itl`` (rows: active KV, columns: context length);
* a CSV with the header ``phase,tokens,context_length,ms``: ``prefill`` rows give ``tokens`` (new
  tokens in the pass) and ``ms``; ``decode`` rows give ``tokens`` (active KV tokens),
  ``context_length`` and ``ms``, and together cover every (tokens, context length) pair of a
  grid.

The scalar and the array forms do the same IEEE operations in the same order, so a bulk decode
run and the same passes one by one get the same floats.
"""

from __future__ import annotations

import bisect
import functools
import os
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["ProfileError", "TimingProfile", "load_profile"]

F64 = npt.NDArray[np.float64]


class ProfileError(ValueError):
    """A profile that cannot be used: the message names the file (and line, field)."""


class TimingProfile:
    """A prefill curve and a decode grid (module docstring)."""

    __slots__ = ("source", "_px", "_py", "_dx", "_dy", "_dz", "_px_a", "_py_a", "_dx_a", "_dy_a", "_dz_a")

    def __init__(self, source: str, prefill_tokens: Sequence[float], prefill_ms: Sequence[float],
                 decode_active_kv: Sequence[float], decode_context: Sequence[float],
                 decode_ms: Sequence[Sequence[float]]) -> None:
        self.source = source
        _axis(source, "prefill tokens", prefill_tokens)
        _axis(source, "decode active KV tokens", decode_active_kv)
        _axis(source, "decode context lengths", decode_context)
        if len(prefill_ms) != len(prefill_tokens):
            raise ProfileError(f"{source}: {len(prefill_tokens)} prefill token counts but {len(prefill_ms)} times")
        if len(decode_ms) != len(decode_active_kv) or any(len(r) != len(decode_context) for r in decode_ms):
            raise ProfileError(f"{source}: the decode times are not a {len(decode_active_kv)} x "
                               f"{len(decode_context)} grid (active KV x context length)")
        # each table twice: lists for the per-pass lookups (a numpy call per pass costs more than
        # the arithmetic), arrays for the bulk runs' many passes at once
        self._px = [float(v) for v in prefill_tokens]
        self._py = [float(v) for v in prefill_ms]
        self._dx = [float(v) for v in decode_active_kv]
        self._dy = [float(v) for v in decode_context]
        self._dz = [[float(v) for v in row] for row in decode_ms]
        self._px_a = np.array(self._px)
        self._py_a = np.array(self._py)
        self._dx_a = np.array(self._dx)
        self._dy_a = np.array(self._dy)
        self._dz_a = np.array(self._dz)

    def prefill_ms(self, tokens: int) -> float:
        """The prefill pass time for ``tokens`` new tokens."""
        xs, ys = self._px, self._py
        i = _cell(xs, float(tokens))
        x = float(tokens)
        y = ys[i] + (x - xs[i]) * (ys[i + 1] - ys[i]) / (xs[i + 1] - xs[i])
        return y if y > 0.0 else 0.0

    def decode_ms(self, active_kv_tokens: int, context_length: int) -> float:
        """The decode pass time at these active KV tokens and mean context length."""
        x, y = float(active_kv_tokens), float(context_length)
        xs, ys, z = self._dx, self._dy, self._dz
        i, j = _cell(xs, x), _cell(ys, y)
        tx = (x - xs[i]) / (xs[i + 1] - xs[i])
        ty = (y - ys[j]) / (ys[j + 1] - ys[j])
        low = z[i][j] * (1.0 - tx) + z[i + 1][j] * tx
        high = z[i][j + 1] * (1.0 - tx) + z[i + 1][j + 1] * tx
        ms = low * (1.0 - ty) + high * ty
        return ms if ms > 1.0 else 1.0

    def decode_ms_many(self, active_kv_tokens: npt.NDArray[np.int64], context_length: npt.NDArray[np.int64]) -> F64:
        """:meth:`decode_ms` of each pair, the same floats."""
        x = active_kv_tokens.astype(np.float64)
        y = context_length.astype(np.float64)
        xs, ys, z = self._dx_a, self._dy_a, self._dz_a
        i = np.clip(np.searchsorted(xs, x, side="right") - 1, 0, xs.shape[0] - 2)
        j = np.clip(np.searchsorted(ys, y, side="right") - 1, 0, ys.shape[0] - 2)
        tx = (x - xs[i]) / (xs[i + 1] - xs[i])
        ty = (y - ys[j]) / (ys[j + 1] - ys[j])
        low = z[i, j] * (1.0 - tx) + z[i + 1, j] * tx
        high = z[i, j + 1] * (1.0 - tx) + z[i + 1, j + 1] * tx
        ms: F64 = low * (1.0 - ty) + high * ty
        return np.maximum(ms, 1.0)


def _cell(xs: list[float], x: float) -> int:
    """The segment of ascending ``xs`` whose line gives ``x``: the one holding it, or the first or
    last one outside the range (extrapolation)."""
    i = bisect.bisect_right(xs, x) - 1
    return 0 if i < 0 else len(xs) - 2 if i > len(xs) - 2 else i


def _axis(source: str, what: str, values: Sequence[float]) -> None:
    if len(values) < 2:
        raise ProfileError(f"{source}: the {what} need at least 2 points, got {len(values)}")
    for a, b in zip(values, values[1:]):
        if not b > a:
            raise ProfileError(f"{source}: the {what} must increase, but {b:g} follows {a:g}")


def load_profile(path: str | os.PathLike[str]) -> TimingProfile:
    """A profile from the mocker's NPZ (``.npz``) or the documented CSV (anything else); read
    once per file version (every worker of a run shares it)."""
    source = os.fspath(path)
    try:
        st = os.stat(source)
    except OSError:
        raise ProfileError(f"{source}: no such profile file") from None
    return _load(source, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)
def _load(source: str, mtime_ns: int, size: int) -> TimingProfile:
    if source.endswith(".npz"):
        return _from_npz(source)
    return _from_csv(source)


_NPZ_KEYS = ("prefill_isl", "prefill_ttft_ms", "decode_active_kv_tokens", "decode_context_length", "decode_itl")


def _from_npz(source: str) -> TimingProfile:
    try:
        with np.load(source) as data:
            missing = [k for k in _NPZ_KEYS if k not in data]
            if missing:
                raise ProfileError(f"{source}: not a mocker profile: no {', '.join(missing)}")
            arrays = {k: np.asarray(data[k], dtype=np.float64) for k in _NPZ_KEYS}
    except (OSError, ValueError) as exc:
        if isinstance(exc, ProfileError):
            raise
        raise ProfileError(f"{source}: not an NPZ file ({exc})") from None
    itl = arrays["decode_itl"]
    if itl.ndim != 2:
        raise ProfileError(f"{source}: decode_itl must be 2-D (active KV x context length), not {itl.ndim}-D")
    return TimingProfile(source, arrays["prefill_isl"].tolist(), arrays["prefill_ttft_ms"].tolist(),
                         arrays["decode_active_kv_tokens"].tolist(), arrays["decode_context_length"].tolist(),
                         itl.tolist())


_CSV_HEADER = ("phase", "tokens", "context_length", "ms")


def _from_csv(source: str) -> TimingProfile:
    import csv  # (only a CSV profile needs it)

    prefill: list[tuple[float, float]] = []
    decode: dict[tuple[float, float], float] = {}
    try:
        with open(source, encoding="utf-8", newline="") as fh:
            reader = csv.reader(fh)
            header = [h.strip() for h in next(reader, [])]
            if tuple(header[:4]) != _CSV_HEADER:
                raise ProfileError(f"{source}:1: the header must be {','.join(_CSV_HEADER)}, got {','.join(header)!r}")
            for row in reader:
                line = reader.line_num
                if not row or not "".join(row).strip():
                    continue
                if len(row) < 4:
                    raise ProfileError(f"{source}:{line}: {len(row)} columns, expected 4")
                phase = row[0].strip()
                tokens = _number(source, line, "tokens", row[1])
                ms = _number(source, line, "ms", row[3])
                if phase == "prefill":
                    prefill.append((tokens, ms))
                elif phase == "decode":
                    context = _number(source, line, "context_length", row[2])
                    if (tokens, context) in decode:
                        raise ProfileError(f"{source}:{line}: a second decode point at tokens {tokens:g}, "
                                           f"context_length {context:g}")
                    decode[(tokens, context)] = ms
                else:
                    raise ProfileError(f"{source}:{line}: field 'phase': must be prefill or decode, got {phase!r}")
    except UnicodeDecodeError:
        raise ProfileError(f"{source}: not a UTF-8 text file") from None
    except csv.Error as exc:
        raise ProfileError(f"{source}: not CSV ({exc})") from None
    prefill.sort()
    xs = sorted({k[0] for k in decode})
    ys = sorted({k[1] for k in decode})
    missing = [(x, y) for x in xs for y in ys if (x, y) not in decode]
    if missing:
        x, y = missing[0]
        raise ProfileError(f"{source}: the decode points are not a full grid: none at tokens {x:g}, "
                           f"context_length {y:g} ({len(missing)} missing)")
    return TimingProfile(source, [p[0] for p in prefill], [p[1] for p in prefill], xs, ys,
                         [[decode[(x, y)] for y in ys] for x in xs])


def _number(source: str, line: int, field: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value - value == 0.0 or value < 0:
        raise ProfileError(f"{source}:{line}: field '{field}': must be a non-negative number, got {text.strip()!r}")
    return value
