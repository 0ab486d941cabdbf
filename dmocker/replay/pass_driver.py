"""The passes of the replay's workers: starting them, bulk decode runs and their cuts, and
applying completed passes (a layer of :class:`~dmocker.replay.runtime.DisaggRuntime`).

Why apart: this is the engine side of the drain loop, with its own state (bulk runs' pushes
and pass times, the one-by-one stretches after early cuts) and its own rules for ordering
completions within a time step; the drain (``runtime``) only decides when each phase runs.
"""

from __future__ import annotations

import heapq
from typing import Final, cast

from dmocker.handoff import Failed
from dmocker.engines.interface import PassCompletion, PassPlan

from .cluster_control import ClusterControl
from .collector import TerminalStatus
from .events import EventKind, ReplayInvariantError, top_kind, top_time
from .request_state import Phase, RequestState, Stage

__all__ = ["PassDriver"]

_heappop: Final = heapq.heappop  # (a static compiled: no module-dict lookup per pop)
_P: Final = 0  # index of the prefill pool in per-stage tuples
_D: Final = 1  # index of the decode pool
_STAGES: Final[tuple[Stage, ...]] = (Stage.PREFILL, Stage.DECODE)  # (``...``: see RuntimeBase)
_EARLY_CUT_PASSES: Final = 4  # a run cut before this many passes were done was not worth it
_SOLO_MIN: Final = 4  # passes one by one after a first early cut ...
_SOLO_MAX: Final = 64  # ... doubling while cuts stay early, up to this
# A run's start and cut cost O(batch) (the batch's progress is set per request), a lazy pass
# O(joins and leaves): for a batch of n, a run cut before n / 2 passes was not worth it, and
# the one-by-one stretches start at n / 2 passes and may grow to 16 n.
_EARLY_PER_BATCH: Final = 2
_SOLO_MAX_PER_BATCH: Final = 16
_PASS: Final = int(EventKind.PASS_COMPLETION)
_EV_PASS: Final = EventKind.PASS_COMPLETION
# Push ranks of pass completions within one time step, in the drain's order: the first round
# of the first prefill pool phase (+ position), its later rounds, the first round of the first
# decode pool phase (+ position), everything later.
_RANK_P1: Final = 0
_RANK_P2: Final = 1 << 20
_RANK_D1: Final = 1 << 21
_RANK_LATE: Final = 1 << 22
# Enum members bound once (reading one off its class costs ~5x a module global in 3.11).
_PREFILL: Final = Stage.PREFILL
_QUEUED_PREFILL: Final = Phase.QUEUED_PREFILL
_RUNNING_PREFILL: Final = Phase.RUNNING_PREFILL
_READY_DECODE: Final = Phase.READY_DECODE
_RUNNING_DECODE: Final = Phase.RUNNING_DECODE
_COMPLETED: Final = TerminalStatus.COMPLETED
_REJECTED: Final = TerminalStatus.REJECTED


def _any(flags: list[bool]) -> bool:
    """``True in flags`` as a native loop (the ``in`` test is a generic comparison per item;
    the drain asks this of both pools' dirty flags several times a sweep)."""
    for flag in flags:
        if flag:
            return True
    return False


