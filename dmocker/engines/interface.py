"""The contract between the replay runtime and the mock engines (one worker = one simulated GPU).

The runtime (``dmocker.replay.runtime``) codes against this module only; the vLLM and SGLang
workers implement :class:`EngineWorker` (and :class:`WorkerProbes`).  Build workers with
:func:`dmocker.engines.registry.make_worker`.

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

Value classes
-------------
The values crossing this boundary are built once or more per pass: ``@final`` dataclasses with
``Final`` fields (read-only) and an explicit ``__init__``, which the compiled build turns into a
direct constructor (the generated one would stay interpreted); ``dataclass`` still supplies
``__eq__``, ``__hash__`` and ``__repr__``.  The workload's ``Turn``, ``SessionStart`` and
``ReadyTurn`` follow the same pattern.

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
from abc import abstractmethod
from array import array
from dataclasses import dataclass
from typing import Final, TypeAlias, Union, final

from mypy_extensions import mypyc_attr, trait

import numpy as np
import numpy.typing as npt

from dmocker.handoff import DestinationReserved, HandoffId, SourceHeld

from .engine_args import DecodeKvAccounting, EngineArgs, WorkerType
from .errors import EngineCommandError

__all__ = [
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
    "BatchDelta",
    "EngineWorker",
    "WorkerProbes",
    "IdArray",
    "empty_ids",
    "ids_array",
    "ids_copy",
]

IdArray: TypeAlias = npt.NDArray[np.int64]
"""A 1-D int64 array of request ids."""

_EMPTY_IDS: IdArray = np.zeros(0, dtype=np.int64)
_EMPTY_IDS.setflags(write=False)


def empty_ids() -> IdArray:
    """A shared, read-only empty id array (cheap default for passes that emit nothing)."""
    return _EMPTY_IDS


_NP_ARRAY: Final = np.array  # (looked up once, not per call)
_FROMBUFFER: Final = np.frombuffer
_INT64_DTYPE: Final = np.dtype(np.int64)  # (a dtype instance: a dtype class is converted per call)


def ids_array(ids: list[int]) -> IdArray:
    """The ids as a new int64 array (:func:`empty_ids` when there are none)."""
    return _NP_ARRAY(ids, _INT64_DTYPE) if ids else _EMPTY_IDS


def ids_copy(ids: array[int]) -> IdArray:
    """A new int64 array of an ``array('q')`` of ids (one buffer copy), even when empty.

    A view of a slice (the copy, which nobody else holds), where ``np.array(ids)`` would first
    inspect the buffer's format to choose a dtype."""
    return _FROMBUFFER(ids[:], _INT64_DTYPE)


@final
@dataclass(init=False, slots=True, unsafe_hash=True)
class EngineRequest:
    """One request as an engine sees it.

    ``block_hashes`` are the chained hashes of the prompt's full engine blocks, in order
    (``len == input_length // block_size``; anything else is an EngineCommandError).  Pass the
    *original* request to both pools: the prefill worker itself applies
    ``min(max_output_tokens, 1)`` on ``submit_handoff_prefill`` (as the reference's runtime), and the decode
    worker generates all ``max_output_tokens`` after activation.
    """

    request_id: Final[int]
    input_length: Final[int]
    max_output_tokens: Final[int]
    block_hashes: Final[tuple[int, ...]]

    def __init__(self, request_id: int, input_length: int, max_output_tokens: int,
                 block_hashes: tuple[int, ...] = ()) -> None:
        self.request_id = request_id
        self.input_length = input_length
        self.max_output_tokens = max_output_tokens
        self.block_hashes = block_hashes


class CommandResult(enum.Enum):
    """What a command did (the runtime maps these to coordinator outcomes one to one)."""

    SUBMITTED = "Submitted"
    ACCEPTED = "Accepted"
    APPLIED = "Applied"
    NOOP = "Noop"


