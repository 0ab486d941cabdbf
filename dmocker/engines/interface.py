"""The contract between the replay runtime and the mock engines (one worker = one simulated GPU).

The runtime (``dmocker.replay.runtime``) codes against this module only; the vLLM and SGLang
workers implement :class:`EngineWorker`.  Build workers with :func:`make_worker`.

Life of a worker, as the runtime sees it
----------------------------------------
* **Commands** (the handoff coordinator's actions, executed by the runtime):
  ``submit_handoff_prefill``, ``release_source``, ``cancel_source`` (prefill pool) and
  ``reserve_destination``, ``activate_destination``, ``cancel_destination`` (decode pool).  Each
  returns :class:`CommandEffects` right away (result, lifecycle events, KV events) or raises
  :class:`EngineCommandError` (the runtime turns it into ``Outcome(FAILED, str(err))``).
  The runtime must **defer** activate/release/cancels while ``worker.busy`` (as the reference's runtime);
  submit and reserve may be applied while busy (they only touch queues).
* **Passes** (eager, as the reference computes them): when a worker is idle, ``start_pass(now_ms)`` either returns
  ``None`` (nothing can progress now; retry after the next command or pass completion anywhere on
  this worker) or computes the *whole* pass at once and returns a :class:`PassPlan`.  The worker
  is then ``busy`` until the runtime calls ``finish_pass()`` at ``plan.end_ms`` (possibly the same
  timestamp: zero-duration passes exist, e.g. a fully cached prompt on a prefill worker).
  ``finish_pass()`` returns the deferred effects (:class:`PassCompletion`): tokens, finished and
  rejected requests, SourceHeld / DestinationReserved facts and PassEnd KV events, including the
  destination retry that runs at every pass completion.
* Engine state is already post-pass while busy; commands applied meanwhile touch only queued or
  post-pass state, exactly as in the reference.

Per-token output is vectorised: :class:`PassCompletion` carries numpy arrays of request ids, one
entry per emitted token (each request emits at most one token per pass), so a collector can update
per-request arrays with fancy indexing and no Python object is created per token.

KV events (``record_kv_events=True``)
------------------------------------
Each cache change is reported exactly once, where it becomes visible: command effects
(activation Stored, reservation evictions as Removed; a reservation never stores), vLLM pass
start (``PassPlan.pass_start_kv_events``), SGLang pass end and every end-of-pass retry
(``PassCompletion.kv_events``).  That is what the one-request conformance fixture counts:
Stored in ReserveDestination effects must be 0, in ActivateDestination effects > 0.  Blocks of
generated tokens are never stored (their hashes would be random and unmatchable).

Block hashes
------------
Requests carry the chained hashes of their *full* engine blocks (ints in ``[0, 2**59)``), never
token lists; see :mod:`dmocker.engines.hashing` for how they are derived from Mooncake
``hash_ids`` (``block_hashes_from_trace``) or from explicit tokens (``block_hashes_from_tokens``).
The partial tail block of a prompt has no hash: it is always private.  Both pools of one replay
must use the same block size, so a source hash equals the destination hash of the same prefix.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Protocol, TypeAlias, Union

import numpy as np
import numpy.typing as npt

from dmocker._frozen import fast_frozen_init

from dmocker.handoff import (
    DestinationReserved,
    HandoffId,
    SourceHeld,
    TransferTiming,
    TransferTimingMode,
)

__all__ = [
    "Backend",
    "WorkerType",
    "DecodeKvAccounting",
    "EngineArgs",
    "EngineRequest",
    "CommandResult",
    "CommandEffects",
    "EngineCommandError",
    "KvStored",
    "KvRemoved",
    "KvEvent",
    "LifecycleEvent",
    "Admission",
    "PassPlan",
    "PassCompletion",
    "EngineWorker",
    "IdArray",
    "make_worker",
]

IdArray: TypeAlias = npt.NDArray[np.int64]
"""A 1-D int64 array of request ids."""

_EMPTY_IDS: IdArray = np.zeros(0, dtype=np.int64)
_EMPTY_IDS.setflags(write=False)


def empty_ids() -> IdArray:
    """A shared, read-only empty id array (cheap default for passes that emit nothing)."""
    return _EMPTY_IDS


class Backend(enum.Enum):
    """Which engine's scheduler and KV manager to mimic."""

    VLLM = "vllm"
    SGLANG = "sglang"

    @classmethod
    def parse(cls, text: str) -> Backend:
        for b in cls:
            if text.strip().lower() == b.value:
                return b
        raise ValueError(f"unknown engine {text!r}: expected 'vllm' or 'sglang'")


class WorkerType(enum.Enum):
    """Role in the disaggregated pair; prefill workers spend no decode time, decode no prefill."""

    PREFILL = "prefill"
    DECODE = "decode"

    @classmethod
    def parse(cls, text: str) -> WorkerType:
        for w in cls:
            if text.strip().lower() == w.value:
                return w
        raise ValueError(f"unknown worker_type {text!r}: expected 'prefill' or 'decode'")


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


