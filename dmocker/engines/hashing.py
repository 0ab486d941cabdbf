"""Deterministic chained block hashes for engine prefix caching (never Python's ``hash()``).

Why chained: a KV block is reusable only if *everything before it* is identical too, so the hash
of block ``i`` must identify the whole prefix ``0..i`` (vLLM's "sequence hash").

Definition (all arithmetic mod 2**64, ``mix`` = the SplitMix64 finaliser):

* **local hash** of a block: for Mooncake rows (``block_hashes_from_trace``) whose trace block size
  is a multiple of the engine block size, engine block ``b`` lies inside trace block
  ``j = b // r`` (``r = trace_block_size // block_size``) at sub-block ``s = b % r`` and
  ``local = mix(hash_id_j * K1 + s + 1)``.  Otherwise an engine block spans several trace blocks
  and its local hash folds the covered pieces ``(hash_id, offset within the trace block, count)``.
  For explicit tokens (``block_hashes_from_tokens``) the local hash folds the token values.
* **chain**: ``S_i = sum_{j <= i} local_j * B**(i - j)`` (so ``S_i = B*S_{i-1} + local_i``),
  computed vectorised as ``B**i * cumsum(local_j * B**-j)`` (B odd, so invertible mod 2**64),
  then ``hash_i = mix(S_i ^ ((i + 1) * K2))`` so that prefixes of different lengths differ.

The published hash keeps the low 59 bits of that value (:data:`HASH_BITS`).  Why: CPython stores
ints in 30-bit digits, and a value below 2**60 is a two-digit int where a full 64-bit one needs
three; every block of every request is looked up, inserted and compared in the block pools'
dicts many times, and two-digit keys make each of those cheaper.  Bit 59 is left clear so that
the ids of generated-token blocks (from ``2**59`` up, :mod:`block_pool`) can never equal a
prompt block's hash and stay two-digit as well.

Collisions are as unlikely as for any 59-bit hash of pseudo-random inputs (a pool holds at most
``num_gpu_blocks`` hashes, so a false prefix hit has probability ``num_gpu_blocks / 2**59`` per
lookup: below 1e-13 at the default 16,384 blocks); the simulation does not need cryptographic
strength, only determinism across runs and ``PYTHONHASHSEED`` values.
"""

from __future__ import annotations

from typing import Final, Sequence

import numpy as np
import numpy.typing as npt

__all__ = [
    "HASH_BITS",
    "block_hashes_from_trace",
    "block_hashes_from_trace_batch",
    "block_hashes_from_tokens",
    "chain_local_hashes",
]

U64 = npt.NDArray[np.uint64]
_MASK = (1 << 64) - 1
_K1 = np.uint64(0x9E3779B97F4A7C15)
_K2 = np.uint64(0xD6E8FEB86659FD93)
_B = 0x100000001B3  # odd: the FNV-64 prime
_B_INV = pow(_B, -1, 1 << 64)

HASH_BITS: Final = 59
_HASH_MASK = np.uint64((1 << HASH_BITS) - 1)

_pow_cache: list[U64] = []


def _powers(n: int) -> tuple[U64, U64]:
    """``B**i`` and ``B**-i`` for i < n (grown on demand, shared).

    Running products in uint64, which wrap modulo 2**64 exactly as the definition does (one
    vectorised pass instead of a Python loop over big integers)."""
    if not _pow_cache or len(_pow_cache[0]) < n:
        size = max(n, 2 * len(_pow_cache[0]) if _pow_cache else 1024)
        fwd = np.full(size, _B, dtype=np.uint64)
        inv = np.full(size, _B_INV, dtype=np.uint64)
        fwd[0] = inv[0] = 1
        np.multiply.accumulate(fwd, out=fwd)
        np.multiply.accumulate(inv, out=inv)
        _pow_cache[:] = [fwd, inv]
    return _pow_cache[0][:n], _pow_cache[1][:n]


_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_ONE = np.uint64(1)


