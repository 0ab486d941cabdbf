"""A tiny deterministic stand-in for the mock engines, to test the runtime on its own.

Why: the runtime's rules (deferral while busy, zero-delay transfers, stale-transfer pruning,
cleanup order, time cap, dead ends) should be testable without depending on the vLLM/SGLang
models' timing.  This worker honours the ``EngineWorker`` contract with fixed pass costs:

* prefill: every queued request is prefilled in one pass of ``prefill_ms``; each emits its
  single token and becomes held (SourceHeld at pass end);
* decode: a reservation succeeds at once when the worker is idle (else at the next pass end)
  if ``capacity`` allows; activation queues the request; every decode pass of ``decode_ms``
  emits one token for each active request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from dmocker.handoff import DestinationReserved, SourceHeld
from dmocker.handoff import HandoffId
from dmocker.engines.interface import (
    Admission,
    CommandEffects,
    CommandResult,
    EngineArgs,
    EngineCommandError,
    EngineRequest,
    EngineWorker,
    LifecycleEvent,
    PassCompletion,
    PassPlan,
)


@dataclass
class FakeWorker(EngineWorker):
    args: EngineArgs
    worker_idx: int
    prefill_ms: float = 10.0
    decode_ms: float = 5.0
    capacity: int | None = None  # decode: max prompt tokens reserved at once
    reject_prompts_over: int | None = None  # prefill: reject (at pass end) longer prompts
    never_reserve: bool = False
    clock: Callable[[], float] | None = None
    log: list[tuple[str, int, float]] = field(default_factory=list)
    _busy: bool = False
    _queued: list[EngineRequest] = field(default_factory=list)
    _pending_hold: dict[int, EngineRequest] = field(default_factory=dict)
    _held: dict[int, EngineRequest] = field(default_factory=dict)
    _dest_pending: list[EngineRequest] = field(default_factory=list)
    _reserved: dict[int, EngineRequest] = field(default_factory=dict)
    _active: dict[int, list[int]] = field(default_factory=dict)  # rid -> [emitted, max]
    _admit_next: list[int] = field(default_factory=list)
    _running: list[EngineRequest] = field(default_factory=list)
    _decoding: list[int] = field(default_factory=list)
    _end: float = 0.0
    _now: float = 0.0
    _used: int = 0

    def _t(self) -> float:
        return self.clock() if self.clock is not None else self._now

    @property
    def busy(self) -> bool:
        return self._busy

    def has_work(self) -> bool:
        return bool(self._queued or self._held or self._pending_hold or self._dest_pending or self._reserved or self._active)

    def is_drained(self) -> bool:
        return not self.has_work() and not self._busy

    # ---- source -----------------------------------------------------------
    def submit(self, request: EngineRequest) -> CommandEffects:
        raise EngineCommandError("the fake worker serves handoffs only")

    def submit_handoff_prefill(self, handoff_id: HandoffId, request: EngineRequest) -> CommandEffects:
        self.log.append(("submit", request.request_id, self._t()))
        self._queued.append(request)
        self._pending_hold[request.request_id] = request
        return CommandEffects(CommandResult.SUBMITTED)

    def release_source(self, handoff_id: HandoffId) -> CommandEffects:
        assert not self._busy, "release while busy"
        rid = int(handoff_id)  # type: ignore[call-overload]
        self.log.append(("release", rid, self._t()))
        if self._held.pop(rid, None) is not None or self._pending_hold.pop(rid, None) is not None:
            return CommandEffects(CommandResult.APPLIED)
        return CommandEffects(CommandResult.NOOP)

    def cancel_source(self, handoff_id: HandoffId) -> CommandEffects:
        assert not self._busy, "cancel while busy"
        rid = int(handoff_id)  # type: ignore[call-overload]
        self.log.append(("cancel_source", rid, self._t()))
        self._queued = [r for r in self._queued if r.request_id != rid]
        if self._held.pop(rid, None) is not None or self._pending_hold.pop(rid, None) is not None:
            return CommandEffects(CommandResult.APPLIED)
        return CommandEffects(CommandResult.NOOP)

    # ---- destination ------------------------------------------------------
    def _retry(self) -> tuple[LifecycleEvent, ...]:
        out: list[LifecycleEvent] = []
        while self._dest_pending and not self.never_reserve:
            r = self._dest_pending[0]
            if self.capacity is not None and self._used + r.input_length > self.capacity:
                break
            self._dest_pending.pop(0)
            self._used += r.input_length
            self._reserved[r.request_id] = r
            out.append(DestinationReserved(r.request_id, r.input_length))
        return tuple(out)

    def reserve_destination(self, handoff_id: HandoffId, request: EngineRequest) -> CommandEffects:
        if self.capacity is not None and request.input_length > self.capacity:
            raise EngineCommandError(f"prompt of {request.input_length} tokens exceeds the pool ({self.capacity})")
        self.log.append(("reserve", request.request_id, self._t()))
        self._dest_pending.append(request)
        return CommandEffects(CommandResult.ACCEPTED, self._retry() if not self._busy else ())

    def activate_destination(self, handoff_id: HandoffId) -> CommandEffects:
        assert not self._busy, "activate while busy"
        rid = int(handoff_id)  # type: ignore[call-overload]
        self.log.append(("activate", rid, self._t()))
        r = self._reserved.pop(rid, None)
        if r is None:
            return CommandEffects(CommandResult.NOOP)
        self._active[rid] = [0, r.max_output_tokens]
        self._admit_next.append(rid)
        self._used -= r.input_length
        return CommandEffects(CommandResult.APPLIED, self._retry())

    def cancel_destination(self, handoff_id: HandoffId) -> CommandEffects:
        assert not self._busy, "cancel while busy"
        rid = int(handoff_id)  # type: ignore[call-overload]
        self.log.append(("cancel_destination", rid, self._t()))
        before = len(self._dest_pending)
        self._dest_pending = [r for r in self._dest_pending if r.request_id != rid]
        hit = before != len(self._dest_pending)
        r = self._reserved.pop(rid, None)
        if r is not None:
            self._used -= r.input_length
            hit = True
        if self._active.pop(rid, None) is not None:
            hit = True
            self._admit_next = [x for x in self._admit_next if x != rid]
        return CommandEffects(CommandResult.APPLIED if hit else CommandResult.NOOP)

    # ---- passes -------------------------------------------------------------
    def split_run(self, now_ms: float, started: bool) -> tuple[float, float] | None:
        return None  # never computes bulk runs

    def start_pass(self, now_ms: float, bulk: bool = False) -> PassPlan | None:
        assert not self._busy
        self._now = now_ms
        if self.args.worker_type.value == "prefill":
            if not self._queued:
                return None
            self._running, self._queued = self._queued, []
            self._busy = True
            self._end = now_ms + self.prefill_ms
            return PassPlan(now_ms, self._end, tuple(Admission(r.request_id, 0) for r in self._running))
        if not self._active:
            return None
        admissions = tuple(Admission(rid, 0) for rid in self._admit_next)
        self._admit_next = []
        self._decoding = sorted(self._active)
        self._busy = True
        self._end = now_ms + self.decode_ms
        return PassPlan(now_ms, self._end, admissions)

    def finish_pass(self) -> PassCompletion:
        assert self._busy
        self._busy = False
        self._now = self._end
        if self.args.worker_type.value == "prefill":
            rejected: list[int] = []
            held: list[LifecycleEvent] = []
            emitted: list[int] = []
            for r in self._running:
                if r.request_id not in self._pending_hold:
                    continue  # canceled meanwhile
                if self.reject_prompts_over is not None and r.input_length > self.reject_prompts_over:
                    rejected.append(r.request_id)
                    del self._pending_hold[r.request_id]
                    continue
                emitted.append(r.request_id)
                self._held[r.request_id] = self._pending_hold.pop(r.request_id)
                held.append(SourceHeld(r.request_id, self.args.transfer_timing(r.input_length)))
            self._running = []
            ids = np.array(emitted, dtype=np.int64)
            return PassCompletion(self._end, emitted=ids, finished=tuple(emitted), rejected=tuple(rejected), lifecycle=tuple(held))
        emitted_d: list[int] = []
        finished: list[int] = []
        for rid in self._decoding:
            st = self._active.get(rid)
            if st is None:
                continue
            st[0] += 1
            emitted_d.append(rid)
            if st[0] >= st[1]:
                finished.append(rid)
                del self._active[rid]
        self._decoding = []
        return PassCompletion(
            self._end,
            emitted=np.array(emitted_d, dtype=np.int64),
            finished=tuple(finished),
            lifecycle=self._retry(),
        )