# Reference defaults (``MockEngineArgs`` in ``ai-dynamo/dynamo`` ``lib/mocker/src/common/protocols.rs``).
DEFAULT_BLOCK_SIZE = {Backend.VLLM: 64, Backend.SGLANG: 1}


@dataclass(frozen=True, slots=True)
class EngineArgs:
    """Engine arguments, named after the reference's ``MockEngineArgs``, with its defaults.

    ``block_size=None`` means the backend default (vLLM 64, SGLang 1); read ``page_tokens`` for the
    resolved value.  For SGLang the page size is the block size.  Timing is the polynomial model
    unless both ``fixed_prefill_ms`` and ``fixed_decode_ms`` are given (then a pass costs
    ``fixed_prefill_ms`` if it schedules any uncached prompt token plus ``fixed_decode_ms`` if it
    decodes, each still divided by the speed-up ratios).  ``decode_kv_accounting`` picks what
    the vLLM decode model counts as active KV (default: Dynamo 1.6.1's summed sequence
    lengths).  Call :meth:`validate` (``make_worker`` does) to get a ``ValueError`` naming the
    offending field.
    """

    backend: Backend = Backend.VLLM
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
        return self.block_size if self.block_size is not None else DEFAULT_BLOCK_SIZE[self.backend]

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

        if not isinstance(self.backend, Backend):
            raise bad("backend", "expected Backend.VLLM or Backend.SGLANG")
        if not isinstance(self.worker_type, WorkerType):
            raise bad("worker_type", "expected WorkerType.PREFILL or WorkerType.DECODE")
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


@fast_frozen_init  # built per request or per pass on the replay's hot path
@dataclass(frozen=True, slots=True)
class EngineRequest:
    """One request as an engine sees it.

    ``block_hashes`` are the chained hashes of the prompt's full engine blocks, in order
    (``len == input_length // block_size``; anything else is an EngineCommandError).  Pass the
    *original* request to both pools: the prefill worker itself applies
    ``min(max_output_tokens, 1)`` on ``submit_handoff_prefill`` (as the reference's runtime), and the decode
    worker generates all ``max_output_tokens`` after activation.
    """

    request_id: int
    input_length: int
    max_output_tokens: int
    block_hashes: tuple[int, ...] = ()


class CommandResult(enum.Enum):
    """What a command did (the runtime maps these to coordinator outcomes one to one)."""

    SUBMITTED = "Submitted"
    ACCEPTED = "Accepted"
    APPLIED = "Applied"
    NOOP = "Noop"


class EngineCommandError(ValueError):
    """A command the engine refuses (e.g. a prompt larger than the destination pool)."""


@dataclass(frozen=True, slots=True)
class KvStored:
    """Blocks that became visible in this worker's prefix cache (first copy of each hash)."""

    block_hashes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class KvRemoved:
    """Blocks whose last cached copy left this worker (eviction)."""

    block_hashes: tuple[int, ...]


KvEvent: TypeAlias = Union[KvStored, KvRemoved]
LifecycleEvent: TypeAlias = Union[SourceHeld, DestinationReserved]


@fast_frozen_init  # built per request or per pass on the replay's hot path
@dataclass(frozen=True, slots=True)
class CommandEffects:
    """The immediate result of a command.

    ``lifecycle`` may hold DestinationReserved facts from the destination retry that an idle
    ReserveDestination or any Applied command triggers.  ``kv_events`` (only when the worker was
    built with ``record_kv_events=True``) are what the command itself changed in the cache — the
    conformance fixture counts Stored here per command (reserve: 0, activate: > 0).
    """

    result: CommandResult
    lifecycle: tuple[LifecycleEvent, ...] = ()
    kv_events: tuple[KvEvent, ...] = ()


@fast_frozen_init  # built per request or per pass on the replay's hot path
@dataclass(frozen=True, slots=True)
class Admission:
    """A request admitted into the running batch at pass start (collector: *_admit_ms).

    ``reused_input_tokens`` is the prefix-cache hit (0 for an activated destination request,
    whose prompt arrived by transfer).
    """

    request_id: int
    reused_input_tokens: int


@fast_frozen_init  # built per request or per pass on the replay's hot path
@dataclass(frozen=True, slots=True)
class PassPlan:
    """What a started pass is known to do at its start time."""

    start_ms: float
    end_ms: float
    admissions: tuple[Admission, ...] = ()
    # vLLM: the cache changes this pass makes (Stored / Removed), visible at pass start.
    # Always empty for SGLang, whose pass events are visible at pass end (PassCompletion).
    pass_start_kv_events: tuple[KvEvent, ...] = ()
    prefill_tokens: int = 0  # uncached prompt tokens computed in this pass (telemetry)
    decode_tokens: int = 0  # requests decoded in this pass (telemetry)
    # A bulk decode run (``start_pass(now, bulk=True)``): the start of its last pass, which
    # orders its completion among same-time completions as the per-pass simulation would.
    last_start_ms: float | None = None


