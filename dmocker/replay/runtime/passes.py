"""The workers' passes: starting them, bulk decode runs and their cuts, and handing completed
passes on.

Why apart: this is the engine side of the run, with its own state (bulk runs' pushes and pass
times, the one-by-one stretches after early cuts) and its own rules for ordering completions
within a time step; what a completed pass *means* for the requests in it (tokens, terminals,
facts) is for the :class:`PassListener` it reports to.

Bulk decode runs: a decode worker whose batch will not change computes all the passes until
the next change at once, and the run is *cut* where the per-pass replay would be as soon as
anything touches the worker (:meth:`PassScheduler.settle`).  Runs cut within a few passes cost
more than those passes one by one, so a worker whose run was cut early (before max(4,
batch / 2) passes) runs its next passes one by one, for max(4, batch / 2) passes, doubling
while cuts stay early up to max(64, 16 x batch), and goes back to runs after one that lasts.
Bulk and per-pass replays are identical (tests/replay/test_bulk_differential.py).
"""

from __future__ import annotations

import heapq
from typing import Final, Protocol, cast

from dmocker.engines.interface import PassCompletion, PassPlan

from ..events import EventKind, EventQueue, top_kind, top_time
from ..request_state import Stage
from .clock import Clock
from .observer import ClusterObserver
from .pool import WorkerPool
from .requests import ActionQueue

__all__ = ["PassScheduler", "PassListener"]

_heappop: Final = heapq.heappop
_P: Final = 0  # index of the prefill pool
_D: Final = 1  # index of the decode pool
_STAGES: Final[tuple[Stage, ...]] = (Stage.PREFILL, Stage.DECODE)
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
_PREFILL: Final = Stage.PREFILL


class PassListener(Protocol):
    def pass_started(self, stage: Stage, plan: PassPlan, idx: int) -> None:
        """Worker ``idx`` of ``stage`` started a pass that admits requests or stores blocks
        (``plan.admissions``, ``plan.pass_start_kv_events``): apply what that means now."""

    def pass_done(self, stage: Stage, done: PassCompletion, idx: int) -> None:
        """Worker ``idx`` of ``stage`` completed a pass (or a bulk run): apply its effects."""


