"""Worker selection for the prefill and decode pools of the replay.

``round-robin`` (the reference's default), ``kv`` (the reference's KV-aware router) and user
routers (``MODULE:CLASS``) all implement :class:`Router`; see :mod:`.protocol` for the
contract and :mod:`.kv_router` for the KV router's rules.
"""

from .base import NO_ADMISSIONS, Admission, BaseRouter
from .config import QueuePolicy, RouterConfig
from .context import Pool, RouterContext
from .kv_index import KvIndex
from .kv_router import KvRouter
from .loader import RouterSpec, parse_router
from .pinned import PinnedRouter
from .protocol import Router, RouterError
from .queue import RouterQueue
from .round_robin import RoundRobin

__all__ = [
    "Admission",
    "BaseRouter",
    "KvIndex",
    "KvRouter",
    "NO_ADMISSIONS",
    "PinnedRouter",
    "Pool",
    "QueuePolicy",
    "RoundRobin",
    "Router",
    "RouterConfig",
    "RouterContext",
    "RouterError",
    "RouterQueue",
    "RouterSpec",
    "parse_router",
]
