"""What a worker owes the runtime between its passes (both engine mocks).

A pass is computed eagerly at its start; its effects are due at its end.  :class:`Outbox` keeps
them meanwhile: the completion of the pass in flight (the worker is busy while there is one),
the SourceHeld facts of sources that finished since a pass last started (they go out with the
next pass's completion), and, when the worker records KV events, turns the pool's cache changes
into events wherever the engine makes them visible.
"""

from __future__ import annotations

from dmocker.engines.block_pool import BlockPool
from dmocker.engines.common import kv_events
from dmocker.engines.interface import KvEvent, LifecycleEvent, PassCompletion

__all__ = ["Outbox"]


class Outbox:
    def __init__(self, pool: BlockPool, record: bool) -> None:
        self.pool = pool
        self.record = record  # the worker reports KV events
        self.busy = False  # a pass is in flight
        self.completion: PassCompletion | None = None  # its effects, due at its end
        self.held: list[LifecycleEvent] = []  # SourceHeld facts not yet handed out

    def take_held(self) -> tuple[LifecycleEvent, ...]:
        """The SourceHeld facts raised since the last pass started (they leave with it)."""
        if not self.held:
            return ()
        held = tuple(self.held)
        self.held.clear()
        return held

    def drain_kv(self) -> tuple[KvEvent, ...]:
        """The cache changes since the last drain, as KV events (none unless recording)."""
        if not self.record:
            return ()
        ev = self.pool.drain_events()
        return kv_events(ev) if ev else ()

    def start(self, completion: PassCompletion) -> None:
        """A pass (or a bulk run) started: the worker is busy until :meth:`finish`."""
        self.completion = completion
        self.busy = True

    def finish(self) -> PassCompletion:
        """The pass in flight ended: its completion, as computed at its start (or cut since)."""
        c = self.completion
        assert c is not None
        self.completion = None
        self.busy = False
        return c

    def deliver(self, c: PassCompletion, retry: tuple[LifecycleEvent, ...]) -> PassCompletion:
        """``c`` with what the end of the pass added: the destinations reserved by the retry
        that follows it, and the cache changes since the pass started."""
        events = self.drain_kv()
        if not retry and not events:
            return c
        return PassCompletion(end_ms=c.end_ms, emitted=c.emitted, finished=c.finished, rejected=c.rejected,
                              lifecycle=c.lifecycle + retry, kv_events=c.kv_events + events,
                              run_times=c.run_times, delta=c.delta)
