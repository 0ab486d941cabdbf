"""A seeded synthetic workload generator (Poisson arrivals, uniform lengths, shared prefixes).

Why a generator and not a file: the bench and the built-in default run need large, exactly
reproducible workloads without shipping data.  Everything is drawn from one
``numpy.random.Generator(PCG64(seed))`` in a fixed order -- session by session, as the replay
asks for them -- so the same arguments give the same requests on every machine and under any
``PYTHONHASHSEED``.  Sessions are produced lazily; only sessions not yet admitted are kept.

Shape:

* first turns arrive as a Poisson process of ``rate`` requests/s (exponential gaps); the first
  session arrives at 0;
* ``isl`` and ``osl`` are uniform integers in ``mean * (1 +- spread)``;
* each session belongs to one of ``prefix_groups`` groups (uniformly drawn); the first
  ``round(blocks * prefix_ratio)`` blocks of its prompt are the group's shared prefix blocks;
* a session has ``turns`` turns; turn ``k > 0`` repeats the whole previous prompt plus room for
  the previous answer and a fresh user message (new blocks), after ``turn_delay_ms`` of think time.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from .types import NO_NEXT, SessionStart, Turn, WorkloadError

__all__ = ["SyntheticSpec", "SyntheticWorkload"]


@dataclass(frozen=True, slots=True)
class SyntheticSpec:
    """Parameters of the synthetic workload; ``validate`` names the offending field."""

    requests: int = 200
    rate: float = 20.0
    isl_mean: int = 2000
    osl_mean: int = 200
    spread: float = 0.5
    prefix_groups: int = 8
    prefix_ratio: float = 0.5
    turns: int = 1
    turn_delay_ms: float = 0.0
    seed: int = 0
    trace_block_size: int = 512

    def validate(self) -> SyntheticSpec:
        def bad(name: str, why: str) -> WorkloadError:
            return WorkloadError(f"{why}, got {getattr(self, name)!r}", field=name)

        def is_int(v: object) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        def is_num(v: object) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

        for name in ("requests", "isl_mean", "osl_mean", "turns", "trace_block_size"):
            if not is_int(getattr(self, name)) or getattr(self, name) <= 0:
                raise bad(name, "must be a positive integer")
        if not is_int(self.prefix_groups) or self.prefix_groups < 0:
            raise bad("prefix_groups", "must be an integer >= 0")
        if not is_int(self.seed) or self.seed < 0:
            raise bad("seed", "must be an integer >= 0")
        if not is_num(self.rate) or self.rate <= 0:
            raise bad("rate", "must be a finite number > 0 (requests per second)")
        if not is_num(self.spread) or not 0 <= self.spread < 1:
            raise bad("spread", "must be a number in [0, 1)")
        if not is_num(self.prefix_ratio) or not 0 <= self.prefix_ratio <= 1:
            raise bad("prefix_ratio", "must be a number in [0, 1]")
        if not is_num(self.turn_delay_ms) or self.turn_delay_ms < 0:
            raise bad("turn_delay_ms", "must be a finite number >= 0")
        if self.requests % self.turns != 0:
            raise WorkloadError(
                f"requests ({self.requests}) must be a multiple of turns ({self.turns})",
                field="requests",
            )
        return self


class SyntheticWorkload:
    """Implements the ``Workload`` protocol for a :class:`SyntheticSpec`."""

    def __init__(self, spec: SyntheticSpec) -> None:
        self._spec = spec.validate()
        self._rng = np.random.Generator(np.random.PCG64(spec.seed))
        self._pending: dict[int, Turn] = {}
        self._next_hash = 0
        self._group_prefix: list[list[int]] = [[] for _ in range(spec.prefix_groups)]
        self._sessions = spec.requests // spec.turns
        self._pos = self._CHUNK  # force a refill on first use
        self._gaps: list[float] = []
        self._groups: list[int] = []
        self._isl: list[int] = []
        self._osl: list[int] = []

    @property
    def spec(self) -> SyntheticSpec:
        return self._spec

    @property
    def trace_block_size(self) -> int:
        return self._spec.trace_block_size

    @property
    def num_requests(self) -> int:
        return self._spec.requests

    _CHUNK = 4096

    def _bounds(self, mean: int) -> tuple[int, int]:
        lo = max(1, int(math.floor(mean * (1 - self._spec.spread))))
        hi = max(lo, int(math.ceil(mean * (1 + self._spec.spread))))
        return lo, hi

    def _refill(self) -> None:
        """Draw the next chunk of random numbers (fixed order: gaps, groups, isl, osl).

        Drawing in chunks keeps the generator vectorised; the values depend only on the seed
        and the chunk index, so the workload is identical however it is consumed.
        """
        spec = self._spec
        n = self._CHUNK
        rng = self._rng
        self._gaps = rng.exponential(1000.0 / spec.rate, n).tolist()
        self._groups = (
            rng.integers(0, spec.prefix_groups, n).tolist() if spec.prefix_groups > 0 else [-1] * n
        )
        k = n * spec.turns
        lo, hi = self._bounds(spec.isl_mean)
        self._isl = rng.integers(lo, hi + 1, k).tolist()
        lo, hi = self._bounds(spec.osl_mean)
        self._osl = rng.integers(lo, hi + 1, k).tolist()
        self._pos = 0

    def _fresh(self, n: int) -> list[int]:
        start = self._next_hash
        self._next_hash += n
        return list(range(start, start + n))

    def _prefix(self, group: int, n: int) -> list[int]:
        if group < 0 or n == 0:
            return []
        blocks = self._group_prefix[group]
        if len(blocks) < n:
            blocks.extend(self._fresh(n - len(blocks)))
        return blocks[:n]

    def _make_session(self, session: int) -> float:
        """Materialise all turns of ``session``; returns its inter-arrival gap (ms)."""
        spec = self._spec
        bs = spec.trace_block_size
        if self._pos >= self._CHUNK:
            self._refill()
        i = self._pos
        self._pos = i + 1
        group = self._groups[i]
        base = session * spec.turns
        hash_ids: list[int] = []
        input_length = 0
        previous_output = 0
        for k in range(spec.turns):
            isl = self._isl[i * spec.turns + k]
            osl = self._osl[i * spec.turns + k]
            if k == 0:
                input_length = isl
                blocks = -(-isl // bs)
                shared = int(round(blocks * spec.prefix_ratio)) if group >= 0 else 0
                hash_ids = self._prefix(group, shared) + self._fresh(blocks - shared)
            else:
                input_length = input_length + previous_output + isl
                blocks = -(-input_length // bs)
                hash_ids = hash_ids + self._fresh(blocks - len(hash_ids))
            self._pending[base + k] = Turn(
                request_id=base + k,
                input_length=input_length,
                output_length=osl,
                hash_ids=tuple(hash_ids),
                delay_ms=0.0 if k == 0 else float(spec.turn_delay_ms),
                next_request_id=base + k + 1 if k + 1 < spec.turns else NO_NEXT,
                session_index=session,
                turn_index=k,
            )
            previous_output = osl
        return float(self._gaps[i])

    def session_starts(self) -> Iterator[SessionStart]:
        t = 0.0
        for s in range(self._sessions):
            gap = self._make_session(s)
            if s > 0:
                t += gap
            yield SessionStart(t, s * self._spec.turns)

    def delay_of(self, request_id: int) -> float:
        return self._pending[request_id].delay_ms

    def load(self, request_id: int) -> Turn:
        return self._pending.pop(request_id)
