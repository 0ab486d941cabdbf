"""The shape of the replay runtime's state, shared by the runtime and its layers.

Why a separate class: :class:`~dmocker.replay.runtime.DisaggRuntime` is split by concern into
the drain loop (``runtime``), action execution (``actions``), the coordinator boundary and its
outputs (``coordinator_io``), routing signals (``routing_hooks``) and the planner and fault
controls (``cluster_control``).  Each part reads state the others own; declaring that state
once, here, lets every part be type-checked on its own without restating it, and gives mypyc
the native class's attribute layout.  The attributes are set by ``DisaggRuntime.__init__``;
the methods below are the ones a lower layer calls before the layer that owns them defines
them (a call that reaches one here is a bug).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from dmocker.handoff import (
        EventLogWriter,
        Fact,
        HandoffCoordinator,
        HandoffOrder,
        IssuedAction,
        Outcome,
        OutcomeKind,
        ProtocolSpec,
    )
    from dmocker.engines.interface import EngineWorker, LifecycleEvent

    from .collector import Collector
    from .events import EventQueue
    from .planner.loop import PlannerLoop
    from .request_state import Queued, RequestState
    from .routing import Router
    from .timeseries import TimeSeriesRecorder
    from .workload import AdmissionQueue

__all__ = ["RuntimeBase"]


class RuntimeBase:
    """Declarations (see the module docstring); the layers above define them all.

    Per-pool pairs (indexed by stage: 0 prefill, 1 decode) are declared ``tuple[X, ...]``, not
    ``tuple[X, X]``: mypyc keeps a fixed-length tuple unboxed, as a C struct, and indexing one
    by a run-time stage builds a Python tuple of it first (an allocation per access, hundreds of
    thousands a replay); a variable-length tuple is one object, indexed in place.
    """

    now_ms: float
    collector: Collector
    _sampler: TimeSeriesRecorder | None
    _make_coord: Callable[..., HandoffCoordinator]
    _timers: dict[int, Callable[[], None]]
    _pool_gone: list[bool]
    _acquire_hooks: dict[int, Callable[[], bool]]
    _timer_seq: int
    _bulk: bool
    _pools_started: bool
    _run_push: dict[tuple[int, int], tuple[float, int, int]]
    _admission: AdmissionQueue
    _workers: tuple[list[EngineWorker], ...]
    _active: tuple[list[int], ...]
    _serving: tuple[list[int], ...]
    _routers: tuple[Router, ...]
    _held: tuple[dict[int, Queued], ...]
    _route_signals: bool
    _kv_feed: bool
    _route_overlap: tuple[dict[int, int], ...] | None
    _pool_reuse: list[int]
    _order: HandoffOrder
    _block_size: int
    _trace_block: int
    _engine_name: str
    _cap: float | None
    _records: IO[str] | None
    _events_out: IO[str] | None
    _on_retired: Callable[[int], None] | None
    _fallback: float
    _events: EventQueue[tuple[int, int]]
    _live: dict[int, RequestState]
    _in_flight: int
    _stale: int
    _stale_pruned: int
    # Actions to execute, first in first out: a list read from ``_pending_head`` on (compiled, a
    # list's append and item are native operations, a deque's append and popleft generic calls)
    _pending: list[Queued]
    _pending_head: int
    _waiting: tuple[deque[Queued], ...]
    _deferred: tuple[dict[int, list[Queued]], ...]  # (lists: a native append compiled)
    _source_output_tokens: int
    _dirty: tuple[list[bool], ...]
    _spec: ProtocolSpec
    _event_log: EventLogWriter | None
    _idle_events: int
    _planner: PlannerLoop | None
    _hash_cache: dict[int, tuple[int, ...]]

    # drain loop (runtime)
    def _settle(self, stage: int, idx: int) -> None:
        raise NotImplementedError

    def _is_done(self) -> bool:
        raise NotImplementedError

    # coordinator boundary (coordinator_io)
    def _lifecycle(self, events: tuple[LifecycleEvent, ...]) -> None:
        raise NotImplementedError

    def _finish_logical(self, req: RequestState, *, remove_actions: bool) -> None:
        raise NotImplementedError

    def _retire(self, req: RequestState) -> None:
        raise NotImplementedError

    def _fact(self, req: RequestState, fact: Fact) -> None:
        raise NotImplementedError

    def _ack(self, req: RequestState, issued: IssuedAction, outcome: Outcome) -> None:
        raise NotImplementedError

    def _ack_ok(self, req: RequestState, issued: IssuedAction, kind: OutcomeKind,
                outcome: Outcome | None = None) -> None:
        raise NotImplementedError

    # routing signals (routing_hooks)
    def _release_routes(self, req: RequestState) -> None:
        raise NotImplementedError

    def _free_route(self, stage: int, rid: int) -> None:
        raise NotImplementedError

    def _unhold(self, stage: int, req: RequestState) -> None:
        raise NotImplementedError

    def _route_retired(self, req: RequestState) -> None:
        raise NotImplementedError

    # planner and fault controls (cluster_control)
    def _acquire_fails(self, req: RequestState, issued: IssuedAction, stage: int) -> bool:
        raise NotImplementedError