@final
@dataclass(init=False, slots=True, unsafe_hash=True)
class KvStored:
    """Blocks that became visible in this worker's prefix cache (first copy of each hash)."""

    block_hashes: Final[tuple[int, ...]]

    def __init__(self, block_hashes: tuple[int, ...]) -> None:
        self.block_hashes = block_hashes


@final
@dataclass(init=False, slots=True, unsafe_hash=True)
class KvRemoved:
    """Blocks whose last cached copy left this worker (eviction)."""

    block_hashes: Final[tuple[int, ...]]

    def __init__(self, block_hashes: tuple[int, ...]) -> None:
        self.block_hashes = block_hashes


KvEvent: TypeAlias = Union[KvStored, KvRemoved]
LifecycleEvent: TypeAlias = Union[SourceHeld, DestinationReserved]


@final
@dataclass(init=False, slots=True, unsafe_hash=True)
class CommandEffects:
    """The immediate result of a command.

    ``lifecycle`` may hold DestinationReserved facts from the destination retry that an idle
    ReserveDestination or any Applied command triggers.  ``kv_events`` (only when the worker was
    built with ``record_kv_events=True``) are what the command itself changed in the cache — the
    conformance fixture counts Stored here per command (reserve: 0, activate: > 0).
    """

    result: Final[CommandResult]
    lifecycle: Final[tuple[LifecycleEvent, ...]]
    kv_events: Final[tuple[KvEvent, ...]]

    def __init__(self, result: CommandResult, lifecycle: tuple[LifecycleEvent, ...] = (),
                 kv_events: tuple[KvEvent, ...] = ()) -> None:
        self.result = result
        self.lifecycle = lifecycle
        self.kv_events = kv_events


@final
@dataclass(init=False, slots=True, unsafe_hash=True)
class Admission:
    """A request admitted into the running batch at pass start (collector: *_admit_ms).

    ``reused_input_tokens`` is the prefix-cache hit (0 for an activated destination request,
    whose prompt arrived by transfer).
    """

    request_id: Final[int]
    reused_input_tokens: Final[int]

    def __init__(self, request_id: int, reused_input_tokens: int) -> None:
        self.request_id = request_id
        self.reused_input_tokens = reused_input_tokens


@final
@dataclass(init=False, slots=True, unsafe_hash=True)
class PassPlan:
    """What a started pass is known to do at its start time."""

    start_ms: Final[float]
    end_ms: Final[float]
    admissions: Final[tuple[Admission, ...]]
    # vLLM: the cache changes this pass makes (Stored / Removed), visible at pass start.
    # Always empty for SGLang, whose pass events are visible at pass end (PassCompletion).
    pass_start_kv_events: Final[tuple[KvEvent, ...]]
    prefill_tokens: Final[int]  # uncached prompt tokens computed in this pass (telemetry)
    decode_tokens: Final[int]  # requests decoded in this pass (telemetry)
    # A bulk decode run (``start_pass(now, bulk=True)``): the start of its last pass, which
    # orders its completion among same-time completions as the per-pass simulation would.
    last_start_ms: Final[float | None]

    def __init__(self, start_ms: float, end_ms: float, admissions: tuple[Admission, ...] = (),
                 pass_start_kv_events: tuple[KvEvent, ...] = (), prefill_tokens: int = 0,
                 decode_tokens: int = 0, last_start_ms: float | None = None) -> None:
        self.start_ms = start_ms
        self.end_ms = end_ms
        self.admissions = admissions
        self.pass_start_kv_events = pass_start_kv_events
        self.prefill_tokens = prefill_tokens
        self.decode_tokens = decode_tokens
        self.last_start_ms = last_start_ms


@final
@dataclass(init=False, slots=True, eq=False)
class BatchDelta:
    """How a decode worker's emitted ids changed between two arrays it handed out: ``ids`` is
    ``base`` without ``left`` and with ``joined`` (as sets).  Engines attach it to a completion
    whose batch changed, on the paths that know the change anyway (SGLang's lazy batch, vLLM's
    lockstep batch), so the collector updates the joiners and leavers only, not the whole
    batch.  Optional: a consumer may ignore it, and uses it only when ``base`` is the array
    it saw last from that worker and ``ids`` the one it is given."""

    base: Final[IdArray]
    ids: Final[IdArray]
    joined: Final[list[int]]
    left: Final[list[int]]

    def __init__(self, base: IdArray, ids: IdArray, joined: list[int], left: list[int]) -> None:
        self.base = base
        self.ids = ids
        self.joined = joined
        self.left = left