class PassDriver(ClusterControl):
    """Pass driving of :class:`~dmocker.replay.runtime.DisaggRuntime` (a layer).

    Bulk runs that get cut within a few passes cost more than those passes one by one (a run
    start and a cut against a few cheap passes): a decode worker whose run was cut that early
    (before max(4, batch / 2) passes) runs its next passes one by one, for max(4, batch / 2)
    passes, doubling while cuts stay early up to max(64, 16 x batch), and goes back to runs
    after one that lasts.  Speed only: bulk and per-pass replays are identical
    (tests/replay/test_bulk_differential.py)."""

    _run_pass_ms: dict[int, tuple[float, float, int]]  # decode worker -> (run start, pass ms, batch)
    _solo: dict[int, int]  # decode worker -> passes left to run one by one
    _solo_next: dict[int, int]  # decode worker -> length of its next one-by-one stretch

    def _apply_pass_completions(self) -> bool:
        changed = False
        now = self.now_ms
        heap = self._events.raw
        workers = self._workers
        dirty = self._dirty
        deferred = self._deferred
        run_pass_ms = self._run_pass_ms
        while heap and top_time(heap) == now and top_kind(heap) == _PASS:
            stage, idx = cast("tuple[int, int]", _heappop(heap)[5])
            if stage == _D and run_pass_ms and run_pass_ms.pop(idx, None) is not None:
                self._solo_next.pop(idx, None)  # a run that ran to its end: runs pay here
            completion = workers[stage][idx].finish_pass()
            dirty[stage][idx] = True
            if deferred[stage]:
                self._wake_deferred(stage, idx)
            self._process_pass(_STAGES[stage], completion, idx)
            changed = True
        return changed

    def _drive_pool(self, stage: Stage) -> bool:
        changed = False
        # the pool's index by an identity test: ``int(stage)`` is a generic call, and indexing
        # the per-pool tuples with the enum member a generic subscript
        st = _P if stage is _PREFILL else _D
        workers = self._workers[st]
        dirty = self._dirty[st]
        now = self.now_ms
        bulk = self._bulk
        # Completions due together that also started together pop in push order.  A bulk run
        # pushes its completion early, so every push carries its rank within the time step (the
        # _RANK_* phases) and a run the rank its last pass's push would have had: the first
        # round of its pool's phase in the first sweep, where a pass follows its predecessor.
        first = _RANK_P1 if st == _P else _RANK_D1
        rank = _RANK_LATE if self._pools_started else first
        solos = self._solo
        decode = st == _D
        planner = self._planner
        events = self._events  # (called as a method: a native call; a bound-method alias is not)
        progress = True
        while progress:
            progress = False
            for pos, idx in enumerate(self._serving[st]):
                if not dirty[idx]:
                    continue
                dirty[idx] = False
                w = workers[idx]
                if w.busy:
                    continue  # its pass completion marks it dirty again
                solo = decode and solos.get(idx, 0) > 0
                plan = w.start_pass(now, bulk and not solo)
                if plan is None:
                    continue
                if solo:
                    solos[idx] -= 1
                progress = changed = True
                if planner is not None:
                    planner.on_pass(stage, idx, plan)
                if plan.admissions:
                    self._on_pass_start(stage, plan, idx)
                if plan.pass_start_kv_events and self._kv_feed and st == _P:
                    self._routers[_P].on_kv_events(idx, plan.pass_start_kv_events, now)
                end = plan.end_ms
                if end <= now:
                    completion = w.finish_pass()
                    dirty[idx] = True
                    self._wake_deferred(st, idx)
                    self._process_pass(stage, completion, idx)
                else:
                    last = plan.last_start_ms
                    if last is None:
                        events.push(end, _EV_PASS, (st, idx), now, rank + pos if rank == first else rank)
                    else:
                        self._run_push[(st, idx)] = (now, rank + pos if rank == first else rank, first + pos)
                        self._run_pass_ms[idx] = (now, end - last, plan.decode_tokens)
                        events.push(end, _EV_PASS, (st, idx), last, first + pos)
            # later rounds of this phase push after every first-round push of the stage
            if rank == first:
                rank = _RANK_P2 if st == _P else _RANK_LATE
            if progress and not _any(dirty):
                break  # a further round would find no worker to ask
        return changed

    def _settle(self, stage: int, idx: int) -> None:
        """Before anything touches worker ``idx`` of ``stage``: cut its bulk decode run (if
        any) where the per-pass simulation would be now, so the worker is in exactly the state
        pass-by-pass replay would show (mid-pass, or idle with the pass ending now completed).

        Every call site that reads or commands a worker must call this first; the passes of a
        run are determined only while nothing from outside touches the worker.
        """
        if not self._bulk:
            return
        w = self._workers[stage][idx]
        if not w.busy:
            return
        cut = w.split_run(self.now_ms, self._pools_started)
        if cut is None:
            return
        end, last_start = cut
        key = (stage, idx)
        started = self._run_pass_ms.pop(idx, None)
        if started is not None and stage == _D:
            run_start, pass_ms, n = started
            half = n // _EARLY_PER_BATCH
            if self.now_ms - run_start < max(_EARLY_CUT_PASSES, half) * pass_ms:
                stretch = self._solo_next.get(idx, max(_SOLO_MIN, half))
                self._solo[idx] = stretch
                self._solo_next[idx] = min(2 * stretch, max(_SOLO_MAX, _SOLO_MAX_PER_BATCH * n))
            else:
                self._solo_next.pop(idx, None)
        self._events.remove(EventKind.PASS_COMPLETION, key)
        # the run's own push (only its first pass is left) or where its last kept pass's would be
        start, own, first = self._run_push[key]
        at = own if last_start == start else first
        if end <= self.now_ms:
            # pass by pass it would have completed at the start of this time step (its
            # effects are tokens only: nothing finishes inside a run)
            completion = w.finish_pass()
            self._dirty[stage][idx] = True
            self._wake_deferred(stage, idx)
            self._process_pass(_STAGES[stage], completion, idx)
        else:
            self._events.push(end, EventKind.PASS_COMPLETION, key, last_start, at)

    # ------------------------------------------------------------------ passes

    def _on_pass_start(self, stage: Stage, plan: PassPlan, idx: int) -> None:
        now = self.now_ms
        live = self._live
        collector = self.collector
        for adm in plan.admissions:
            req = live.get(adm.request_id)
            if req is None:
                raise ReplayInvariantError(f"admission of unknown request {adm.request_id}")
            collector.on_admit(req.rid, adm.reused_input_tokens)
            if req.first_admit_ms is None:
                req.first_admit_ms = now
            if stage is _PREFILL:
                if req.prefill_admit_ms is None:
                    req.prefill_admit_ms = now
                    req.prefill_reused = adm.reused_input_tokens
                    if self._planner is not None:
                        self._planner.on_prefill_admit(req.rid, adm.reused_input_tokens, req.turn.input_length)
                if req.phase is _QUEUED_PREFILL:
                    req.phase = _RUNNING_PREFILL
            else:
                collector.on_decode_admit(req.rid, idx)
                if req.decode_admit_ms is None:
                    req.decode_admit_ms = now
                    req.decode_reused = adm.reused_input_tokens
                if req.phase is _READY_DECODE:
                    req.phase = _RUNNING_DECODE
                elif req.phase is not _RUNNING_DECODE:
                    raise ReplayInvariantError(
                        f"decode admission of request {req.rid} in phase {req.phase.value}"
                    )

    def _terminal(self, rid: int, status: TerminalStatus, now: float) -> RequestState | None:
        """The live request ``rid`` (None: retired already), its terminal recorded if first."""
        req = self._live.get(rid)
        if req is not None and self.collector.on_terminal(rid, status, now):
            req.terminal_ms = now
        return req

    def _process_pass(self, stage: Stage, done: PassCompletion, idx: int) -> None:
        now = self.now_ms
        if stage is _PREFILL:
            self._source_output_tokens += len(done.emitted)
            if self._route_signals:
                self._prefill_pass_routing(done, idx)
            for rid in done.rejected:
                req = self._terminal(rid, _REJECTED, now)
                if req is not None:
                    self._fact(req, Failed(rid))
            if done.lifecycle:
                self._lifecycle(done.lifecycle)
            return
        # Decode: tokens, then terminals, then lifecycle facts (the reference's order).
        self.collector.on_tokens(done.emitted, now, idx, done.run_times, done.delta)
        if not done.finished and not done.rejected:
            if done.lifecycle:
                self._lifecycle(done.lifecycle)
            return
        for rid in done.finished:
            req = self._terminal(rid, _COMPLETED, now)
            if req is None:
                continue
            if self._planner is not None:
                self._planner.on_completed(rid, req.arrival_ms, req.turn.input_length, req.turn.output_length)
            self._free_route(_D, rid)
            req.routed &= 1
            self._finish_logical(req, remove_actions=False)
        for rid in done.rejected:
            req = self._terminal(rid, _REJECTED, now)
            if req is None:
                continue
            self._free_route(_D, rid)
            self._finish_logical(req, remove_actions=False)
        if done.lifecycle:
            self._lifecycle(done.lifecycle)

