"""A request as the mock SGLang worker tracks it (its queue status, pages and radix holdings).

Shared by the worker (:mod:`dmocker.engines.sglang`) and its event-driven decode path
(:mod:`dmocker.engines.sglang_decode`).
"""

from __future__ import annotations

import enum
from typing import Hashable

from dmocker.engines.handoff_base import HandoffRequest
from dmocker.engines.interface import EngineRequest

__all__ = ["SglRequest", "SglStatus"]


class SglStatus(enum.Enum):
    WAITING = 1
    PREBUILT = 2
    RUNNING = 3
    REMOTE_PENDING = 4
    RESERVED = 5
    HELD = 6


class SglRequest(HandoffRequest):
    __slots__ = ("maxout", "seq", "materialized", "npages", "cached_tokens", "pub", "off")

    def __init__(self, req: EngineRequest, maxout: int, handoff: Hashable, status: SglStatus) -> None:
        self.rid = req.request_id
        self.handoff = handoff
        self.prompt = req.input_length
        self.maxout = maxout
        self.hashes = list(req.block_hashes)
        self.seq = req.input_length  # prompt + output tokens
        self.materialized = 0  # tokens whose KV exists
        self.npages = 0  # pages held (locked radix pages + private pages)
        self.cached = []  # page hashes locked by this request, in order
        self.cached_tokens = 0  # radix prefix hit of the first chunk
        self.pub = 0  # leading prompt pages already in the radix tree (or known duplicates)
        self.status = status
        self.source = False
        self.dest = False
        # event-driven decode: seq = off + the worker's pass counter while its batch is lazy
        self.off = 0
