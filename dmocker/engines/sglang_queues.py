"""Where each request of a mock SGLang worker is, and the pages it holds in the radix cache.

:class:`SglQueues` keeps the waiting queue, the activated destinations waiting to join the
batch (``prebuilt``) and the running batch, and does what moves a request's pages: publishing
them into the radix tree, completion, retraction, removal, activation.

Pages are the blocks of :class:`~dmocker.engines.block_pool.BlockPool` (page size = block
size): radix nodes are chained page hashes, locked = referenced, evictable = inactive.  Because
every access to a page also touches its whole prefix, LRU order there always evicts children
before parents, which is the radix tree's leaf-first eviction.
"""

from __future__ import annotations

from collections import deque

from dmocker.engines.block_pool import BlockPool, holds_before
from dmocker.engines.handoff_book import HandoffBook, free_blocks
from dmocker.engines.outbox import Outbox
from dmocker.engines.sglang_request import SglRequest, SglStatus

__all__ = ["SglQueues"]


class SglQueues:
    def __init__(self, book: HandoffBook[SglRequest], pool: BlockPool, outbox: Outbox, page: int,
                 caching: bool) -> None:
        self.book = book
        self.pool = pool
        self.outbox = outbox
        self.page = page
        self.caching = caching
        self.waiting: deque[SglRequest] = deque()  # prompts to extend, FIFO
        self.prebuilt: deque[SglRequest] = deque()  # activated destinations waiting to join the batch
        self.running: list[SglRequest] = []
        self.retractions = 0

    def complete(self, r: SglRequest) -> None:
        """Generation finished: a registered source is held, anything else publishes its
        pages and is freed."""
        r.status = SglStatus.HELD
        if r.source:
            self.outbox.held.append(self.book.source_held(r.handoff, r.prompt))
            return
        self.publish(r, r.seq)
        self.free_kv(r)
        self.book.retire(r)

    def retract(self, r: SglRequest) -> None:
        """Out of memory: ``r`` gives its pages back and starts over (the caller re-queues it)."""
        self.free_kv(r, cache_generated=False)
        r.materialized = 0
        r.cached_tokens = 0
        r.status = SglStatus.WAITING
        self.retractions += 1

    def drop(self, r: SglRequest) -> None:
        """Remove a request wherever it is (between passes, the batch written back), freeing
        its pages."""
        for q in (self.waiting, self.prebuilt):
            try:
                q.remove(r)
            except ValueError:
                pass
        if r in self.running:
            self.running.remove(r)
        if r.npages:
            self.free_kv(r, cache_generated=False)
            self.book.gen += 1
        self.book.forget(r)

    def publish(self, r: SglRequest, tokens: int, canonical: bool = False) -> None:
        """Insert the complete prompt pages below ``tokens`` into the radix tree (Stored).

        SGLang (1.6.1) publishes a request's pages when it finishes or between prefill chunks,
        not at allocation: a request cannot hit pages of one still being prefilled or held.
        Generated-token pages are inserted at release (:meth:`free_kv`).
        """
        hi = min(tokens // self.page, len(r.hashes))
        if hi > r.pub:
            if self.caching:
                lo = r.pub
                held = holds_before(r.cached, r.hashes, lo)
                new = self.pool.promote(r.hashes, lo, hi, held)
                if len(new) == hi - lo or not canonical:
                    r.cached.extend(new)
                else:
                    self._adopt_duplicates(r, r.hashes[lo:hi], new)
            r.pub = hi

    def _adopt_duplicates(self, r: SglRequest, pages: tuple[int, ...] | list[int], new: list[int]) -> None:
        """Pages of ``pages`` already in the radix tree: ``r`` frees its own copy and locks
        the tree's page instead, so that it holds one chain in prefix order."""
        inserted = set(new)
        dups = [h for h in pages if h not in inserted]
        self.pool.acquire(dups)
        self.pool.give_back(len(dups))
        r.cached.extend(pages)

    def free_kv(self, r: SglRequest, *, cache_generated: bool = True) -> None:
        # a finished request's full pages of generated tokens enter the radix tree too; a
        # retracted or removed one's do not
        cache_stop = r.materialized // self.page if cache_generated and self.caching else 0
        free_blocks(self.pool, r, r.npages, cache_stop)
        r.npages = 0
        r.pub = 0

    def mark_reserved(self, head: SglRequest, n_pages: int) -> None:
        """``head`` holds its reservation: ``n_pages`` pages, ``head.cached`` its prefix."""
        head.npages = n_pages
        head.status = SglStatus.RESERVED
        # the locked prefix is in the radix tree already: publishing at materialization starts
        # past it (promoting it again would only find every page a duplicate, one by one)
        head.pub = len(head.cached)

    def materialize_destination(self, r: SglRequest) -> None:
        """An activated reservation: its prompt pages are present; it waits to join the batch."""
        # publish the unpublished complete prompt pages beyond the locked prefix; a page the
        # radix tree already holds is a duplicate: the tree's copy is locked, ours freed, and
        # pages freed that way are new capacity for the pending reservations
        free = self.pool.free
        self.publish(r, r.prompt, canonical=True)
        if self.pool.free > free:
            self.book.gen += 1
        r.materialized = r.prompt
        r.seq = r.prompt
        r.status = SglStatus.PREBUILT
        self.prebuilt.append(r)
