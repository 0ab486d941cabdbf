"""What a router is built with: the pool it serves and the run's parameters.

Why a module of its own: both the routers' compiled base (:mod:`.base`) and the protocol
(:mod:`.protocol`) name these values, and the protocol names the base; with the values here,
the dependencies point one way (``context`` <- ``base`` <- ``protocol``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Pool", "RouterContext"]


class Pool(enum.Enum):
    """A worker pool of the disaggregated cluster (routers, faults and the planner name pools
    with it)."""

    PREFILL = "prefill"
    DECODE = "decode"

    @property
    def stage(self) -> int:
        """The runtime's index of this pool (0 prefill, 1 decode)."""
        return 0 if self is Pool.PREFILL else 1


@dataclass(frozen=True, slots=True)
class RouterContext:
    """What a router is built with (one instance per pool)."""

    pool: Pool
    seed: int
    block_size: int
    max_num_batched_tokens: int
    # The pool's workers prefill and decode (an aggregated cluster; ``pool`` is PREFILL then).
    aggregated: bool = False
