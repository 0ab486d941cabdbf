"""The planner in the replay loop: ticks, metrics, and applying scaling decisions.

Why here and not in the runtime: the runtime executes requests; this object owns everything
a planner adds (the tick schedule, the traffic window, per-worker pass snapshots, the worker
lifecycle of both pools, the decision log) and touches the runtime only through its
"planner hook points" (add a worker, make it routable / serving, wake parked actions, ask if
a worker is drained, schedule idle events).  Without a planner none of this exists.

Order within a timestamp, as the reference (``ai-dynamo/dynamo``
``lib/mocker/src/replay/offline/disagg.rs``): pass completions, WorkerReady, transfers,
arrivals, actions, passes, removal of drained workers, then planner ticks -- last, so the
planner sees a settled timestamp; whatever it changes is picked up by the next sweep.  A tick
due once the workload is done is dropped without calling the planner, and idle events (ticks,
WorkerReady) never keep a finished run alive.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from dmocker.engines.interface import EngineWorker, PassPlan

from ..events import EventKind
from ..request_state import Stage
from ..report import JsonValue
from .pools import PoolLifecycle
from .protocol import (
    PlannerError,
    PlannerMetrics,
    PoolMetrics,
    ScalingDecision,
    TrafficStats,
    WorkerSnapshot,
    WorkerState,
)

if TYPE_CHECKING:
    from ..runtime.control import ClusterControl

__all__ = ["PlannerLoop", "WorkerFactory", "check_initial_tick"]

WorkerFactory = Callable[[int, int], EngineWorker]
"""``(stage, index) -> worker``: builds a new worker of the prefill (0) or decode (1) pool."""

_STAGE_NAMES = ("prefill", "decode")
MAX_POOL_WORKERS = 4096
"""The largest pool a planner may ask for (a guard against runaway targets, not a model limit)."""


def check_initial_tick(planner: object) -> float | None:
    """Validate a planner object and return its first tick time (``None``: never ticks).

    Raises ``ValueError`` (bad configuration) when the object lacks the hook methods, when
    ``initial_tick_ms`` raises, or when it returns something that is not a number or None.
    """
    for name in ("initial_tick_ms", "on_tick"):
        if not callable(getattr(planner, name, None)):
            raise ValueError(f"planner {type(planner).__name__} has no {name}() method")
    try:
        first = planner.initial_tick_ms()  # type: ignore[attr-defined]
    except Exception as exc:
        raise ValueError(f"planner {type(planner).__name__}.initial_tick_ms() raised {type(exc).__name__}: {exc}") from exc
    if first is None:
        return None
    if isinstance(first, bool) or not isinstance(first, (int, float)):
        raise ValueError(f"planner initial_tick_ms() must return a number or None, got {first!r}")
    value = float(first)
    return value if math.isfinite(value) else None


class _Traffic:
    """Traffic since the previous tick (see :class:`TrafficStats` for the definitions)."""

    __slots__ = ("window_start_ms", "completed", "hit_sum", "hit_n")

    def __init__(self) -> None:
        self.window_start_ms = 0.0
        self.completed: list[tuple[int, float, int, int]] = []  # rid, arrival, isl, osl
        self.hit_sum = 0.0
        self.hit_n = 0

    def drain(self, now_ms: float, output_of: Callable[[int], tuple[int, float, float, float]]) -> TrafficStats:
        n = len(self.completed)
        isl = osl = 0
        ttft_sum = itl_sum = 0.0
        ttft_n = itl_n = 0
        for rid, arrival, i, o in self.completed:
            isl += i
            osl += o
            tokens, first, _second, last = output_of(rid)
            if tokens > 0:
                ttft = first - arrival
                if ttft > 0:
                    ttft_sum += ttft
                    ttft_n += 1
                if tokens > 1:
                    itl = (last - first) / (tokens - 1)
                    if itl > 0:
                        itl_sum += itl
                        itl_n += 1
        stats = TrafficStats(
            duration_s=(now_ms - self.window_start_ms) / 1000.0,
            num_req=n,
            avg_isl=isl / n if n else 0.0,
            avg_osl=osl / n if n else 0.0,
            avg_ttft_ms=ttft_sum / ttft_n if ttft_n else 0.0,
            avg_itl_ms=itl_sum / itl_n if itl_n else 0.0,
            avg_kv_hit_rate=self.hit_sum / self.hit_n if self.hit_n else 0.0,
            ttft_samples=ttft_n,
            itl_samples=itl_n,
            kv_hit_samples=self.hit_n,
        )
        self.window_start_ms = now_ms
        self.completed = []
        self.hit_sum = 0.0
        self.hit_n = 0
        return stats


class PlannerLoop:
    """Drives one planner through one replay (build it, pass it to the runtime)."""

    def __init__(
        self,
        planner: object,
        *,
        first_tick_ms: float | None,
        initial_workers: tuple[int, int],
        make_worker: WorkerFactory,
        startup_time_s: float = 0.0,
    ) -> None:
        self._planner = planner
        self._first_tick = first_tick_ms
        self._make_worker = make_worker
        self._startup_ms = startup_time_s * 1000.0
        self.pools = (PoolLifecycle(initial_workers[0]), PoolLifecycle(initial_workers[1]))
        self._rt: ClusterControl | None = None
        self._traffic = _Traffic()
        # Latest pass plan per worker (stored as is: one dict write per pass, no allocation).
        self._last_pass: tuple[dict[int, PassPlan], dict[int, PassPlan]] = ({}, {})
        # Per pool: rid -> (worker, prompt tokens) while routed but queued (see WorkerSnapshot).
        self._queued: tuple[dict[int, tuple[int, int]], dict[int, tuple[int, int]]] = ({}, {})
        self.ticks = 0
        self.decisions: list[dict[str, JsonValue]] = []
        # False once no tick is scheduled any more: observations stop (nothing would read them).
        self._observing = False
        # Draining workers, both pools: the runtime calls after_sweep only when this is
        # non-zero or a tick is due (one sweep check, not a call per sweep).
        self.draining = 0

    # ------------------------------------------------------------------ runtime side

    def attach(self, control: ClusterControl) -> None:
        self._rt = control

    def _runtime(self) -> ClusterControl:
        if self._rt is None:
            raise RuntimeError("planner loop used before attach()")
        return self._rt

    def start(self) -> None:
        """Seed the first tick (at ``max(first, now)``); a planner that never ticks gets none."""
        rt = self._runtime()
        if self._first_tick is not None:
            rt.push_idle_event(max(self._first_tick, rt.now_ms), EventKind.PLANNER_TICK, (0, 0))
            self._observing = True

    def apply_ready(self, now_ms: float) -> bool:
        """WorkerReady events due now: the worker becomes routable and runs passes."""
        rt = self._runtime()
        changed = False
        while True:
            payload = rt.pop_idle_event(now_ms, EventKind.WORKER_READY)
            if payload is None:
                return changed
            stage_i, idx = payload
            if self.pools[stage_i].mark_ready(idx, now_ms):
                self._activate(_stage(stage_i), idx)
                changed = True

    def after_sweep(self, now_ms: float) -> bool:
        """End of a drain sweep: remove drained workers, then fire the ticks due now."""
        changed = self._remove_drained(now_ms) if self.draining else False
        rt = self._runtime()
        while rt.pop_idle_event(now_ms, EventKind.PLANNER_TICK) is not None:
            if rt.is_done():
                continue  # the reference drops it without asking the planner, and stops
            self._tick(now_ms)
            changed = True
        return changed

    def worker_seconds(self, end_ms: float) -> tuple[float, float]:
        return self.pools[0].worker_seconds(end_ms), self.pools[1].worker_seconds(end_ms)

    # ------------------------------------------------------------------ observations

    def on_pass(self, stage: int, idx: int, plan: PassPlan) -> None:
        self._last_pass[stage][idx] = plan

    def on_routed(self, stage: int, rid: int, idx: int, tokens: int) -> None:
        if self._observing:
            self._queued[stage][rid] = (idx, tokens)

    def on_decode_reserved(self, rid: int) -> None:
        self._queued[1].pop(rid, None)

    def on_prefill_admit(self, rid: int, reused: int, input_length: int) -> None:
        self._queued[0].pop(rid, None)
        if input_length > 0 and self._observing:
            self._traffic.hit_sum += reused / input_length
            self._traffic.hit_n += 1

    def on_completed(self, rid: int, arrival_ms: float, input_length: int, output_length: int) -> None:
        if self._observing:
            self._traffic.completed.append((rid, arrival_ms, input_length, output_length))

    def on_request_gone(self, rid: int) -> None:
        self._queued[0].pop(rid, None)
        self._queued[1].pop(rid, None)

    # ------------------------------------------------------------------ ticks

    def _tick(self, now_ms: float) -> None:
        rt = self._runtime()
        tick = self.ticks
        self.ticks += 1
        metrics = PlannerMetrics(
            now_ms=now_ms,
            tick=tick,
            prefill=self._pool_metrics(0),
            decode=self._pool_metrics(1),
            traffic=self._traffic.drain(now_ms, rt.collector.output_of),
        )
        try:
            decision = self._planner.on_tick(metrics)  # type: ignore[attr-defined]
        except Exception as exc:
            raise PlannerError(f"on_tick raised {type(exc).__name__}: {exc}", tick=tick, now_ms=now_ms) from exc
        if not isinstance(decision, ScalingDecision):
            raise PlannerError(
                f"on_tick must return a ScalingDecision, got {type(decision).__name__}", tick=tick, now_ms=now_ms
            )
        targets = (
            _check_count("prefill_workers", decision.prefill_workers, tick, now_ms),
            _check_count("decode_workers", decision.decode_workers, tick, now_ms),
        )
        nxt = decision.next_tick_ms
        if nxt is not None:
            if isinstance(nxt, bool) or not isinstance(nxt, (int, float)) or not math.isfinite(nxt):
                raise PlannerError(f"next_tick_ms must be a finite number or None, got {nxt!r}", tick=tick, now_ms=now_ms)
        before = [self.pools[s].provisioned for s in (0, 1)]
        for stage_i, target in enumerate(targets):
            if target is not None:
                self._scale(stage_i, target, now_ms)
        rearmed = nxt is not None and nxt > now_ms and not rt.is_done()
        if rearmed:
            assert nxt is not None
            rt.push_idle_event(float(nxt), EventKind.PLANNER_TICK, (0, 0))
        else:
            self._observing = False
            self._queued[0].clear()
            self._queued[1].clear()
        self.decisions.append({
            "tick": tick,
            "t_ms": now_ms,
            "prefill_target": targets[0],
            "decode_target": targets[1],
            "next_tick_ms": float(nxt) if rearmed and nxt is not None else None,
            "prefill_before": before[0],
            "decode_before": before[1],
            "prefill_after": self.pools[0].provisioned,
            "decode_after": self.pools[1].provisioned,
            "completed_in_window": metrics.traffic.num_req,
        })

    def _pool_metrics(self, stage_i: int) -> PoolMetrics:
        rt = self._runtime()
        pool = self.pools[stage_i]
        stage = _stage(stage_i)
        queued: dict[int, int] = {}
        for idx, tokens in self._queued[stage_i].values():
            queued[idx] = queued.get(idx, 0) + tokens
        snaps = []
        for idx in sorted(pool.active + pool.draining):
            # A bulk decode run leaves the worker ahead of the clock: cut it at the tick first,
            # so the snapshot is exactly the per-pass replay's.
            in_flight = rt.settle_worker(stage, idx)
            snaps.append(_snapshot(rt.worker(stage, idx), idx, pool.state(idx), queued.get(idx, 0),
                                   _last_pass(self._last_pass[stage_i].get(idx), in_flight)))
        return PoolMetrics(
            active=len(pool.active),
            starting=len(pool.starting),
            draining=len(pool.draining),
            workers=tuple(snaps),
            router_pending=rt.parked_count(stage),
        )

    # ------------------------------------------------------------------ scaling

    def _scale(self, stage_i: int, target: int, now_ms: float) -> None:
        rt = self._runtime()
        stage = _stage(stage_i)
        startup = self._startup_ms > 0.0
        delta = self.pools[stage_i].scale_to(target, now_ms, startup=startup)
        for idx in delta.added:
            rt.append_worker(stage, self._make_worker(stage_i, idx))
            if startup:
                rt.push_idle_event(now_ms + self._startup_ms, EventKind.WORKER_READY, (stage_i, idx))
            else:
                self._activate(stage, idx)
        self.draining += len(delta.draining)
        for idx in delta.draining:
            rt.set_routable(stage, idx, False)  # out of routing at once; still runs its passes
            self._notify_router_removed(stage, idx)

    def _activate(self, stage: Stage, idx: int) -> None:
        rt = self._runtime()
        rt.set_routable(stage, idx, True)
        rt.set_serving(stage, idx, True)
        self._notify_router_added(stage, idx)
        rt.wake_parked(stage)

    def _remove_drained(self, now_ms: float) -> bool:
        rt = self._runtime()
        changed = False
        for stage_i, pool in enumerate(self.pools):
            if not pool.draining:
                continue
            stage = _stage(stage_i)
            for idx in list(pool.draining):
                if rt.worker_removable(stage, idx):
                    pool.mark_removed(idx, now_ms)
                    self.draining -= 1
                    rt.set_serving(stage, idx, False)
                    self._last_pass[stage_i].pop(idx, None)
                    changed = True
        return changed

    # Router topology notifications, sent after the routable list changed (a stateful router
    # -- queue, KV index -- may release queued requests to the new worker).
    def _notify_router_added(self, stage: Stage, idx: int) -> None:
        self._runtime().route_topology_changed(stage, idx, added=True)

    def _notify_router_removed(self, stage: Stage, idx: int) -> None:
        self._runtime().route_topology_changed(stage, idx, added=False)

    def worker_counts(self) -> tuple[tuple[str, float], ...]:
        """Workers per pool and state, as ``(label, count)`` pairs (the HTML report's worker series)."""
        out: list[tuple[str, float]] = []
        for name, pool in zip(("prefill", "decode"), self.pools):
            out += [(f"{name} active", float(len(pool.active))), (f"{name} starting", float(len(pool.starting))),
                    (f"{name} draining", float(len(pool.draining)))]
        return tuple(out)

    # ------------------------------------------------------------------ report

    def report(self) -> dict[str, JsonValue]:
        """The scaling timeline (per worker, counts over time) and every tick's decision."""
        out: dict[str, JsonValue] = {"ticks": self.ticks, "decisions": list(self.decisions)}
        for stage_i, name in enumerate(_STAGE_NAMES):
            pool = self.pools[stage_i]
            out[f"{name}_workers"] = [
                {
                    "worker": r.worker,
                    "state": r.state.value,
                    "start_ms": r.start_ms,
                    "ready_ms": r.ready_ms,
                    "drain_ms": r.drain_ms,
                    "removed_ms": r.removed_ms,
                }
                for r in pool.records
            ]
            out[f"{name}_counts"] = [
                {"t_ms": t, "active": a, "starting": s, "draining": d} for t, a, s, d in pool.counts
            ]
        return out


def _stage(stage_i: int) -> Stage:
    return Stage(stage_i)


def _check_count(name: str, value: object, tick: int, now_ms: float) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value > MAX_POOL_WORKERS:
        raise PlannerError(
            f"{name} must be an integer in 0..{MAX_POOL_WORKERS} or None, got {value!r}", tick=tick, now_ms=now_ms
        )
    return value


def _last_pass(plan: PassPlan | None, in_flight: tuple[float, float] | None) -> tuple[float, float, int, int] | None:
    """The worker's latest forward pass as ``(start, end, prefill tokens, decode tokens)``.

    ``plan`` is the latest pass plan the worker returned; when it is a bulk decode run
    (``last_start_ms`` set), its latest pass is the last one of the run as cut so far: the pass
    in flight (``in_flight``, read after settling the worker at the tick), else the run's last
    pass as planned.  Every pass of a run decodes the same batch and computes no prompt token.
    """
    if plan is None:
        return None
    if plan.last_start_ms is None:
        return plan.start_ms, plan.end_ms, plan.prefill_tokens, plan.decode_tokens
    if in_flight is not None:
        return in_flight[0], in_flight[1], 0, plan.decode_tokens
    return plan.last_start_ms, plan.end_ms, 0, plan.decode_tokens


def _snapshot(w: EngineWorker, idx: int, state: WorkerState, queued: int,
              last: tuple[float, float, int, int] | None) -> WorkerSnapshot:
    # The mock engines expose num_running / num_waiting and their block pool; other workers
    # (test doubles) may not, and report zeros.
    running = int(getattr(w, "num_running", 0))
    waiting = int(getattr(w, "num_waiting", 0))
    pool = getattr(w, "pool", None)
    used = int(getattr(pool, "num_active_blocks", 0)) if pool is not None else 0
    total = int(getattr(pool, "total", 0)) if pool is not None else 0
    return WorkerSnapshot(
        worker=idx,
        state=state,
        running_requests=running,
        waiting_requests=waiting,
        kv_used_blocks=used,
        kv_total_blocks=total,
        kv_usage=used / total if total > 0 else 0.0,
        queued_tokens=queued,
        last_pass_start_ms=last[0] if last is not None else None,
        last_pass_ms=last[1] - last[0] if last is not None else None,
        last_pass_prefill_tokens=last[2] if last is not None else 0,
        last_pass_decode_tokens=last[3] if last is not None else 0,
    )
