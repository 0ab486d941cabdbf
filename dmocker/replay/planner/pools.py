"""Worker lifecycle of one pool: starting -> active -> draining -> removed, with its timeline.

Why its own module: scale-up/down bookkeeping (which index a new worker takes, which workers
a scale-down cancels or drains, how many workers are paid for over time) is independent of
how the runtime executes requests, and worker crash/restart reuses the same transitions.

The rules are the reference's (``ai-dynamo/dynamo`` ``lib/mocker/src/replay/offline/``,
``apply_target_count`` / ``try_remove_drained``):

* the effective count is active + starting; a target above it adds workers at the next unused
  index (indices are never reused);
* a target below it first cancels the newest starting workers, then marks the highest-index
  active workers draining;
* provisioned worker-seconds integrate active + starting + draining workers over time, so
  they include the startup ramp and the drain tail.
"""

from __future__ import annotations

from dataclasses import dataclass

from .protocol import WorkerState

__all__ = ["WorkerRecord", "PoolLifecycle", "ScaleDelta"]


@dataclass(slots=True)
class WorkerRecord:
    """One worker's timeline (simulated ms; ``None`` = has not happened)."""

    worker: int
    state: WorkerState
    start_ms: float
    ready_ms: float | None = None
    drain_ms: float | None = None
    removed_ms: float | None = None


@dataclass(frozen=True, slots=True)
class ScaleDelta:
    """What one target change did: workers added, canceled while starting, marked draining."""

    added: tuple[int, ...] = ()
    canceled: tuple[int, ...] = ()
    draining: tuple[int, ...] = ()


class PoolLifecycle:
    """The workers of one pool, their states, and the provisioned-count integral."""

    __slots__ = ("records", "counts", "_starting", "_active", "_draining", "_area_ms", "_since_ms")

    def __init__(self, initial: int) -> None:
        self.records: list[WorkerRecord] = [
            WorkerRecord(i, WorkerState.ACTIVE, 0.0, ready_ms=0.0) for i in range(initial)
        ]
        self._starting: list[int] = []
        self._active: list[int] = list(range(initial))
        self._draining: list[int] = []
        # (t_ms, active, starting, draining) after every change, first entry at t = 0.
        self.counts: list[tuple[float, int, int, int]] = [(0.0, initial, 0, 0)]
        self._area_ms = 0.0  # integral of the provisioned count, worker-ms
        self._since_ms = 0.0

    # ---------------------------------------------------------------- queries

    @property
    def active(self) -> list[int]:
        return self._active

    @property
    def starting(self) -> list[int]:
        return self._starting

    @property
    def draining(self) -> list[int]:
        return self._draining

    @property
    def provisioned(self) -> int:
        return len(self._starting) + len(self._active) + len(self._draining)

    def state(self, worker: int) -> WorkerState:
        return self.records[worker].state

    # ---------------------------------------------------------------- transitions

    def scale_to(self, target: int, now_ms: float, *, startup: bool) -> ScaleDelta:
        """Apply a target count (active + starting); ``startup`` = new workers start first."""
        effective = len(self._active) + len(self._starting)
        if target == effective:
            return ScaleDelta()
        self._advance(now_ms)
        if target > effective:
            added = []
            for _ in range(target - effective):
                idx = len(self.records)
                if startup:
                    self.records.append(WorkerRecord(idx, WorkerState.STARTING, now_ms))
                    self._starting.append(idx)
                else:
                    self.records.append(WorkerRecord(idx, WorkerState.ACTIVE, now_ms, ready_ms=now_ms))
                    self._active.append(idx)
                added.append(idx)
            self._record(now_ms)
            return ScaleDelta(added=tuple(added))
        excess = effective - target
        canceled = []
        while excess and self._starting:
            idx = self._starting.pop()  # newest first
            rec = self.records[idx]
            rec.state = WorkerState.CANCELED
            rec.removed_ms = now_ms
            canceled.append(idx)
            excess -= 1
        draining = []
        if excess:
            self._active.sort()
            for idx in self._active[len(self._active) - excess:][::-1]:  # highest index first
                rec = self.records[idx]
                rec.state = WorkerState.DRAINING
                rec.drain_ms = now_ms
                draining.append(idx)
            del self._active[len(self._active) - excess:]
            self._draining.extend(draining)
        self._record(now_ms)
        return ScaleDelta(canceled=tuple(canceled), draining=tuple(draining))

    def mark_ready(self, worker: int, now_ms: float) -> bool:
        """A starting worker's WorkerReady: it becomes active (False if it was canceled)."""
        rec = self.records[worker]
        if rec.state is not WorkerState.STARTING:
            return False
        self._advance(now_ms)
        self._starting.remove(worker)
        self._active.append(worker)
        self._active.sort()
        rec.state = WorkerState.ACTIVE
        rec.ready_ms = now_ms
        self._record(now_ms)
        return True

    def mark_removed(self, worker: int, now_ms: float) -> None:
        """A draining worker finished everything it held."""
        rec = self.records[worker]
        if rec.state is not WorkerState.DRAINING:
            raise ValueError(f"worker {worker} is {rec.state.value}, not draining")
        self._advance(now_ms)
        self._draining.remove(worker)
        rec.state = WorkerState.REMOVED
        rec.removed_ms = now_ms
        self._record(now_ms)

    # ---------------------------------------------------------------- accounting

    def worker_seconds(self, end_ms: float) -> float:
        """Provisioned worker-seconds from 0 to ``end_ms``."""
        self._advance(end_ms)
        return self._area_ms / 1000.0

    def _advance(self, now_ms: float) -> None:
        if now_ms > self._since_ms:
            self._area_ms += self.provisioned * (now_ms - self._since_ms)
            self._since_ms = now_ms

    def _record(self, now_ms: float) -> None:
        entry = (now_ms, len(self._active), len(self._starting), len(self._draining))
        if self.counts and self.counts[-1][0] == now_ms:
            self.counts[-1] = entry
        else:
            self.counts.append(entry)