class PassScheduler:
    """Starts the passes of both pools' workers and applies their completions in order."""

    __slots__ = ("clock", "events", "pools", "queue", "observer", "listener", "bulk",
                 "started", "run_push", "run_pass_ms", "solo", "solo_next")

    def __init__(
        self,
        clock: Clock,
        events: EventQueue[object],
        pools: tuple[WorkerPool, ...],
        queue: ActionQueue,
        listener: PassListener,
        *,
        observer: ClusterObserver | None,
        bulk: bool,
    ) -> None:
        self.clock = clock
        self.events = events
        self.pools = pools
        self.queue = queue
        self.listener = listener
        self.observer = observer
        self.bulk = bulk
        self.started = False  # this time step is past its first pool phase
        # a bulk run's push: (time, rank of that push, rank of a first-round push of its pool)
        self.run_push: dict[tuple[int, int], tuple[float, int, int]] = {}
        self.run_pass_ms: dict[int, tuple[float, float, int]] = {}  # decode worker -> (run start, pass ms, batch)
        self.solo: dict[int, int] = {}  # decode worker -> passes left to run one by one
        self.solo_next: dict[int, int] = {}  # decode worker -> length of its next one-by-one stretch

    def apply_completions(self) -> bool:
        """Finish the passes due now, in the heap's order."""
        changed = False
        now = self.clock.now_ms
        heap = self.events.raw
        pools = self.pools
        run_pass_ms = self.run_pass_ms
        while heap and top_time(heap) == now and top_kind(heap) == _PASS:
            stage, idx = cast("tuple[int, int]", _heappop(heap)[5])
            if stage == _D and run_pass_ms and run_pass_ms.pop(idx, None) is not None:
                self.solo_next.pop(idx, None)  # a run that ran to its end: runs pay here
            pool = pools[stage]
            self._finish(pool, idx)
            changed = True
        return changed

    def _finish(self, pool: WorkerPool, idx: int) -> None:
        """Worker ``idx`` ends its pass now: wake what waited on it, report the completion."""
        completion = pool.workers[idx].finish_pass()
        pool.dirty[idx] = True
        if pool.deferred:
            self.wake_deferred(pool, idx)
        self.listener.pass_done(_STAGES[pool.stage], completion, idx)

    def wake_deferred(self, pool: WorkerPool, idx: int) -> None:
        """Commands deferred behind worker ``idx``'s pass run now."""
        queued = pool.take_deferred(idx)
        if queued:
            self.queue.extend(queued)

    def drive_pool(self, stage: Stage) -> bool:
        """Ask the pool's dirty idle workers to start passes, until none starts one."""
        changed = False
        st = _P if stage is _PREFILL else _D
        pool = self.pools[st]
        workers = pool.workers
        dirty = pool.dirty
        now = self.clock.now_ms
        bulk = self.bulk
        # Completions due together that also started together pop in push order.  A bulk run
        # pushes its completion early, so every push carries its rank within the time step (the
        # _RANK_* phases) and a run the rank its last pass's push would have had: the first
        # round of its pool's phase in the first sweep, where a pass follows its predecessor.
        first = _RANK_P1 if st == _P else _RANK_D1
        rank = _RANK_LATE if self.started else first
        solos = self.solo
        decode = st == _D
        observer = self.observer
        events = self.events
        progress = True
        while progress:
            progress = False
            for pos, idx in enumerate(pool.serving):
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
                if observer is not None:
                    observer.on_pass(stage, idx, plan)
                if plan.admissions or plan.pass_start_kv_events:
                    self.listener.pass_started(stage, plan, idx)
                end = plan.end_ms
                if end <= now:
                    completion = w.finish_pass()
                    dirty[idx] = True
                    self.wake_deferred(pool, idx)
                    self.listener.pass_done(stage, completion, idx)
                else:
                    last = plan.last_start_ms
                    if last is None:
                        events.push(end, _EV_PASS, (st, idx), now, rank + pos if rank == first else rank)
                    else:
                        self.run_push[(st, idx)] = (now, rank + pos if rank == first else rank, first + pos)
                        self.run_pass_ms[idx] = (now, end - last, plan.decode_tokens)
                        events.push(end, _EV_PASS, (st, idx), last, first + pos)
            # later rounds of this phase push after every first-round push of the stage
            if rank == first:
                rank = _RANK_P2 if st == _P else _RANK_LATE
            if progress and not pool.any_dirty():
                break  # a further round would find no worker to ask
        return changed

    def settle(self, stage: int, idx: int) -> None:
        """Before anything touches worker ``idx`` of ``stage``: cut its bulk decode run (if
        any) where the per-pass simulation would be now, so the worker is in exactly the state
        pass-by-pass replay would show (mid-pass, or idle with the pass ending now completed).

        Every call site that reads or commands a worker must call this first; the passes of a
        run are determined only while nothing from outside touches the worker.
        """
        if not self.bulk:
            return
        pool = self.pools[stage]
        w = pool.workers[idx]
        if not w.busy:
            return
        now = self.clock.now_ms
        cut = w.split_run(now, self.started)
        if cut is None:
            return
        end, last_start = cut
        key = (stage, idx)
        started = self.run_pass_ms.pop(idx, None)
        if started is not None and stage == _D:
            run_start, pass_ms, n = started
            half = n // _EARLY_PER_BATCH
            if now - run_start < max(_EARLY_CUT_PASSES, half) * pass_ms:
                stretch = self.solo_next.get(idx, max(_SOLO_MIN, half))
                self.solo[idx] = stretch
                self.solo_next[idx] = min(2 * stretch, max(_SOLO_MAX, _SOLO_MAX_PER_BATCH * n))
            else:
                self.solo_next.pop(idx, None)
        self.events.remove(EventKind.PASS_COMPLETION, key)
        # the run's own push (only its first pass is left) or where its last kept pass's would be
        start, own, first = self.run_push[key]
        at = own if last_start == start else first
        if end <= now:
            # pass by pass it would have completed at the start of this time step (its
            # effects are tokens only: nothing finishes inside a run)
            self._finish(pool, idx)
        else:
            self.events.push(end, EventKind.PASS_COMPLETION, key, last_start, at)

    def in_flight(self, stage: int, idx: int) -> tuple[float, float] | None:
        """The pass in flight on a worker as ``(start, end)`` (of a bulk run: its last pass,
        which the per-pass replay would have started by now), after settling it; None when
        idle.  The start is the completion event's order key (see ``EventQueue.push``)."""
        self.settle(stage, idx)
        if not self.pools[stage].workers[idx].busy:
            return None
        key = (stage, idx)
        for e in self.events.raw:
            if cast(int, e[1]) == _PASS and e[5] == key:
                return cast(float, e[2]), cast(float, e[0])
        return None
