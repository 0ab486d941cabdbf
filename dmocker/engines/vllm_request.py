"""The mock vLLM worker's per-request record and status, and a bulk run's block demand.

Shared by the worker's parts (:mod:`dmocker.engines.vllm` and the modules it composes).
"""

from __future__ import annotations

import enum
from typing import Hashable

from dmocker.engines.handoff_book import HandoffRequest
from dmocker.engines.interface import EngineRequest

__all__ = ["Demand", "VllmRequest", "VllmStatus", "blocks_through"]

# A bulk run's block demand: prefix sums of the per-pass demand over one bucket cycle (from its
# first pass), and how many fewer blocks its first pass takes (joiners).
Demand = tuple[list[int], int]


def blocks_through(demand: Demand, passes: int) -> int:
    """Blocks the first ``passes`` passes of a bulk run take."""
    cum, adj = demand
    cycle = len(cum) - 1
    if passes <= 0:
        return 0
    return (passes // cycle) * cum[cycle] + cum[passes % cycle] - adj


class VllmStatus(enum.Enum):
    WAITING = 1
    RUNNING = 2
    PREEMPTED = 3
    REMOTE_PENDING = 4  # destination accepted, not reserved yet
    RESERVED = 5  # destination reserved, not activated
    HELD = 6  # source prefill finished, KV held


class VllmRequest(HandoffRequest):
    """Per in-flight request state.

    Explicit fields (``computed``, ``seq``, ``nblocks``) are authoritative except for running
    requests while the worker is in lockstep mode; then ``off``/``bkt``/``kf`` are.
    """

    __slots__ = ("limit", "computed", "seq", "nblocks", "off", "bkt", "kf", "qseq")

    def __init__(self, req: EngineRequest, maxout: int, handoff: Hashable, status: VllmStatus,
                 max_model_len: int | None) -> None:
        super().__init__(req, maxout, handoff, status)
        # generated-token count at which generation stops (output limit or model length)
        self.limit = maxout if max_model_len is None else min(maxout, max_model_len - req.input_length)
        self.computed = 0
        self.seq = req.input_length  # prompt + generated tokens
        self.nblocks = 0  # blocks held (cached refs + private)
        self.off = 0
        self.bkt = 0
        self.kf = 0
        # place in the waiting queue: a destination's reservation number, a preempted
        # request's (decreasing) negative one; the queue stays sorted by it
        self.qseq = 0