@final
@dataclass(init=False, slots=True, eq=False)
class PassCompletion:
    """The deferred effects of a pass, stamped at its end time.

    ``emitted``: request ids that produced one token each at ``end_ms`` (a prefill worker's one
    token included; it is hidden from the decode-only report but counts as a source output
    signal).  ``finished``: ids whose generation ended normally (subset of ``emitted`` except for
    ``max_output_tokens == 0``), a tuple like ``rejected``: a handful per pass, read one by one.
    ``rejected``: ids refused by the engine (never ran; terminal).
    On a prefill worker a finished id is *not* free: its KV is held until release/cancel.
    ``lifecycle``: SourceHeld (prefill finishing), DestinationReserved (end-of-pass retry).
    ``kv_events`` (workers built with ``record_kv_events``): SGLang's pass events (visible at
    pass end), then, for both engines, Removed events of the end-of-pass destination retry.
    ``run_times``: set when the completion covers a bulk decode *run* of ``n >= 2`` passes
    (``start_pass(..., bulk=True)``): the end time of each pass, ascending, the last being
    ``end_ms``.  Every id of ``emitted`` emitted one token at each of them; nothing finished or
    was rejected before the last.  ``delta``: how ``emitted`` differs from this worker's
    previous emitted array, when the engine knows (:class:`BatchDelta`).
    """

    end_ms: Final[float]
    emitted: Final[IdArray]
    finished: Final[tuple[int, ...]]
    rejected: Final[tuple[int, ...]]
    lifecycle: Final[tuple[LifecycleEvent, ...]]
    kv_events: Final[tuple[KvEvent, ...]]
    run_times: Final[npt.NDArray[np.float64] | None]
    delta: Final[BatchDelta | None]

    def __init__(self, end_ms: float, emitted: IdArray = _EMPTY_IDS, finished: tuple[int, ...] = (),
                 rejected: tuple[int, ...] = (), lifecycle: tuple[LifecycleEvent, ...] = (),
                 kv_events: tuple[KvEvent, ...] = (), run_times: npt.NDArray[np.float64] | None = None,
                 delta: BatchDelta | None = None) -> None:
        self.end_ms = end_ms
        self.emitted = emitted
        self.finished = finished
        self.rejected = rejected
        self.lifecycle = lifecycle
        self.kv_events = kv_events
        self.run_times = run_times
        self.delta = delta


