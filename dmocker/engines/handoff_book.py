"""The handoff bookkeeping both engine mocks share: which requests a worker holds for handoffs.

What a *handoff* does to a worker is the same in both mocks, however differently they schedule
(``ai-dynamo/dynamo`` ``lib/mocker/src/scheduler/source_holds.rs``): a source registers, is held
after its prefill and is released or canceled; a destination is accepted into a FIFO of pending
reservations, reserved when the head fits (tried once per capacity generation), activated or
canceled.  :class:`HandoffBook` keeps those registries and rules once, so the two mocks cannot
drift apart on them.  It never calls back into its worker: the worker calls it, and does what
is engine-specific itself (freeing KV, queueing an activated request, recording a reservation).
:class:`HandoffRequest` holds what both engines' request records share, and
:func:`free_blocks` how any of them gives its KV back.
"""

from __future__ import annotations

import enum
from collections import deque
from typing import Generic, Hashable, TypeVar

from dmocker.handoff import SourceHeld, TransferTiming
from dmocker.engines.block_pool import BlockPool, generated_block_ids
from dmocker.engines.common import ceil_div
from dmocker.engines.interface import EngineCommandError, EngineRequest

__all__ = ["HandoffRequest", "HandoffBook", "free_blocks"]


class HandoffRequest:
    """What both engines' request records hold: the fields the book reads and writes, and the
    output limit.  The base of both engines' request classes, which add their own progress."""

    __slots__ = ("rid", "handoff", "prompt", "maxout", "hashes", "cached", "status", "source", "dest")

    def __init__(self, req: EngineRequest, maxout: int, handoff: Hashable, status: enum.Enum) -> None:
        self.rid = req.request_id
        self.handoff = handoff
        self.prompt = req.input_length
        self.maxout = maxout  # tokens to generate (1 for a handoff source's prefill)
        self.hashes: list[int] = list(req.block_hashes)  # full prompt blocks (a list: the pool indexes it)
        self.cached: list[int] = []  # cached block hashes held by reference, in block order
        self.status = status  # the engine's own status enum
        self.source = False  # a registered handoff source (prefill side)
        self.dest = False  # an activated handoff destination (decode side)


def free_blocks(pool: BlockPool, r: HandoffRequest, held: int, generated_stop: int) -> None:
    """``r`` gives back the ``held`` blocks it holds (its cached references and its private
    blocks).  First its full blocks of generated tokens below block ``generated_stop`` enter the
    cache, under ids no prompt matches: they were held until now, so caching them here leaves
    the cache as caching them as they filled would have (0: none are cached)."""
    first = len(r.hashes)
    if generated_stop > first:
        r.cached.extend(pool.promote(generated_block_ids(r.rid, first, generated_stop)))
    if r.cached:
        pool.release(r.cached)
    pool.give_back(held - len(r.cached))
    r.cached = []


R = TypeVar("R", bound=HandoffRequest)


