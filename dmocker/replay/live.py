"""The replay's cluster driven from outside: a live edge (a mock server) hands it requests as they
arrive and moves it forward to its own clock.

Why here and not in the server: the cluster a client meets must be the one the replay simulates
-- the same engines, coordinator, routers, collector and event log, in the same order of
phases -- so that the TTFT and ITL a client measures are the ones the replay predicts for the
same arrivals.  :class:`LiveCluster` owns no clock and does no I/O: the edge calls
:meth:`~LiveCluster.submit` for each arriving request (at the edge's time), then
:meth:`~LiveCluster.advance` to that time, and again when :meth:`~LiveCluster.next_due_ms` comes;
tokens and ends come back through the callbacks, during those calls.  Requests submitted at the
same time are released together, as a trace's simultaneous arrivals are.

Passes are simulated one by one (no bulk decode runs), so every pass's tokens are reported
when the pass ends.  The collector keeps a slot per request, so a cluster takes at most
``capacity`` requests in its life.

The configuration's fault plan and coordinator apply as in the replay (the same
:func:`~dmocker.replay.end_of_run.prepare` hooks): cancel, fail and timeout rates drawn per
request id with the plan's seed, scheduled faults, worker crashes at cluster times, a user's
coordinator.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import IO, cast

from dmocker.engines.interface import EngineRequest, EngineWorker, IdArray, LifecycleEvent, WorkerProbes
from dmocker.engines.registry import make_worker
from dmocker.handoff import Canceled, HandoffOrder, SourceHeld, TimedOut, order_for_engine

from .collector import Collector, TerminalStatus
from .config import ClusterMode, ReplayConfig
from .end_of_run import prepare
from .report import JsonValue, SlaThresholds, build_summary
from .routing import PinnedRouter, Pool, Router, RouterContext, parse_router
from .runtime import DisaggRuntime
from .workload import NO_NEXT, AdmissionQueue, SessionStart, Turn

__all__ = ["LiveCluster", "LiveError", "Stranded"]

TokenSink = Callable[[list[int], float], None]
"""Called with the ids of the requests that each got one token, and the time (ms)."""

EndSink = Callable[[int, TerminalStatus, float], None]
"""Called when a request has left the cluster: its id, its terminal status, the time (ms)."""

HeldSink = Callable[[int, float], None]
"""Called when a request's prefill ended and its source KV is held for the transfer: id, time (ms)."""


class LiveError(ValueError):
    """A configuration the live cluster does not run, or a request it cannot take."""


class Stranded:
    """KV held for a handoff that a missing party blocks, in blocks of the holders' prompts (a
    shared prefix counted once per request): what a live edge reports while the run goes on."""

    __slots__ = ("no_decode_leg", "no_prefill_leg", "after_cancel", "retired")

    def __init__(self, no_decode_leg: int, no_prefill_leg: int, after_cancel: int, retired: int) -> None:
        #: sources held whose decode request has not come (a pinned cluster)
        self.no_decode_leg = no_decode_leg
        #: destinations reserved whose prefill request has not come (a pinned cluster, SGLang's order)
        self.no_prefill_leg = no_prefill_leg
        #: requests whose client went away and that still hold KV
        self.after_cancel = after_cancel
        #: requests that left the cluster and are still registered on a worker (a leak)
        self.retired = retired


class _Arrivals:
    """The workload of a live cluster: no turns of its own; requests are pushed as they come."""

    def __init__(self, trace_block_size: int) -> None:
        self._block = trace_block_size

    @property
    def trace_block_size(self) -> int:
        return self._block

    @property
    def num_requests(self) -> int:
        return 0

    def session_starts(self) -> Iterator[SessionStart]:
        return iter(())

    def load(self, request_id: int) -> Turn:
        raise LiveError(f"request {request_id} was not submitted")

    def delay_of(self, request_id: int) -> float:
        return 0.0