@mypyc_attr(allow_interpreted_subclasses=True)
class EngineWorker:
    """One simulated GPU worker (vLLM or SGLang mock): the surface the replay runtime drives.

    An interface: every method is abstract (mypy refuses to instantiate a class that leaves one out).
    A base class rather than a ``typing.Protocol`` because the runtime is compiled and calls
    these methods a dozen times a request: through a base class it calls the worker's methods
    directly, through a protocol by a Python attribute lookup each time.  Interpreted
    subclasses are allowed, so a worker written in plain Python (a test double, a user's
    engine model) derives from it too.
    """

    args: EngineArgs
    worker_idx: int

    @property
    @abstractmethod
    def busy(self) -> bool:
        """True between ``start_pass`` and ``finish_pass``."""

    @abstractmethod
    def has_work(self) -> bool:
        """Anything queued, running, held, reserved or pending (not drained)."""

    @abstractmethod
    def is_drained(self) -> bool:
        """Nothing queued, running, held, reserved or pending, and not busy."""

    # --- a plain request (an aggregated worker) ---
    @abstractmethod
    def submit(self, request: EngineRequest) -> CommandEffects:
        """SUBMITTED: the request is prefilled and decoded here, its KV freed when it ends; may be
        applied while busy (it only joins the waiting queue).  Raises EngineCommandError for a
        malformed request or a live request id."""

    # --- commands (source side) ---
    @abstractmethod
    def submit_handoff_prefill(self, handoff_id: HandoffId, request: EngineRequest) -> CommandEffects:
        """SUBMITTED; raises EngineCommandError for a duplicate live request id."""

    @abstractmethod
    def release_source(self, handoff_id: HandoffId) -> CommandEffects:
        """APPLIED (held or pending) or NOOP (unknown). Call only while not busy."""

    @abstractmethod
    def cancel_source(self, handoff_id: HandoffId) -> CommandEffects:
        """APPLIED or NOOP. Call only while not busy."""

    # --- commands (destination side) ---
    @abstractmethod
    def reserve_destination(self, handoff_id: HandoffId, request: EngineRequest) -> CommandEffects:
        """ACCEPTED (reservation happens now if idle and possible, else on a later retry);
        raises EngineCommandError if the prompt can never fit this worker's pool."""

    @abstractmethod
    def activate_destination(self, handoff_id: HandoffId) -> CommandEffects:
        """APPLIED if reserved (KV committed, request queued to decode), else NOOP."""

    @abstractmethod
    def cancel_destination(self, handoff_id: HandoffId) -> CommandEffects:
        """APPLIED (pending, reserved or active request dropped) or NOOP."""

    # --- passes ---
    @abstractmethod
    def start_pass(self, now_ms: float, bulk: bool = False) -> PassPlan | None:
        """Compute the next pass eagerly, or None when nothing can progress now.

        ``bulk``: the worker may compute a whole *run* of decode passes at once when every
        pass until the batch next changes is determined (see ``PassCompletion.run_times``);
        the caller must then call :meth:`split_run` before anything else touches the worker.
        A run goes on until the batch itself changes (through the next completion, or
        as far as the pool surely covers): what reaches the worker from outside cuts it then.
        """

    @abstractmethod
    def split_run(self, now_ms: float, started: bool) -> tuple[float, float] | None:
        """Cut a bulk run in flight where the per-pass simulation would be at ``now_ms``.

        The run is cut after the pass in flight at ``now_ms``; when ``now_ms`` is exactly the
        end of one of its passes, after that pass if ``started`` is False (the next pass has
        not started yet at this point of the caller's time step) and after the next one
        otherwise.  Returns ``(end_ms, start of the last pass)`` of what is left, or None when
        no run is in flight or nothing changed.  The completion may now be due at ``now_ms``.
        """

    @abstractmethod
    def finish_pass(self) -> PassCompletion:
        """Apply the end of the running pass (must be busy) and return its deferred effects."""


@trait
class WorkerProbes:
    """What the mock engines report besides the contract: the probes of the replay's time
    series, its leak check and the planner's worker snapshots.  Optional for a worker; the
    replay skips workers without them."""

    @abstractmethod
    def queue_depth(self) -> int:
        """Requests queued here, not running: waiting for a pass, or accepted destinations not
        yet reserved."""

    @abstractmethod
    def kv_usage(self, at_ms: float | None = None) -> float:
        """Share of this worker's KV blocks in use.

        ``at_ms`` (a time not before the runtime's clock, within a bulk decode run in flight):
        the share the per-pass simulation holds then -- a run takes its passes' blocks at its
        start, the per-pass simulation pass by pass (:meth:`run_blocks_ahead`)."""

    @abstractmethod
    def run_blocks_ahead(self, at_ms: float) -> int:
        """KV blocks the bulk run in flight holds beyond the per-pass simulation at ``at_ms``
        (the blocks of its passes not started by then, an exact pass end counting the next pass
        as started); 0 without a run.  Changes nothing."""

    @abstractmethod
    def kv_in_use(self) -> tuple[int, list[int]]:
        """(KV blocks in use, ids of the requests still registered here), for leak checks: a
        source still held or a destination still reserved shows up in both; (0, []) once
        drained."""
