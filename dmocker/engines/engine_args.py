"""Engine arguments (:class:`EngineArgs`) and the closed sets they pick from; re-exported by
:mod:`dmocker.engines.interface`.

Why their own module: the engine interface is compiled by mypyc (``setup.py``), and a compiled
class checks its attribute types itself, raising a bare ``TypeError`` on a wrongly typed value
before :meth:`EngineArgs.validate` can name the field.  Kept here, interpreted, ``EngineArgs``
accepts any value and ``validate`` reports it field by field.

Which engines exist, and their default block sizes, is the handoff spec's ``engines`` table
(``spec/handoff.json``), read here by name: the engine modules that implement them
(:mod:`dmocker.engines.registry`) build workers from these arguments, so the arguments cannot
ask those modules without an import circle.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from dmocker.handoff import EngineEntry, TransferTiming, TransferTimingMode, load_spec

__all__ = ["WorkerType", "DecodeKvAccounting", "EngineArgs", "mock_engines"]


def mock_engines() -> tuple[EngineEntry, ...]:
    """The engines the spec gives a default block size: the ones dmocker mocks."""
    return tuple(e for e in load_spec().engines if e.default_block_size is not None)


class WorkerType(enum.Enum):
    """A worker's role: in a disaggregated pair prefill workers spend no decode time and decode
    workers no prefill time; an aggregated worker prefills and decodes, and is charged both."""

    PREFILL = "prefill"
    DECODE = "decode"
    AGGREGATED = "aggregated"

    @classmethod
    def parse(cls, text: str) -> WorkerType:
        for w in cls:
            if text.strip().lower() == w.value:
                return w
        raise ValueError(f"unknown worker_type {text!r}: expected 'prefill', 'decode' or 'aggregated'")


class DecodeKvAccounting(enum.Enum):
    """What the vLLM decode-time model takes as "active KV tokens".

    LOGICAL: the summed sequence lengths of the requests decoded in the pass (shared prefix
    blocks counted once per request).  This is what Dynamo 1.6.1 does: replays match it to
    the last digit, and it is the default.  RESIDENT: distinct active blocks x block size (the
    newer mocker sources); shared prefixes then make decode cheaper.  SGLang always uses the
    logical sum.
    """

    LOGICAL = "logical"
    RESIDENT = "resident"


@dataclass(frozen=True, slots=True)
class EngineArgs:
    """Engine arguments, named after the reference's ``MockEngineArgs``, with its defaults.

    ``engine`` names the engine to mimic (one of :func:`mock_engines`, lower case).
    ``block_size=None`` means the engine's default (the spec's ``default_block_size``: vLLM 64,
    SGLang 1); read ``page_tokens`` for the resolved value.  For SGLang the page size is the block size.  Timing is the polynomial model
    unless both ``fixed_prefill_ms`` and ``fixed_decode_ms`` are given (then a pass costs
    ``fixed_prefill_ms`` if it schedules any uncached prompt token plus ``fixed_decode_ms`` if it
    decodes, each still divided by the speed-up ratios).  ``decode_kv_accounting`` picks what
    the vLLM decode model counts as active KV (default: Dynamo 1.6.1's summed sequence
    lengths).  Call :meth:`validate` (``make_worker`` does) to get a ``ValueError`` naming the
    offending field.
    """

    engine: str = "vllm"
    worker_type: WorkerType = WorkerType.DECODE
    block_size: int | None = None
    num_gpu_blocks: int = 16384
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int | None = None
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    speedup_ratio: float = 1.0
    decode_speedup_ratio: float = 1.0
    kv_bytes_per_token: int | None = None
    kv_transfer_bandwidth: float | None = None  # decimal GB/s
    kv_transfer_timing_mode: TransferTimingMode = TransferTimingMode.FULL_PROMPT
    fixed_prefill_ms: float | None = None
    fixed_decode_ms: float | None = None
    timing_profile: str | None = None  # a measured profile's file (dmocker/engines/profile.py)
    decode_kv_accounting: DecodeKvAccounting = DecodeKvAccounting.LOGICAL
    # SGLang knobs (ignored by vLLM).
    max_prefill_tokens: int = 16384
    chunked_prefill_size: int = 8192
    schedule_conservativeness: float = 1.0
    clip_max_new_tokens: int = 4096
    new_token_ratio_decay_steps: int = 600
    min_new_token_ratio_factor: float = 0.14

    @property
    def page_tokens(self) -> int:
        """The resolved block (= SGLang page) size in tokens."""
        if self.block_size is not None:
            return self.block_size
        block = load_spec().engine(self.engine).default_block_size
        if block is None:
            raise ValueError(f"engine argument engine={self.engine!r}: dmocker has no mock of this engine, "
                             "so no default block_size")
        return block

    @property
    def total_kv_tokens(self) -> int:
        return self.num_gpu_blocks * self.page_tokens

    @property
    def fixed_timing(self) -> bool:
        return self.fixed_prefill_ms is not None and self.fixed_decode_ms is not None

    def validate(self) -> EngineArgs:
        """Raise ``ValueError`` naming the field on a bad value; return self for chaining."""

        def bad(name: str, why: str) -> ValueError:
            return ValueError(f"engine argument {name}={getattr(self, name)!r}: {why}")

        mocks = [e.name for e in mock_engines()]
        if self.engine not in mocks:
            raise bad("engine", "expected one of " + ", ".join(repr(name) for name in mocks))
        if not isinstance(self.worker_type, WorkerType):
            raise bad("worker_type", "expected WorkerType.PREFILL, WorkerType.DECODE or WorkerType.AGGREGATED")
        for name in ("num_gpu_blocks", "max_num_seqs", "max_num_batched_tokens",
                     "max_prefill_tokens", "chunked_prefill_size", "clip_max_new_tokens",
                     "new_token_ratio_decay_steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise bad(name, "must be a positive integer")
        if self.block_size is not None and (
            isinstance(self.block_size, bool) or not isinstance(self.block_size, int)
            or self.block_size <= 0
        ):
            raise bad("block_size", "must be a positive integer")
        if self.max_model_len is not None and (
            isinstance(self.max_model_len, bool) or not isinstance(self.max_model_len, int)
            or self.max_model_len <= 0
        ):
            raise bad("max_model_len", "must be a positive integer or None (no limit)")
        for name in ("speedup_ratio", "decode_speedup_ratio", "schedule_conservativeness",
                     "min_new_token_ratio_factor"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise bad(name, "must be a finite number")
        if self.schedule_conservativeness <= 0:
            raise bad("schedule_conservativeness", "must be > 0")
        if self.kv_bytes_per_token is not None and (
            isinstance(self.kv_bytes_per_token, bool)
            or not isinstance(self.kv_bytes_per_token, int) or self.kv_bytes_per_token < 0
        ):
            raise bad("kv_bytes_per_token", "must be a non-negative integer or None")
        if self.kv_transfer_bandwidth is not None and (
            isinstance(self.kv_transfer_bandwidth, bool)
            or not isinstance(self.kv_transfer_bandwidth, (int, float))
            or not math.isfinite(self.kv_transfer_bandwidth) or self.kv_transfer_bandwidth < 0
        ):
            raise bad("kv_transfer_bandwidth", "must be a finite number >= 0 (GB/s) or None")
        if not isinstance(self.decode_kv_accounting, DecodeKvAccounting):
            raise bad("decode_kv_accounting", "expected a DecodeKvAccounting")
        if not isinstance(self.kv_transfer_timing_mode, TransferTimingMode):
            raise bad("kv_transfer_timing_mode", "expected a TransferTimingMode")
        for name in ("fixed_prefill_ms", "fixed_decode_ms"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float))
                or not math.isfinite(value) or value < 0
            ):
                raise bad(name, "must be a finite number >= 0 or None")
        if (self.fixed_prefill_ms is None) != (self.fixed_decode_ms is None):
            raise bad("fixed_prefill_ms", "fixed timing needs both fixed_prefill_ms and fixed_decode_ms")
        if self.timing_profile is not None:
            if not isinstance(self.timing_profile, str):
                raise bad("timing_profile", "must be the path of a profile file or None")
            if self.fixed_timing:
                raise bad("timing_profile", "give a timing profile or fixed timing, not both")
            from .profile import ProfileError, load_profile  # (read only when a profile is given)

            try:
                load_profile(self.timing_profile)
            except ProfileError as exc:
                raise bad("timing_profile", str(exc)) from None
        return self

    def transfer_timing(self, prompt_tokens: int) -> TransferTiming:
        """The SourceHeld timing a prefill worker with these args reports (its own link settings)."""
        return TransferTiming(
            mode=self.kv_transfer_timing_mode,
            full_prompt_tokens=prompt_tokens,
            kv_bytes_per_token=self.kv_bytes_per_token,
            bandwidth_gb_s=(
                float(self.kv_transfer_bandwidth) if self.kv_transfer_bandwidth is not None else None
            ),
        )