class LiveCluster:
    """A disaggregated cluster of the replay, driven from outside (module docstring)."""

    def __init__(
        self,
        config: ReplayConfig,
        *,
        capacity: int = 100_000,
        trace_block_size: int | None = None,
        on_tokens: TokenSink | None = None,
        on_end: EndSink | None = None,
        on_held: HeldSink | None = None,
        events: IO[str] | None = None,
        records: IO[str] | None = None,
        pinned: bool = False,
    ) -> None:
        """``trace_block_size``: tokens per entry of a request's ``hash_ids`` (default: the
        engine's block size, one hash id per KV block).

        ``pinned``: the workers are chosen outside the cluster (a real proxy in front of the
        workers' own servers): a request's prefill worker is given with it
        (:meth:`submit`), its decode worker when its decode request comes (:meth:`attach_decode`).
        The workers' own timers are the configuration's, as in the replay
        (:class:`~dmocker.replay.worker_timers.WorkerTimers`): a held source whose destination
        is not reserved ``transfer.kv_abort_timeout_s`` after its prefill is freed (vLLM's
        ``VLLM_NIXL_ABORT_REQUEST_TIMEOUT``; a pinned cluster's source whose decode request never
        came), a destination-first reservation whose KV has not begun to come
        ``transfer.disaggregation_waiting_timeout_s`` after it is timed out.

        A pinned cluster in SGLang's order also runs the prefill side's bootstrap timeout
        (``transfer.disaggregation_bootstrap_timeout_s``, SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT):
        a request whose prefill request came and whose decode request has not come this long
        after it is timed out (a ``TimedOut`` fact)."""
        if config.cluster.mode is not ClusterMode.DISAGG:
            raise LiveError("a live cluster is disaggregated (cluster.mode = disagg)")
        if config.planner.policy is not None:
            raise LiveError("a live cluster runs without a planner")
        if capacity < 1:
            raise LiveError(f"capacity must be >= 1, got {capacity}")
        prefill_args, decode_args = config.engine_args()
        self.config = config
        self.capacity = capacity
        self._on_tokens = on_tokens
        self._on_end = on_end
        self._on_held = on_held
        bootstrap_s = config.transfer.disaggregation_bootstrap_timeout_s
        self._bootstrap_ms = (bootstrap_s * 1000.0 if pinned and bootstrap_s is not None
                              and order_for_engine(prefill_args.engine) is HandoffOrder.DESTINATION_FIRST else None)
        self._pins: tuple[PinnedRouter, PinnedRouter] | None = None
        routers: tuple[Router, ...]
        if pinned:
            self._pins = (PinnedRouter(), PinnedRouter())
            routers = self._pins
        else:
            router_spec = parse_router(config.router.name)
            routing = config.router.kv.validate()
            routers = tuple(
                router_spec.build(RouterContext(pool, config.router.seed, args.page_tokens,
                                                args.max_num_batched_tokens), routing)
                for pool, args in ((Pool.PREFILL, prefill_args), (Pool.DECODE, decode_args))
            )
        self._hooks = prepare(config.faults, config.coordinator, prefill_args=prefill_args, decode_args=decode_args,
                              prefill_workers=config.cluster.prefill_workers,
                              decode_workers=config.cluster.decode_workers, num_requests=capacity,
                              clocks=config.transfer, order=order_for_engine(prefill_args.engine),
                              # a pinned cluster's destinations are reserved when their decode request comes
                              bootstrap=not pinned)
        kv_feed = routers[0].wants_kv_events
        p_workers: list[EngineWorker] = [
            make_worker(prefill_args, i, record_kv_events=kv_feed) for i in range(config.cluster.prefill_workers)
        ]
        d_workers: list[EngineWorker] = [make_worker(decode_args, i) for i in range(config.cluster.decode_workers)]
        self.collector = Collector(capacity)
        self._admission = AdmissionQueue(_Arrivals(trace_block_size or prefill_args.page_tokens))
        self.runtime = DisaggRuntime(
            admission=self._admission, prefill_args=prefill_args, decode_args=decode_args,
            prefill_workers=p_workers, decode_workers=d_workers, order=order_for_engine(prefill_args.engine),
            collector=self.collector, records=records, events=events, on_retired=self._retired,
            prefill_router=routers[0], decode_router=routers[1], bulk=False,
            coordinator_factory=self._hooks.factory,
        )
        if on_held is not None:  # before the hooks: the workers' timers chain onto it
            self.runtime.effects.held_sink = self._held
        self._hooks.attach(self.runtime)
        self.runtime.effects.token_sink = self._tokens
        self._next_id = 0
        self._attached: set[int] = set()  # pinned: requests whose decode request came
        self._prefill_attached: set[int] = set()  # ... and whose prefill request came
        self._known: set[int] = set()  # submitted and not retired (released into the cluster or about to be)
        self._canceled: set[int] = set()  # live requests whose client went away
        self._blocks = (prefill_args.num_gpu_blocks or 0, decode_args.num_gpu_blocks or 0)
        self.runtime.start()

    # ------------------------------------------------------------------ the edge's calls

    @property
    def now_ms(self) -> float:
        return self.runtime.now_ms

    def submit(self, input_length: int, output_length: int, hash_ids: tuple[int, ...], now_ms: float,
               prefill_worker: int | None = None) -> int:
        """A request arrives at ``now_ms`` (not before the cluster's time): its id.  It enters
        the cluster at the next :meth:`advance` to ``now_ms`` or later.  ``hash_ids``: one id
        per ``trace_block_size`` tokens of the prompt, equal ids for equal prefixes.
        ``prefill_worker``: the worker it came to (a pinned cluster only; else its prefill
        request comes later, :meth:`attach_prefill`)."""
        if prefill_worker is not None and self._pins is None:
            raise LiveError("only a pinned cluster takes a request's prefill worker")
        if prefill_worker is not None and not 0 <= prefill_worker < len(self.runtime.pools[0].workers):
            raise LiveError(f"no prefill worker {prefill_worker}")
        if now_ms < self.runtime.now_ms:
            raise LiveError(f"request at {now_ms} ms, before the cluster's time {self.runtime.now_ms} ms")
        if isinstance(input_length, bool) or not isinstance(input_length, int) or input_length < 1:
            raise LiveError(f"input_length must be a positive integer, got {input_length!r}")
        if isinstance(output_length, bool) or not isinstance(output_length, int) or output_length < 1:
            raise LiveError(f"output_length must be a positive integer, got {output_length!r}")
        if len(hash_ids) * self._admission.trace_block_size < input_length:
            raise LiveError(f"{len(hash_ids)} hash ids of {self._admission.trace_block_size} tokens do not cover "
                            f"{input_length} prompt tokens")
        rid = self._next_id
        if rid >= self.capacity:
            raise LiveError(f"the cluster takes {self.capacity} requests in its life (capacity)")
        self._next_id = rid + 1
        self._known.add(rid)
        if self._pins is not None and prefill_worker is not None:
            self._pins[0].pin(rid, prefill_worker)
            self._prefill_attached.add(rid)
        self._admission.push(Turn(rid, input_length, output_length, tuple(hash_ids), 0.0, NO_NEXT, rid, 0), now_ms)
        return rid

    def attach_prefill(self, request_id: int, worker: int, now_ms: float) -> bool:
        """A pinned cluster: the prefill request of ``request_id`` came to prefill ``worker``
        (SGLang's order: both legs come at once, either first).  False when the request is
        gone or its prefill request came already."""
        pins = self._pins
        if pins is None:
            raise LiveError("attach_prefill is for a pinned cluster")
        if not 0 <= worker < len(self.runtime.pools[0].workers):
            raise LiveError(f"no prefill worker {worker}")
        if now_ms < self.runtime.now_ms:
            raise LiveError(f"prefill request at {now_ms} ms, before the cluster's time {self.runtime.now_ms} ms")
        if request_id not in self._known or request_id in self._prefill_attached:
            return False
        self._prefill_attached.add(request_id)
        if self._bootstrap_ms is not None and request_id not in self._attached:
            self.runtime.control.at_idle(now_ms + self._bootstrap_ms, self._pair_timer(request_id))
        routing = self.runtime.routing

        def land() -> None:
            released = pins[0].pin(request_id, worker)
            if released:
                routing.release(0, released)

        self.runtime.control.at(now_ms, land)
        return True

    def attach_decode(self, request_id: int, worker: int, now_ms: float, output_length: int | None = None) -> bool:
        """A pinned cluster: the decode request of ``request_id`` came to decode ``worker`` at
        ``now_ms``; it reserves there at the next :meth:`advance`, to generate ``output_length``
        tokens when given (vLLM's proxy asks the prefill for one token and tells only the decode
        the real count).  False when the request is gone (ended, freed by the abort timeout)
        or its decode request came already."""
        pins = self._pins
        if pins is None:
            raise LiveError("attach_decode is for a pinned cluster")
        if not 0 <= worker < len(self.runtime.pools[1].workers):
            raise LiveError(f"no decode worker {worker}")
        if now_ms < self.runtime.now_ms:
            raise LiveError(f"decode request at {now_ms} ms, before the cluster's time {self.runtime.now_ms} ms")
        if request_id not in self._known or request_id in self._attached:
            return False
        if output_length is not None and (isinstance(output_length, bool) or not isinstance(output_length, int)
                                          or output_length < 1):
            raise LiveError(f"output_length must be a positive integer, got {output_length!r}")
        self._attached.add(request_id)
        routing = self.runtime.routing
        live = self.runtime.table.live

        def land() -> None:
            req = live.get(request_id)
            if req is not None and output_length is not None and output_length != req.turn.output_length:
                t, e = req.turn, req.engine_request
                req.turn = Turn(t.request_id, t.input_length, output_length, t.hash_ids, t.delay_ms,
                                t.next_request_id, t.session_index, t.turn_index)
                req.engine_request = EngineRequest(e.request_id, e.input_length, output_length, e.block_hashes)
            released = pins[1].pin(request_id, worker)
            if released:
                routing.release(1, released)

        self.runtime.control.at(now_ms, land)
        return True

    def source_held(self, request_id: int) -> bool:
        """Whether the request's prefill ended and its source KV is held, not yet released."""
        req = self.runtime.table.live.get(request_id)
        return req is not None and req.source_held_ms is not None and req.source_released_ms is None

    def cancel(self, request_id: int, now_ms: float) -> None:
        """The client of ``request_id`` went away at ``now_ms``: its handoff is canceled (a
        ``Canceled`` fact) at the next :meth:`advance`; nothing happens if it already ended."""
        if now_ms < self.runtime.now_ms:
            raise LiveError(f"cancel at {now_ms} ms, before the cluster's time {self.runtime.now_ms} ms")
        if request_id in self._known:
            self._canceled.add(request_id)
        self.runtime.control.inject(now_ms, request_id, Canceled)

    def drain(self, now_ms: float) -> None:
        """Stop taking requests: cancel every request in flight at ``now_ms`` and run the
        cluster until nothing is due (simulated time, at once), so the end state can be checked."""
        self.advance(now_ms)
        for rid in self.runtime.control.live_requests():
            self.cancel(rid, now_ms)
        self.advance(now_ms)
        while not self.settled():
            due = self.next_due_ms()
            assert due is not None
            self.advance(due)

    def finish(self, events_path: str | None = None) -> dict[str, JsonValue]:
        """The summary with the replay's end-of-run checks (leaked KV, open routes, coordinators
        not complete, and the event log at ``events_path`` against the spec), after :meth:`drain`."""
        summary = self.summary()
        self._hooks.finish(self.runtime, self.collector, summary, order=order_for_engine(self.config.engine),
                           capped=False, events_path=events_path)
        return summary

    def advance(self, now_ms: float) -> None:
        """Apply everything due up to ``now_ms`` (submitted requests included), in the replay's
        order; tokens and ends are reported meanwhile."""
        self.runtime.advance(now_ms)

    def settled(self) -> bool:
        """Nothing is due but the workers' own timers (which keep no run alive, as in the replay)."""
        runtime = self.runtime
        return (runtime.admission.next_ready_time() is None
                and len(runtime.events.raw) == runtime.control.idle_events)

    def next_due_ms(self) -> float | None:
        """When the cluster next changes by itself (None: not until a request arrives)."""
        return self.runtime.next_due_ms()

    @property
    def in_flight(self) -> int:
        return self.runtime.table.in_flight

    def queued(self) -> int:
        """Requests queued on a worker, not running (waiting for a pass, or destinations accepted
        and not yet reserved)."""
        control = self.runtime.control
        return sum(w.queue_depth() for stage in (0, 1) for w in control.workers(stage) if isinstance(w, WorkerProbes))

    def worker_load(self, stage: int, index: int) -> tuple[int, int, float]:
        """One worker now (stage 0 prefill, 1 decode): requests registered there and not queued
        (running, or a source held), requests queued, the share of its KV blocks in use."""
        w = self.runtime.control.worker(stage, index)
        if not isinstance(w, WorkerProbes):
            return 0, 0, 0.0
        waiting = w.queue_depth()
        return max(len(w.kv_in_use()[1]) - waiting, 0), waiting, min(max(w.kv_usage(), 0.0), 1.0)

    def kv_usage(self) -> float:
        """The share of the cluster's KV blocks in use now (every worker of both pools)."""
        control = self.runtime.control
        used = total = 0
        for stage in (0, 1):
            for w in control.workers(stage):
                if isinstance(w, WorkerProbes):
                    used += w.kv_in_use()[0]
                    total += self._blocks[stage]
        return min(used / total, 1.0) if total else 0.0

    def stranded(self) -> Stranded:
        """The KV now held for handoffs a missing party blocks (see :class:`Stranded`)."""
        live = self.runtime.table.live
        block = self.runtime.handoffs.block_size
        no_decode = no_prefill = after_cancel = 0
        for rid, req in live.items():
            blocks = -(-req.turn.input_length // block)
            held = req.source_held_ms is not None and req.source_released_ms is None
            if self._pins is not None and held and rid not in self._attached:
                no_decode += blocks
            if (self._pins is not None and req.destination_reserved_ms is not None
                    and rid not in self._prefill_attached):
                no_prefill += blocks
            if rid in self._canceled and (held or req.destination_reserved_ms is not None):
                after_cancel += blocks
        retired = 0
        for stage in (0, 1):
            for w in self.runtime.control.workers(stage):
                for rid in w.kv_in_use()[1] if isinstance(w, WorkerProbes) else ():
                    if rid not in live:
                        retired += -(-self.collector.input_length[rid] // block)
        return Stranded(no_decode, no_prefill, after_cancel, retired)

    def reused_tokens(self, request_id: int) -> int:
        """Prompt tokens of a request served from a prefix cache."""
        return self.collector.reused_of(request_id)

    def summary(self) -> dict[str, JsonValue]:
        """The replay's summary of the requests so far."""
        sla = self.config.sla
        c, now = self.collector, self.runtime.now_ms
        # the workers so far, as the replay counts them at its end (no planner: fixed pools)
        c.prefill_worker_seconds = len(self.runtime.pools[0].workers) * now / 1000.0
        c.decode_worker_seconds = len(self.runtime.pools[1].workers) * now / 1000.0
        summary = build_summary(self.collector, handoff_order=order_for_engine(self.config.engine).value,
                                sla=SlaThresholds(sla.ttft_ms, sla.itl_ms, sla.e2e_ms))
        return summary

    # ------------------------------------------------------------------ the runtime's callbacks

    def _tokens(self, ids: IdArray, now_ms: float) -> None:
        if self._on_tokens is not None and len(ids):
            self._on_tokens(ids.tolist(), now_ms)

    def _held(self, events: tuple[LifecycleEvent, ...], now_ms: float) -> None:
        for ev in events:
            if not isinstance(ev, SourceHeld):
                continue
            rid = cast(int, ev.handoff_id)  # the replay's handoff ids are its request ids
            if self._on_held is not None:
                self._on_held(rid, now_ms)

    def _pair_timer(self, request_id: int) -> Callable[[], None]:
        """A prefill leg's wait for its decode leg (SGLang's bootstrap timeout): timed out unless both came."""
        def fire() -> None:
            if (request_id in self.runtime.table.live
                    and not (request_id in self._attached and request_id in self._prefill_attached)):
                self.runtime.control.deliver(request_id, TimedOut)

        return fire

    def _retired(self, request_id: int) -> None:
        self._known.discard(request_id)
        self._canceled.discard(request_id)
        self._attached.discard(request_id)
        self._prefill_attached.discard(request_id)
        if self._on_end is not None:
            self._on_end(request_id, self.collector.status_of(request_id), self.runtime.now_ms)