def _mix(x: U64) -> U64:
    """SplitMix64 finaliser, elementwise (uint64 array arithmetic wraps without warnings).

    In place on one new array with one temporary (the hashed arrays hold a whole batch of
    prompts' blocks, where every pass over memory counts)."""
    t = x >> _S30
    z = x ^ t
    z *= _M1
    np.right_shift(z, _S27, out=t)
    z ^= t
    z *= _M2
    np.right_shift(z, _S31, out=t)
    z ^= t
    return z


def chain_local_hashes(local: U64) -> U64:
    """Chained prefix hashes from per-block local hashes (see module docstring)."""
    n = len(local)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    fwd, inv = _powers(n)
    s = np.cumsum(local * inv, dtype=np.uint64) * fwd
    return _mix(s ^ _len_salt(n)) & _HASH_MASK


_salt_cache: list[U64] = []


def _len_salt(n: int) -> U64:
    """``(i + 1) * K2`` for i < n (shared, grown on demand)."""
    if not _salt_cache or len(_salt_cache[0]) < n:
        size = max(n, 2 * len(_salt_cache[0]) if _salt_cache else 1024)
        _salt_cache[:] = [np.arange(1, size + 1, dtype=np.uint64) * _K2]
    return _salt_cache[0][:n]


def block_hashes_from_trace(
    hash_ids: Sequence[int], input_length: int, trace_block_size: int, block_size: int
) -> tuple[int, ...]:
    """Chained hashes of the full engine blocks of a Mooncake prompt.

    Token ``p`` of the prompt belongs to ``hash_ids[p // trace_block_size]``; the caller has
    already clamped ``input_length`` to ``len(hash_ids) * trace_block_size``.
    """
    if block_size <= 0 or trace_block_size <= 0:
        raise ValueError("block sizes must be positive")
    n_blocks = input_length // block_size
    if n_blocks == 0:
        return ()
    if n_blocks * block_size > len(hash_ids) * trace_block_size:
        raise ValueError("input_length exceeds len(hash_ids) * trace_block_size")
    if trace_block_size % block_size == 0:
        r = trace_block_size // block_size
        n_ids = -(-n_blocks // r)
        ids = np.fromiter(hash_ids[:n_ids], dtype=np.uint64, count=n_ids)
        local = _mix(np.repeat(ids * _K1, r)[:n_blocks] + _sub_plus_one(r, n_blocks))
    else:
        vals: list[int] = []
        for blk in range(n_blocks):
            start, end = blk * block_size, (blk + 1) * block_size
            h = 0
            p = start
            while p < end:
                j, off = divmod(p, trace_block_size)
                cnt = min(end - p, trace_block_size - off)
                piece = np.array(
                    [(int(hash_ids[j]) * 0x9E3779B97F4A7C15 + off * 0x10001 + cnt + h) & _MASK],
                    dtype=np.uint64,
                )
                h = int(_mix(piece)[0])
                p += cnt
            vals.append(h)
        local = np.array(vals, dtype=np.uint64)
    return tuple(chain_local_hashes(local).tolist())


_sub_cache: dict[int, U64] = {}


def _sub_plus_one(r: int, n: int) -> U64:
    """``(b % r) + 1`` for b < n as uint64 (cached per r, grown on demand)."""
    arr = _sub_cache.get(r)
    if arr is None or len(arr) < n:
        size = max(n, 2 * len(arr) if arr is not None else 4096)
        arr = (np.arange(size, dtype=np.uint64) % np.uint64(r)) + _ONE
        _sub_cache[r] = arr
    return arr[:n]


def block_hashes_from_trace_batch(
    hash_ids: Sequence[Sequence[int]],
    input_lengths: Sequence[int],
    trace_block_size: int,
    block_size: int,
) -> list[tuple[int, ...]]:
    """``block_hashes_from_trace`` for many rows at once (same values, much cheaper per row).

    Vectorised over the concatenation of all rows: with ``C_g = cumsum(local_g * B**-g)`` over
    the global block index ``g``, a row starting at ``g0`` has ``S = B**g * (C_g - C_{g0-1})``.
    Local hashes are computed on an (ids x sub-blocks) grid and per-row values are spread with
    ``repeat``, so no pass divides or gathers by a per-block row index (a batch holds tens of
    thousands of blocks; every pass over them counts).  Falls back to the per-row function when
    ``trace_block_size % block_size != 0``.
    """
    if block_size <= 0 or trace_block_size <= 0:
        raise ValueError("block sizes must be positive")
    if len(hash_ids) != len(input_lengths):
        raise ValueError("hash_ids and input_lengths differ in length")
    if trace_block_size % block_size != 0:
        return [
            block_hashes_from_trace(h, n, trace_block_size, block_size)
            for h, n in zip(hash_ids, input_lengths)
        ]
    r = trace_block_size // block_size
    counts_l = [n // block_size for n in input_lengths]
    n_ids = [-(-c // r) for c in counts_l]  # trace blocks each row's engine blocks lie in
    for h, k in zip(hash_ids, n_ids):
        if k > len(h):
            raise ValueError("input_length exceeds len(hash_ids) * trace_block_size")
    total = sum(counts_l)
    if total == 0:
        return [() for _ in input_lengths]
    counts = np.array(counts_l, dtype=np.int64)
    ids: list[int] = []
    for h, k in zip(hash_ids, n_ids):
        if k == len(h):
            ids.extend(h)  # (the usual case: no slice)
        else:
            ids.extend(h[:k])
    used = np.fromiter(ids, dtype=np.uint64, count=len(ids))
    # local hashes over whole trace blocks (every sub-block s of each used id), row after row;
    # a row whose blocks end inside a trace block has sub-blocks past its end: dropped
    grid = (used * _K1)[:, None] + _sub_plus_one(r, r)[None, :]
    local = _mix(grid.ravel())
    excess = np.array(n_ids, dtype=np.int64) * r - counts
    if excess.any():
        skip = np.cumsum(excess) - excess  # sub-blocks dropped before each row
        local = local[np.arange(total, dtype=np.int64) + np.repeat(skip, counts)]
    fwd, inv = _powers(total)
    c = np.cumsum(local * inv, dtype=np.uint64)  # C_g over the global block index g
    blk_start = np.cumsum(counts) - counts  # g0 of each row
    base = c[np.maximum(blk_start - 1, 0)]
    base[blk_start == 0] = 0
    s = c - np.repeat(base, counts)
    s *= fwd  # B**g * (C_g - C_{g0-1})
    # the length salt (b + 1) * K2 of block b = g - g0 of its row: (g + 1) * K2 - g0 * K2
    s ^= _len_salt(total) - np.repeat(blk_start.astype(np.uint64) * _K2, counts)
    hashed = _mix(s)
    hashed &= _HASH_MASK
    # each row's hashes from its own slice: one list of all of them (millions of pointers on a
    # long trace) would be built only to be copied out again row by row
    result: list[tuple[int, ...]] = []
    pos = 0
    for c_ in counts_l:
        row: list[int] = hashed[pos:pos + c_].tolist()
        result.append(tuple(row))
        pos += c_
    return result


def block_hashes_from_tokens(tokens: Sequence[int], block_size: int) -> tuple[int, ...]:
    """Chained hashes of the full blocks of an explicit token list (fixtures, tests)."""
    if block_size <= 0:
        raise ValueError("block_size must be positive")
    n_blocks = len(tokens) // block_size
    if n_blocks == 0:
        return ()
    tok = np.asarray(tokens[: n_blocks * block_size], dtype=np.uint64).reshape(n_blocks, block_size)
    h = np.full(n_blocks, 0x51ED270B27A8E3C5, dtype=np.uint64)
    for c in range(block_size):
        h = _mix(h ^ (tok[:, c] * _K1 + np.uint64(c + 1)))
    return tuple(chain_local_hashes(h).tolist())
