"""The handoff bookkeeping both engine mocks share: held sources and destination reservations.

Why a base class: the vLLM and SGLang mocks schedule differently, but what a *handoff* does to
a worker is the same in both (``ai-dynamo/dynamo`` ``lib/mocker/src/scheduler/source_holds.rs``):
a source registers, is held after its prefill and is released or canceled; a destination is
accepted into a FIFO of pending reservations, reserved when the head fits (retried once per
capacity generation), activated or canceled.  Keeping those rules here once means the two mocks cannot drift apart on them.

Each engine supplies its request objects (a subclass of :class:`HandoffRequest`), its status members and five hooks: :meth:`_new_request`,
:meth:`_remove` (take a request out wherever it is, freeing its KV), :meth:`_free_kv`,
:meth:`_mark_reserved` and :meth:`_materialize_destination`, plus optionally
:meth:`_before_release` and :meth:`_reservation_gate`.
"""

from __future__ import annotations

import enum
from collections import deque
from typing import Generic, Hashable, TypeVar

from dmocker.handoff import DestinationReserved, SourceHeld, TransferTiming
from dmocker.engines.block_pool import BlockPool
from dmocker.engines.common import ceil_div, kv_events, remove_pending
from dmocker.engines.interface import (
    CommandEffects,
    CommandResult,
    EngineCommandError,
    EngineRequest,
    EngineWorker,
    KvEvent,
    LifecycleEvent,
)

__all__ = ["HandoffRequest", "HandoffWorkerBase", "NOOP", "SUBMITTED", "APPLIED"]

# shared immutable results (frozen values): most commands return one of these
NOOP = CommandEffects(CommandResult.NOOP)
SUBMITTED = CommandEffects(CommandResult.SUBMITTED)
APPLIED = CommandEffects(CommandResult.APPLIED)


class HandoffRequest:
    """What the shared bookkeeping reads and writes on an engine's request objects: the base
    of both engines' request classes, which set these fields in their ``__init__``.

    A compiled class, not a ``Protocol``: the bookkeeping below is generic over the request
    type, and mypyc erases a type variable to its bound, so with a protocol as the bound every
    read or write of these fields was a generic attribute lookup (~160 instructions, not a few).
    """

    __slots__ = ("rid", "handoff", "prompt", "hashes", "cached", "status", "source", "dest")

    rid: int
    handoff: Hashable
    prompt: int
    hashes: list[int]  # (a list: the block pool indexes it natively)
    cached: list[int]  # cached block hashes held by reference, in block order
    status: enum.Enum  # the engine's own status enum
    source: bool  # a registered handoff source (prefill side)
    dest: bool  # an activated handoff destination (decode side)


R = TypeVar("R", bound=HandoffRequest)