class HandoffBook(Generic[R]):
    """The requests a worker knows, its handoff registries and the destination retry.

    ``live`` holds every request the worker knows, by id; the registries hold those in a
    handoff by handoff id (insertion-ordered: deterministic).  ``gen`` is the capacity
    generation: whoever may have freed capacity bumps it, and the pending head is tried again
    only in a new generation.
    """

    def __init__(self, pool: BlockPool, block: int, unit: str, caching: bool, link: TransferTiming) -> None:
        self.pool = pool
        self.block = block  # tokens per block (page)
        self.unit = unit  # its name in error messages
        self.caching = caching
        self.link = link  # the worker's link settings (``args.transfer_timing(0)``)
        self.gen = 0
        self.live: dict[int, R] = {}
        self.sources: dict[Hashable, R] = {}  # pending or held sources by handoff id
        self.pending: deque[tuple[R, int]] = deque()  # (request, last attempted generation), FIFO
        self.pending_ids: set[Hashable] = set()
        self.reserved: dict[Hashable, R] = {}
        self.active: dict[Hashable, R] = {}  # activated destinations

    # --- new requests -------------------------------------------------------------------------

    def check_new(self, req: EngineRequest) -> None:
        """Refuse a malformed request or a live request id (EngineCommandError)."""
        n = req.input_length
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise EngineCommandError(f"request {req.request_id}: input_length must be a positive integer")
        if req.max_output_tokens < 0:
            raise EngineCommandError(f"request {req.request_id}: max_output_tokens must be >= 0")
        size = self.block
        if len(req.block_hashes) != n // size:
            raise EngineCommandError(
                f"request {req.request_id}: {len(req.block_hashes)} block hashes for {n} tokens at "
                f"{self.unit} {size} (expected {n // size})"
            )
        if req.request_id in self.live:
            raise EngineCommandError(f"request {req.request_id} is already active")

    def check_source(self, handoff_id: Hashable, req: EngineRequest) -> None:
        self.check_new(req)
        if handoff_id in self.sources:
            raise EngineCommandError(f"handoff {handoff_id!r} is already registered")

    def check_destination(self, handoff_id: Hashable, req: EngineRequest) -> None:
        self.check_new(req)
        if handoff_id in self.reserved or handoff_id in self.active or handoff_id in self.pending_ids:
            raise EngineCommandError(f"destination handoff {handoff_id!r} is already active")
        if ceil_div(req.input_length, self.block) > self.pool.total:
            raise EngineCommandError("destination prompt exceeds the KV pool capacity")

    def add(self, r: R) -> None:
        """A new request (checked with :meth:`check_new`) the worker queues."""
        self.live[r.rid] = r

    def add_source(self, handoff_id: Hashable, r: R) -> None:
        self.live[r.rid] = r
        r.source = True
        self.sources[handoff_id] = r

    def add_pending(self, handoff_id: Hashable, r: R) -> None:
        """An accepted destination, waiting for its reservation."""
        self.live[r.rid] = r
        self.pending.append((r, -1))
        self.pending_ids.add(handoff_id)

    # --- sources ------------------------------------------------------------------------------

    def source_held(self, handoff: Hashable, prompt_tokens: int) -> SourceHeld:
        """The fact a finished source reports: ``args.transfer_timing(prompt_tokens)``, built
        from the link settings read once."""
        link = self.link
        timing = TransferTiming(link.mode, prompt_tokens, link.kv_bytes_per_token, link.bandwidth_gb_s,
                                link.state_bytes)
        return SourceHeld(handoff, timing)

    def pop_source(self, handoff_id: Hashable) -> R | None:
        """The source ``handoff_id`` leaves the registry (released or canceled); None: unknown."""
        r = self.sources.pop(handoff_id, None)
        if r is not None:
            r.source = False
        return r

    # --- destinations -------------------------------------------------------------------------

    def reserve_head(self, may_reserve: bool) -> R | None:
        """Try the head of the pending FIFO, once per capacity generation: claim its cached
        prefix and fresh blocks, and move it to the reserved ones (returned; the worker records
        its blocks).  ``may_reserve``: whether the engine admits a reservation now at all (vLLM:
        a running slot is free); when not, the head counts as tried in this generation."""
        pending = self.pending
        if not pending:
            return None
        gen = self.gen
        head, last = pending[0]
        if not may_reserve:
            pending[0] = (head, gen)
            return None
        if last == gen:
            return None
        pending[0] = (head, gen)
        n_blocks = ceil_div(head.prompt, self.block)
        pool = self.pool
        n_prefix = 0
        if self.caching and head.hashes:
            n_prefix = pool.match_prefix(head.hashes, len(head.hashes))[0]
        prefix = head.hashes[:n_prefix]
        if not pool.claim(prefix, n_blocks - n_prefix):
            return None
        head.cached = list(prefix)
        pending.popleft()
        self.pending_ids.discard(head.handoff)
        self.reserved[head.handoff] = head
        return head

    def take_pending(self, handoff_id: Hashable) -> R | None:
        """Cancel a destination still waiting for its reservation (it holds nothing yet): out of
        the FIFO and of ``live``; None if ``handoff_id`` is not pending."""
        if handoff_id not in self.pending_ids:
            return None
        pending = self.pending
        for i, (p, _g) in enumerate(pending):
            if p.handoff == handoff_id:
                del pending[i]
                break
        self.pending_ids.discard(handoff_id)
        del self.live[p.rid]
        self.gen += 1
        return p

    def pop_reserved(self, handoff_id: Hashable) -> R | None:
        return self.reserved.pop(handoff_id, None)

    def activate(self, handoff_id: Hashable) -> R | None:
        """A reserved destination becomes active (its KV arrived); None: not reserved."""
        r = self.reserved.pop(handoff_id, None)
        if r is not None:
            r.dest = True
            self.active[handoff_id] = r
        return r

    def pop_active(self, handoff_id: Hashable) -> R | None:
        r = self.active.pop(handoff_id, None)
        if r is not None:
            r.dest = False
        return r

    # --- leaving ------------------------------------------------------------------------------

    def retire(self, r: R) -> None:
        """``r`` is done here and its KV was freed (finished, released or canceled): forget it;
        its capacity is free for the pending reservations."""
        del self.live[r.rid]
        if r.dest:
            self.active.pop(r.handoff, None)
            r.dest = False
        self.gen += 1

    def forget(self, r: R) -> None:
        """``r`` was removed wherever it was (its KV freed by the worker): out of every registry."""
        if r.source:
            self.sources.pop(r.handoff, None)
            r.source = False
        if r.dest:
            self.active.pop(r.handoff, None)
            r.dest = False
        self.live.pop(r.rid, None)
