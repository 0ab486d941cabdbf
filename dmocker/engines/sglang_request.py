"""A request as the mock SGLang worker tracks it (its queue status, pages and radix holdings),
and the new-token ratio of the worker's admission budget.

Shared by the worker's parts (:mod:`dmocker.engines.sglang` and the modules it composes).
"""

from __future__ import annotations

import enum
from typing import Hashable

from dmocker.engines.handoff_book import HandoffRequest
from dmocker.engines.interface import EngineArgs, EngineRequest

__all__ = ["SglRequest", "SglStatus", "TokenRatio"]


class SglStatus(enum.Enum):
    WAITING = 1
    PREBUILT = 2
    RUNNING = 3
    REMOTE_PENDING = 4
    RESERVED = 5
    HELD = 6


class SglRequest(HandoffRequest):
    __slots__ = ("seq", "materialized", "npages", "cached_tokens", "pub", "off")

    def __init__(self, req: EngineRequest, maxout: int, handoff: Hashable, status: SglStatus) -> None:
        super().__init__(req, maxout, handoff, status)
        self.seq = req.input_length  # prompt + output tokens
        self.materialized = 0  # tokens whose KV exists
        self.npages = 0  # pages held (locked radix pages + private pages)
        self.cached_tokens = 0  # radix prefix hit of the first chunk
        self.pub = 0  # leading prompt pages already in the radix tree (or known duplicates)
        # event-driven decode: seq = off + the worker's pass counter while its batch is lazy
        self.off = 0


class TokenRatio:
    """SGLang's new-token ratio: the share of each running request's remaining output that
    the extend batch's budget reserves.  It starts at ``0.7 x schedule_conservativeness``,
    decays linearly over ``new_token_ratio_decay_steps`` passes to
    ``min_new_token_ratio_factor`` times that, and is reset on retraction or out of memory."""

    def __init__(self, args: EngineArgs) -> None:
        init = 0.7 * args.schedule_conservativeness
        self.initial = init
        self.floor = init * args.min_new_token_ratio_factor
        self.step = (init - self.floor) / args.new_token_ratio_decay_steps
        self.value = init
        self.oom_resets = 0  # resets because an extend batch found no memory

    def reset(self) -> None:
        self.value = self.initial

    def out_of_memory(self) -> None:
        self.value = self.initial
        self.oom_resets += 1

    def decay(self) -> None:
        """One pass."""
        self.value = max(self.value - self.step, self.floor)

    def decay_passes(self, passes: int) -> None:
        """``passes`` passes (a bulk run), as many :meth:`decay` (the same floats)."""
        ratio, floor, step = self.value, self.floor, self.step
        while passes > 0 and ratio > floor:
            ratio = max(ratio - step, floor)
            passes -= 1
        self.value = ratio
