"""The handoff coordinator's commands on a worker, carried out the same way by both engine mocks.

A command's course is the same in both mocks (``ai-dynamo/dynamo``
``lib/mocker/src/scheduler/source_holds.rs``): a source is checked, registered and queued for
its prefill, and released or canceled once held; a destination is checked and accepted into the
FIFO of pending reservations, reserved when the head fits, activated or canceled wherever it is;
after every command that may have freed capacity, and after every pass, the pending head is
tried again.  :class:`HandoffCommands` carries that course out once, on the worker's
:class:`~dmocker.engines.handoff_book.HandoffBook` and
:class:`~dmocker.engines.outbox.Outbox`.  What a command does to an engine's own queues is
that engine's choice: it asks the engine's :class:`HandoffSide` (how a request is built, queued,
freed, removed, reserved and activated, and whether the engine admits a reservation now).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Generic, Hashable, TypeVar

from mypy_extensions import trait

from dmocker.handoff import DestinationReserved
from dmocker.engines.common import ceil_div
from dmocker.engines.handoff_book import HandoffBook, HandoffRequest
from dmocker.engines.interface import (
    CommandEffects,
    CommandResult,
    EngineRequest,
    LifecycleEvent,
    PassCompletion,
)
from dmocker.engines.outbox import Outbox

__all__ = ["HandoffCommands", "HandoffSide"]

# shared immutable results (frozen values): most commands return one of these
NOOP = CommandEffects(CommandResult.NOOP)
SUBMITTED = CommandEffects(CommandResult.SUBMITTED)
APPLIED = CommandEffects(CommandResult.APPLIED)

R = TypeVar("R", bound=HandoffRequest)  # the engine's request record


@trait
class HandoffSide(Generic[R]):
    """What a handoff command does to one engine's queues: the engine's part of
    :class:`HandoffCommands`.  Called only by it, between passes unless said otherwise.  A
    trait rather than a ``typing.Protocol``: compiled, its methods are called directly."""

    @abstractmethod
    def new_request(self, request: EngineRequest, maxout: int, handoff: Hashable, destination: bool) -> R:
        """The engine's record of a checked request that may generate ``maxout`` tokens:
        waiting for its prefill, or (``destination``) accepted, not reserved yet."""

    @abstractmethod
    def enqueue(self, r: R) -> None:
        """A submitted request joins the waiting queue (also while a pass is in flight)."""

    @abstractmethod
    def is_held(self, r: R) -> bool:
        """Whether source ``r`` has finished its prefill and holds its KV for the transfer."""

    @abstractmethod
    def release_held(self, r: R) -> None:
        """Held source ``r`` is released or canceled: its KV is freed."""

    @abstractmethod
    def free_reserved(self, r: R) -> None:
        """Reserved destination ``r`` is canceled before its KV arrived: its blocks are freed."""

    @abstractmethod
    def remove(self, r: R) -> None:
        """Take ``r`` out wherever it is in the engine's queues, freeing its KV."""

    @abstractmethod
    def may_reserve(self) -> bool:
        """Whether the engine admits a destination reservation now at all (also after a pass)."""

    @abstractmethod
    def mark_reserved(self, head: R, n_blocks: int) -> None:
        """``head`` now holds its reservation: ``n_blocks`` blocks, ``head.cached`` its prefix."""

    @abstractmethod
    def activate(self, r: R) -> None:
        """Reserved destination ``r``'s KV arrived: it waits to decode."""


class HandoffCommands(Generic[R]):
    """The commands of :class:`~dmocker.engines.interface.EngineWorker` for a worker made of a
    handoff book, an outbox and the engine's :class:`HandoffSide` (module docstring)."""

    def __init__(self, book: HandoffBook[R], outbox: Outbox, side: HandoffSide[R]) -> None:
        self._book = book
        self._outbox = outbox
        self._side = side

    # --- sources ------------------------------------------------------------------------------

    def submit_handoff_prefill(self, handoff_id: Hashable, request: EngineRequest) -> CommandEffects:
        self._book.check_source(handoff_id, request)
        r = self._side.new_request(request, min(request.max_output_tokens, 1), handoff_id, False)
        self._book.add_source(handoff_id, r)
        self._side.enqueue(r)
        return SUBMITTED

    def submit(self, request: EngineRequest) -> CommandEffects:
        """Plain (non-handoff) request: aggregated use and tests."""
        self._book.check_new(request)
        r = self._side.new_request(request, request.max_output_tokens, None, False)
        self._book.add(r)
        self._side.enqueue(r)
        return SUBMITTED

    def release_source(self, handoff_id: Hashable) -> CommandEffects:
        return self._end_source(handoff_id, cancel=False)

    def cancel_source(self, handoff_id: Hashable) -> CommandEffects:
        return self._end_source(handoff_id, cancel=True)

    def _end_source(self, handoff_id: Hashable, *, cancel: bool) -> CommandEffects:
        r = self._book.pop_source(handoff_id)
        if r is None:
            return NOOP
        if self._side.is_held(r):
            self._side.release_held(r)
            self._book.retire(r)
        elif cancel:
            self._side.remove(r)
        # a release of a pending source: the prefill releases itself when it finishes
        return self._applied()

    # --- destinations -------------------------------------------------------------------------

    def reserve_destination(self, handoff_id: Hashable, request: EngineRequest) -> CommandEffects:
        self._book.check_destination(handoff_id, request)
        r = self._side.new_request(request, request.max_output_tokens, handoff_id, True)
        self._book.add_pending(handoff_id, r)
        lifecycle = self.retry() if not self._outbox.busy else ()
        return CommandEffects(CommandResult.ACCEPTED, lifecycle, self._outbox.drain_kv())

    def activate_destination(self, handoff_id: Hashable) -> CommandEffects:
        r = self._book.activate(handoff_id)
        if r is None:
            return NOOP
        self._side.activate(r)
        return self._applied()

    def cancel_destination(self, handoff_id: Hashable) -> CommandEffects:
        book = self._book
        if book.take_pending(handoff_id) is None:
            r = book.pop_reserved(handoff_id)
            if r is not None:
                self._side.free_reserved(r)
                book.retire(r)
            else:
                r = book.pop_active(handoff_id)
                if r is None:
                    return NOOP
                self._side.remove(r)
        return self._applied()

    # --- the destination retry ----------------------------------------------------------------

    def retry(self) -> tuple[LifecycleEvent, ...]:
        """Reserve the pending head if it fits now (:meth:`HandoffBook.reserve_head`)."""
        book = self._book
        head = book.reserve_head(self._side.may_reserve())
        if head is None:
            return ()
        block = book.block
        n_blocks = ceil_div(head.prompt, block)
        self._side.mark_reserved(head, n_blocks)
        return (DestinationReserved(head.handoff, (n_blocks - len(head.cached)) * block),)

    def deliver(self, c: PassCompletion) -> PassCompletion:
        """The completion of the pass that just ended, with the retry that follows it."""
        retry = self.retry() if self._book.pending else ()
        return self._outbox.deliver(c, retry)

    def _applied(self) -> CommandEffects:
        """APPLIED, with the retry the command allows and the cache changes it made."""
        lifecycle: tuple[LifecycleEvent, ...] = ()
        if not self._outbox.busy and self._book.pending:
            lifecycle = self.retry()
        events = self._outbox.drain_kv()
        if not lifecycle and not events:
            return APPLIED
        return CommandEffects(CommandResult.APPLIED, lifecycle, events)