class HandoffWorkerBase(EngineWorker, Generic[R]):
    """Registries and commands of the handoff surface, for request objects of type ``R``.

    Subclasses set every attribute below in their ``__init__`` (``_held``, ``_waiting_status``,
    ``_pending_status``: their status members for "held source", "waiting" and "accepted, not
    reserved"; ``_block``: tokens per block or page; ``_unit``: its name in error messages;
    ``_link``: ``args.transfer_timing(0)``, the worker's link settings for :meth:`_source_held`).
    """

    pool: BlockPool
    _block: int
    _unit: str
    _caching: bool
    _record: bool
    _busy: bool
    _gen: int  # capacity generation: bumps whenever capacity may have been freed
    _live: dict[int, R]
    _waiting: deque[R]
    _sources: dict[Hashable, R]  # pending or held sources by handoff id
    _pending: deque[tuple[R, int]]  # (request, last attempted generation), FIFO
    _pending_ids: set[Hashable]
    _reserved: dict[Hashable, R]
    _active_dest: dict[Hashable, R]
    _held: enum.Enum
    _waiting_status: enum.Enum
    _pending_status: enum.Enum
    _link: TransferTiming
    # engine arguments read every pass, copied into native fields (``args`` is interpreted)
    _max_seqs: int  # args.max_num_seqs
    _mbt: int  # args.max_num_batched_tokens
    _decode_worker: bool  # args.worker_type is WorkerType.DECODE

    def _source_held(self, handoff: Hashable, prompt_tokens: int) -> SourceHeld:
        """The fact a finished source reports: ``args.transfer_timing(prompt_tokens)``, built from
        the link settings read once (a compiled constructor call per request, not a call into
        the interpreted engine arguments)."""
        link = self._link
        timing = TransferTiming(link.mode, prompt_tokens, link.kv_bytes_per_token, link.bandwidth_gb_s,
                                link.state_bytes)
        return SourceHeld(handoff, timing)

    # --- hooks -----------------------------------------------------------------------------------

    def _new_request(self, request: EngineRequest, maxout: int, handoff: Hashable, status: enum.Enum) -> R:
        raise NotImplementedError

    def _remove(self, r: R) -> None:
        """Take ``r`` out wherever it is (between passes), freeing its KV."""
        raise NotImplementedError

    def _free_kv(self, r: R) -> None:
        raise NotImplementedError

    def _mark_reserved(self, head: R, n_blocks: int) -> None:
        """``head`` now holds its reservation (``n_blocks`` blocks, ``head.cached`` its prefix)."""
        raise NotImplementedError

    def _materialize_destination(self, r: R) -> None:
        """An activated reservation: its prompt KV is now present; queue it for decoding."""
        raise NotImplementedError

    def _before_release(self, r: R) -> None:
        """A held source is about to be freed (SGLang publishes its pages to the radix tree)."""

    def _reservation_gate(self, head: R) -> bool:
        """Whether the pending head may be tried now (vLLM: a running slot must be free)."""
        return True

    # --- protocol surface ------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self._busy

    def is_drained(self) -> bool:
        return not self._busy and not self._live

    def queue_depth(self) -> int:
        """Requests queued here, not running: waiting for a pass, or accepted destinations not
        yet reserved (a time-series probe; engines with more queues add them)."""
        return len(self._waiting) + len(self._pending)

    def kv_usage(self, at_ms: float | None = None) -> float:
        """Share of this worker's KV blocks in use (a time-series probe).

        ``at_ms`` (a time not before the runtime's clock, within a bulk decode run in flight):
        the share the per-pass simulation holds then -- a run takes its passes' blocks at its
        start, the per-pass simulation pass by pass (:meth:`run_blocks_ahead`)."""
        pool = self.pool
        used = pool.num_active_blocks
        if at_ms is not None:
            used -= self.run_blocks_ahead(at_ms)
        return used / pool.total if pool.total else 0.0

    def run_blocks_ahead(self, at_ms: float) -> int:
        """KV blocks the bulk run in flight holds beyond the per-pass simulation at ``at_ms``
        (the blocks of its passes not started by then, an exact pass end counting the next pass
        as started); 0 without a run.  A probe: changes nothing."""
        return 0

    def kv_in_use(self) -> tuple[int, list[int]]:
        """(KV blocks in use, ids of the requests still registered here), for leak checks: a
        source still held or a destination still reserved shows up in both; (0, []) once drained."""
        return self.pool.num_active_blocks, sorted(self._live)

    def _validate(self, req: EngineRequest) -> None:
        n = req.input_length
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise EngineCommandError(f"request {req.request_id}: input_length must be a positive integer")
        if req.max_output_tokens < 0:
            raise EngineCommandError(f"request {req.request_id}: max_output_tokens must be >= 0")
        size = self._block
        if len(req.block_hashes) != n // size:
            raise EngineCommandError(
                f"request {req.request_id}: {len(req.block_hashes)} block hashes for {n} tokens at "
                f"{self._unit} {size} (expected {n // size})"
            )

    def _check_new(self, request: EngineRequest) -> None:
        self._validate(request)
        if request.request_id in self._live:
            raise EngineCommandError(f"request {request.request_id} is already active")

    def _enqueue_new(self, request: EngineRequest, maxout: int, handoff: Hashable) -> R:
        r = self._new_request(request, maxout, handoff, self._waiting_status)
        self._live[r.rid] = r
        self._waiting.append(r)
        return r

    def submit_handoff_prefill(self, handoff_id: Hashable, request: EngineRequest) -> CommandEffects:
        self._check_new(request)
        if handoff_id in self._sources:
            raise EngineCommandError(f"handoff {handoff_id!r} is already registered")
        r = self._enqueue_new(request, min(request.max_output_tokens, 1), handoff_id)
        r.source = True
        self._sources[handoff_id] = r
        return SUBMITTED

    def submit(self, request: EngineRequest) -> CommandEffects:
        """Plain (non-handoff) request: aggregated use and tests."""
        self._check_new(request)
        self._enqueue_new(request, request.max_output_tokens, None)
        return SUBMITTED

    def release_source(self, handoff_id: Hashable) -> CommandEffects:
        return self._end_source(handoff_id, cancel=False)

    def cancel_source(self, handoff_id: Hashable) -> CommandEffects:
        return self._end_source(handoff_id, cancel=True)

    def _end_source(self, handoff_id: Hashable, *, cancel: bool) -> CommandEffects:
        r = self._sources.pop(handoff_id, None)
        if r is None:
            return NOOP
        r.source = False
        if r.status is self._held:
            self._before_release(r)
            self._free_kv(r)
            del self._live[r.rid]
            self._gen += 1
        elif cancel:
            self._remove(r)
        # a release of a pending source: the prefill releases itself when it finishes
        return self._after_applied()

    def reserve_destination(self, handoff_id: Hashable, request: EngineRequest) -> CommandEffects:
        self._check_new(request)
        if handoff_id in self._reserved or handoff_id in self._active_dest or handoff_id in self._pending_ids:
            raise EngineCommandError(f"destination handoff {handoff_id!r} is already active")
        if ceil_div(request.input_length, self._block) > self.pool.total:
            raise EngineCommandError("destination prompt exceeds the KV pool capacity")
        r = self._new_request(request, request.max_output_tokens, handoff_id, self._pending_status)
        self._live[r.rid] = r
        self._pending.append((r, -1))
        self._pending_ids.add(handoff_id)
        lifecycle: tuple[LifecycleEvent, ...] = ()
        if not self._busy:
            lifecycle = tuple(self._retry_destinations())
        return CommandEffects(CommandResult.ACCEPTED, lifecycle, self._drain_kv())

    def activate_destination(self, handoff_id: Hashable) -> CommandEffects:
        r = self._reserved.pop(handoff_id, None)
        if r is None:
            return NOOP
        self._materialize_destination(r)
        r.dest = True
        self._active_dest[handoff_id] = r
        return self._after_applied()

    def cancel_destination(self, handoff_id: Hashable) -> CommandEffects:
        if handoff_id in self._pending_ids:
            p = remove_pending(self._pending, self._pending_ids, handoff_id)
            del self._live[p.rid]
            self._gen += 1
            return self._after_applied()
        r = self._reserved.pop(handoff_id, None)
        if r is not None:
            self._free_kv(r)
            del self._live[r.rid]
            self._gen += 1
            return self._after_applied()
        r = self._active_dest.pop(handoff_id, None)
        if r is None:
            return NOOP
        r.dest = False
        self._remove(r)
        return self._after_applied()

    # --- internals -------------------------------------------------------------------------------

    def _after_applied(self) -> CommandEffects:
        lifecycle: tuple[LifecycleEvent, ...] = ()
        if not self._busy and self._pending:
            lifecycle = tuple(self._retry_destinations())
        events = self._drain_kv()
        if not lifecycle and not events:
            return APPLIED
        return CommandEffects(CommandResult.APPLIED, lifecycle, events)

    def _retry_destinations(self) -> list[LifecycleEvent]:
        """Try the head of the pending-destination FIFO once per capacity generation."""
        if not self._pending:
            return []
        gen = self._gen
        head, last = self._pending[0]
        if not self._reservation_gate(head):
            self._pending[0] = (head, gen)
            return []
        if last == gen:
            return []
        self._pending[0] = (head, gen)
        size = self._block
        n_blocks = ceil_div(head.prompt, size)
        pool = self.pool
        n_prefix = 0
        if self._caching and head.hashes:
            n_prefix = pool.match_prefix(head.hashes, len(head.hashes))[0]
        prefix = head.hashes[:n_prefix]
        fresh = n_blocks - n_prefix
        if not pool.claim(prefix, fresh):
            return []
        head.cached = list(prefix)
        self._mark_reserved(head, n_blocks)
        self._pending.popleft()
        self._pending_ids.discard(head.handoff)
        self._reserved[head.handoff] = head
        return [DestinationReserved(head.handoff, fresh * size)]

    def _drain_kv(self) -> tuple[KvEvent, ...]:
        if not self._record:
            return ()
        ev = self.pool.drain_events()
        return kv_events(ev) if ev else ()
