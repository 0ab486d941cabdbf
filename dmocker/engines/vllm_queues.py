"""Where each request of a mock vLLM worker is, and the KV it holds.

:class:`VllmQueues` keeps the waiting queue and the running batch and moves requests between
them and out: completion (a source is held, anything else freed), preemption, removal, an
activated destination joining the queue, a reservation recorded.  The schedulers
(:mod:`dmocker.engines.vllm_scheduler`, :mod:`dmocker.engines.vllm_lockstep`) decide *when*;
this part does the moving, with the handoff book and the block pool.
"""

from __future__ import annotations

from collections import deque

from dmocker.engines.block_pool import BlockPool
from dmocker.engines.handoff_book import HandoffBook, free_blocks
from dmocker.engines.outbox import Outbox
from dmocker.engines.vllm_request import VllmRequest, VllmStatus

__all__ = ["VllmQueues"]


class VllmQueues:
    def __init__(self, book: HandoffBook[VllmRequest], pool: BlockPool, outbox: Outbox, block_size: int,
                 caching: bool) -> None:
        self.book = book
        self.pool = pool
        self.outbox = outbox
        self.bs = block_size
        self.caching = caching
        # Waiting, in admission order.  The order is ``qseq``: preempted requests go in front
        # (negative, decreasing), destinations in reservation order (positive, increasing).
        self.waiting: deque[VllmRequest] = deque()
        self.run: dict[int, VllmRequest] = {}  # running, in running order
        self.reserved_seq = 0  # destinations reserved so far
        self.preempted_seq = 0  # minus the preemptions so far
        self.preemptions = 0

    def next_waiting(self, prefer_materialized: bool) -> VllmRequest | None:
        """The next request to admit: the queue's head, or while a reservation is pending the
        first *materialized* one (an activated handoff: its prompt is already here)."""
        if not prefer_materialized:
            return self.waiting[0]
        for r in self.waiting:
            if self.materialized(r):
                return r
        return None

    def materialized(self, r: VllmRequest) -> bool:
        """Whether waiting request ``r``'s prompt KV is here already (an activated handoff): it
        is admitted without a prefill, reusing nothing."""
        return r.computed >= r.prompt and r.nblocks * self.bs >= r.prompt

    def admit(self, r: VllmRequest) -> None:
        """``r`` leaves the waiting queue to run (the caller adds it to its batch)."""
        self.waiting.remove(r)
        r.status = VllmStatus.RUNNING

    def complete(self, r: VllmRequest) -> None:
        """Generation finished: a registered source is held, anything else is freed."""
        book = self.book
        if r.source:
            r.status = VllmStatus.HELD
            self.outbox.held.append(book.source_held(r.handoff, r.prompt))
            book.gen += 1  # its running slot is free
        else:
            self.free_kv(r)
            book.retire(r)

    def preempt_lifo(self, run: list[VllmRequest]) -> VllmRequest | None:
        """Preempt the last running request of ``run`` (it leaves the list): its KV is freed,
        its progress reset, and it goes to the front of the waiting queue."""
        if not run:
            return None
        victim = run.pop()
        self.free_kv(victim)
        victim.computed = 0
        victim.status = VllmStatus.PREEMPTED
        self.preempted_seq -= 1
        victim.qseq = self.preempted_seq
        self.waiting.appendleft(victim)
        self.preemptions += 1
        self.book.gen += 1
        return victim

    def drop(self, r: VllmRequest) -> None:
        """Remove a request wherever it is (between passes, the batch held explicitly), freeing
        its KV."""
        if r.status is VllmStatus.RUNNING:
            del self.run[r.rid]
            self.free_kv(r)
            self.book.gen += 1
        else:
            try:
                self.waiting.remove(r)
            except ValueError:
                pass
            if r.nblocks:
                self.free_kv(r)
                self.book.gen += 1
        self.book.forget(r)

    def free_kv(self, r: VllmRequest) -> None:
        # the reference caches full blocks of generated tokens as they are computed
        free_blocks(self.pool, r, r.nblocks, r.computed // self.bs if self.caching else 0)
        r.nblocks = 0

    def mark_reserved(self, head: VllmRequest, n_blocks: int) -> None:
        """``head`` holds its reservation: ``n_blocks`` blocks, ``head.cached`` its prefix."""
        head.nblocks = n_blocks
        head.status = VllmStatus.RESERVED
        self.reserved_seq += 1
        head.qseq = self.reserved_seq

    def materialize_destination(self, r: VllmRequest) -> None:
        """An activated reservation: its prompt KV is present; it waits to decode."""
        # Commit: fresh full prompt blocks enter the cache (Stored); the partial tail and any
        # block whose hash got cached meanwhile stay private.
        if self.caching and len(r.hashes) > len(r.cached):
            r.cached.extend(self.pool.promote(r.hashes, len(r.cached)))  # (holds the prefix)
        r.computed = r.prompt
        r.seq = r.prompt
        r.status = VllmStatus.WAITING
        # Dynamo 1.6.1 queues a destination for decoding in reservation order, not activation
        # order: one reserved earlier but activated (transferred) later goes ahead of the
        # activated ones reserved after it.
        waiting = self.waiting
        i = len(waiting)
        while i and waiting[i - 1].qseq > r.qseq:
            i -= 1
        if i == len(waiting):
            waiting.append(r)
        else:
            waiting.insert(i, r)