@fast_frozen_init  # built per request or per pass on the replay's hot path
@dataclass(frozen=True, slots=True)
class PassCompletion:
    """The deferred effects of a pass, stamped at its end time.

    ``emitted``: request ids that produced one token each at ``end_ms`` (a prefill worker's one
    token included; it is hidden from the decode-only report but counts as a source output
    signal).  ``finished``: ids whose generation ended normally (subset of ``emitted`` except for
    ``max_output_tokens == 0``).  ``rejected``: ids refused by the engine (never ran; terminal).
    On a prefill worker a finished id is *not* free: its KV is held until release/cancel.
    ``lifecycle``: SourceHeld (prefill finishing), DestinationReserved (end-of-pass retry).
    ``kv_events`` (workers built with ``record_kv_events``): SGLang's pass events (visible at
    pass end), then, for both engines, Removed events of the end-of-pass destination retry.
    ``run_times``: set when the completion covers a bulk decode *run* of ``n >= 2`` passes
    (``start_pass(..., bulk=True)``): the end time of each pass, ascending, the last being
    ``end_ms``.  Every id of ``emitted`` emitted one token at each of them; nothing finished or
    was rejected before the last.
    """

    end_ms: float
    emitted: IdArray = field(default_factory=empty_ids)
    finished: IdArray = field(default_factory=empty_ids)
    rejected: tuple[int, ...] = ()
    lifecycle: tuple[LifecycleEvent, ...] = ()
    kv_events: tuple[KvEvent, ...] = ()
    run_times: npt.NDArray[np.float64] | None = None


class EngineWorker(Protocol):
    """One simulated GPU worker (vLLM or SGLang mock)."""

    args: EngineArgs
    worker_idx: int

    @property
    def busy(self) -> bool:
        """True between ``start_pass`` and ``finish_pass``."""
        ...

    def has_work(self) -> bool:
        """Anything queued, running, held, reserved or pending (not drained)."""
        ...

    def is_drained(self) -> bool:
        """Nothing queued, running, held, reserved or pending, and not busy."""
        ...

    # --- commands (source side) ---
    def submit_handoff_prefill(self, handoff_id: HandoffId, request: EngineRequest) -> CommandEffects:
        """SUBMITTED; raises EngineCommandError for a duplicate live request id."""
        ...

    def release_source(self, handoff_id: HandoffId) -> CommandEffects:
        """APPLIED (held or pending) or NOOP (unknown). Call only while not busy."""
        ...

    def cancel_source(self, handoff_id: HandoffId) -> CommandEffects:
        """APPLIED or NOOP. Call only while not busy."""
        ...

    # --- commands (destination side) ---
    def reserve_destination(self, handoff_id: HandoffId, request: EngineRequest) -> CommandEffects:
        """ACCEPTED (reservation happens now if idle and possible, else on a later retry);
        raises EngineCommandError if the prompt can never fit this worker's pool."""
        ...

    def activate_destination(self, handoff_id: HandoffId) -> CommandEffects:
        """APPLIED if reserved (KV committed, request queued to decode), else NOOP."""
        ...

    def cancel_destination(self, handoff_id: HandoffId) -> CommandEffects:
        """APPLIED (pending, reserved or active request dropped) or NOOP."""
        ...

    # --- passes ---
    def start_pass(self, now_ms: float, bulk: bool = False) -> PassPlan | None:
        """Compute the next pass eagerly, or None when nothing can progress now.

        ``bulk``: the worker may compute a whole *run* of decode passes at once when every
        pass until the batch next changes is determined (see ``PassCompletion.run_times``);
        the caller must then call :meth:`split_run` before anything else touches the worker.
        A run goes on until the batch itself changes (through the next completion, or
        as far as the pool surely covers): what reaches the worker from outside cuts it then.
        """
        ...

    def split_run(self, now_ms: float, started: bool) -> tuple[float, float] | None:
        """Cut a bulk run in flight where the per-pass simulation would be at ``now_ms``.

        The run is cut after the pass in flight at ``now_ms``; when ``now_ms`` is exactly the
        end of one of its passes, after that pass if ``started`` is False (the next pass has
        not started yet at this point of the caller's time step) and after the next one
        otherwise.  Returns ``(end_ms, start of the last pass)`` of what is left, or None when
        no run is in flight or nothing changed.  The completion may now be due at ``now_ms``.
        """
        ...

    def finish_pass(self) -> PassCompletion:
        """Apply the end of the running pass (must be busy) and return its deferred effects."""
        ...


def make_worker(args: EngineArgs, worker_idx: int = 0, *, record_kv_events: bool = False) -> EngineWorker:
    """Build a worker for ``args.backend`` after validating the args.

    ``record_kv_events`` turns on KV Stored/Removed capture (prefix-router feed, conformance);
    off, the hot path skips building event tuples.
    """
    args.validate()
    if args.backend is Backend.VLLM:
        from dmocker.engines.vllm import VllmWorker

        return VllmWorker(args, worker_idx, record_kv_events=record_kv_events)
    from dmocker.engines.sglang import SglangWorker

    return SglangWorker(args, worker_idx, record_kv_events=record_kv_events)
