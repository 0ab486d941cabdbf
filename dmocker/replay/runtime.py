"""The disaggregated replay runtime: one handoff coordinator per request, driven to the end.

The coordinator decides *what* happens to a request (dmocker.handoff, compiled-table path);
this module only *executes* its actions against the engines and feeds back the facts and
outcomes, in the reference's order (``ai-dynamo/dynamo``
``lib/mocker/src/replay/offline/disagg.rs``):

* SubmitPrefill / ReserveDestination are routed (round robin) and applied at once; a command
  error becomes ``Outcome(FAILED, message)``.  They park while their pool has no worker.
* ActivateDestination, ReleaseSource and both cancels are deferred while the target worker is
  mid-pass; that worker's pass completion wakes them (commands may only touch queued or
  post-pass state, because passes are computed eagerly at their start).
* StartTransfer is acknowledged Scheduled; a positive delay schedules a TransferComplete event,
  a zero delay completes the transfer in the same drain.  Completions for handoffs that were
  retired meanwhile are pruned.
* A request is *retired* once its decode terminal was seen and its coordinator completed, in
  either order (the decode terminal may precede ReleaseSource).

Per timestamp the phases run in a fixed order (pass completions, transfer completions, injected
facts, arrivals, handoff actions, prefill passes, decode passes), looped to a fixed point; with
work left and no future event the run stops with a :class:`DeadEndError` naming the requests.
"""

from __future__ import annotations

import enum
import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Final, cast

from dmocker.handoff import (
    ActivateDestination,
    CancelDestination,
    CancelSource,
    Canceled,
    Complete,
    Completion,
    DestinationReserved,
    Fact,
    Failed,
    HandoffCoordinator,
    HandoffError,
    HandoffOrder,
    IssuedAction,
    Outcome,
    OutcomeKind,
    ReleaseSource,
    ReserveDestination,
    SourceHeld,
    StartTransfer,
    SubmitPrefill,
    TimedOut,
    TransferCompleted,
)
from dmocker.handoff import FACT_CLASSES, EventLogWriter, load_spec, success_outcomes
from dmocker.engines.hashing import block_hashes_from_trace, block_hashes_from_trace_batch
from dmocker.engines.interface import (
    CommandEffects,
    CommandResult,
    EngineArgs,
    EngineCommandError,
    EngineRequest,
    EngineWorker,
    LifecycleEvent,
    PassCompletion,
    PassPlan,
)

from .collector import Collector, TerminalStatus
from .events import DeadEndError, EventKind, EventQueue, ReplayInvariantError
from .report import request_uuid, stable_json_line
from .routing import RoundRobin, Router
from .timeseries import TimeSeriesRecorder
from .workload import AdmissionQueue, ReadyTurn, Turn

__all__ = ["Phase", "Stage", "DisaggRuntime", "RuntimeResult", "CoordinatorFactory"]

#: Builds a request's coordinator: ``factory(request_id, order, fallback_transfer_delay_ms=...,
#: spec=...)``.  The default is HandoffCoordinator itself; faults and user coordinators plug in here.
CoordinatorFactory = Callable[..., HandoffCoordinator]


class Stage(enum.IntEnum):
    PREFILL = 0
    DECODE = 1


class Phase(enum.Enum):
    """The reference's DisaggPhase."""

    AWAITING_DESTINATION = "awaiting_destination"
    QUEUED_PREFILL = "queued_prefill"
    RUNNING_PREFILL = "running_prefill"
    TRANSFER_PENDING = "transfer_pending"
    READY_DECODE = "ready_decode"
    RUNNING_DECODE = "running_decode"
    CLEANUP_PENDING = "cleanup_pending"
    DONE = "done"


_P: Final = 0  # index of the prefill pool in per-stage tuples
_D: Final = 1  # index of the decode pool


_STAGES: Final = (Stage.PREFILL, Stage.DECODE)
_PASS: Final = int(EventKind.PASS_COMPLETION)
_TRANSFER: Final = int(EventKind.TRANSFER_COMPLETE)
_INJECTED: Final = int(EventKind.INJECTED_FACT)
# The spec's terminal facts (the facts inject() may deliver), from the one class registry.
_INJECT_KINDS: Final = cast(
    "tuple[type[Canceled] | type[Failed] | type[TimedOut], ...]",
    tuple(FACT_CLASSES[name] for name in load_spec().terminal_facts),
)
_INJECT_CODES: Final[dict[type, int]] = {cls: i for i, cls in enumerate(_INJECT_KINDS)}
_TIMER_CODE: Final = 99  # an INJECTED_FACT payload (_TIMER_CODE, timer id): a callback of at()

# Enum members used on the per-action path, bound once: in Python 3.11 reading a member off
# its class (``Phase.DONE``) costs ~5x a module global, and these run ~10 times per request.
_DONE: Final = Phase.DONE
_TRANSFER_PENDING: Final = Phase.TRANSFER_PENDING
_READY_DECODE: Final = Phase.READY_DECODE
_AWAITING_DESTINATION: Final = Phase.AWAITING_DESTINATION
_PREFILL: Final = Stage.PREFILL
_DECODE: Final = Stage.DECODE
_DEST_FIRST: Final = HandoffOrder.DESTINATION_FIRST
# The success acknowledgement of each action, read from the spec (its first allowed outcome).
_OK: Final = success_outcomes(load_spec())
_K_SCHEDULED: Final = _OK[StartTransfer.__name__]
_K_ACTIVATED: Final = _OK[ActivateDestination.__name__]
_K_APPLIED: Final = OutcomeKind.APPLIED
_K_NOOP: Final = OutcomeKind.NOOP
_K_FAILED: Final = OutcomeKind.FAILED
_R_APPLIED: Final = CommandResult.APPLIED
_R_NOOP: Final = CommandResult.NOOP
_SUCCESS: Final = Completion.SUCCESS
_CANCELED: Final = Completion.CANCELED
_EV_TRANSFER: Final = EventKind.TRANSFER_COMPLETE
# Per stage (_P, _D): what routing a SubmitPrefill / ReserveDestination sets and expects
# (phase while routed, the engine's success result, the outcome acknowledged, error wording).
_ACQUIRE: Final = (
    (Phase.QUEUED_PREFILL, CommandResult.SUBMITTED, _OK[SubmitPrefill.__name__], "prefill submission"),
    (Phase.AWAITING_DESTINATION, CommandResult.ACCEPTED, _OK[ReserveDestination.__name__], "destination reservation"),
)


class _Req:
    """Mutable per-request runtime state; exists only while the request is in flight."""

    __slots__ = (
        "rid",
        "turn",
        "coord",
        "phase",
        "counted",
        "prefill_worker",
        "decode_worker",
        "queued",
        "engine_request",
        "arrival_ms",
        "first_admit_ms",
        "prefill_admit_ms",
        "source_held_ms",
        "destination_reserved_ms",
        "destination_activated_ms",
        "decode_admit_ms",
        "source_released_ms",
        "prefill_reused",
        "decode_reused",
        "terminal_ms",
        "held_tokens",
        "routed",
    )

    def __init__(self, turn: Turn, arrival_ms: float, coord: HandoffCoordinator, request: EngineRequest) -> None:
        self.rid = turn.request_id
        self.turn = turn
        self.coord = coord
        self.phase = Phase.QUEUED_PREFILL
        self.counted = True
        self.prefill_worker = -1
        self.decode_worker = -1
        self.queued = 0
        self.engine_request = request
        self.arrival_ms = arrival_ms
        self.first_admit_ms: float | None = None
        self.prefill_admit_ms: float | None = None
        self.source_held_ms: float | None = None
        self.destination_reserved_ms: float | None = None
        self.destination_activated_ms: float | None = None
        self.decode_admit_ms: float | None = None
        self.source_released_ms: float | None = None
        self.prefill_reused: int | None = None
        self.decode_reused: int | None = None
        self.terminal_ms: float | None = None
        self.held_tokens: int | None = None
        self.routed = 0  # bit 1: the prefill router holds it, bit 2: the decode router does


_Queued = tuple[_Req, IssuedAction]


@dataclass(frozen=True, slots=True)
class RuntimeResult:
    """What a finished run hands to the report builder."""

    now_ms: float
    capped: bool
    stale_transfers_pruned: int


class DisaggRuntime:
    """Drives one replay; build it, call :meth:`run`, then read ``collector``."""

    def __init__(
        self,
        *,
        admission: AdmissionQueue,
        prefill_args: EngineArgs,
        decode_args: EngineArgs,
        prefill_workers: list[EngineWorker],
        decode_workers: list[EngineWorker],
        order: HandoffOrder,
        collector: Collector,
        max_sim_time_ms: float | None = None,
        records: IO[str] | None = None,
        events: IO[str] | None = None,
        on_retired: Callable[[int], None] | None = None,
        prefill_router: Router | None = None,
        decode_router: Router | None = None,
        fallback_transfer_delay_ms: float = 0.0,
        sampler: TimeSeriesRecorder | None = None,
        coordinator_factory: CoordinatorFactory | None = None,
    ) -> None:
        self.now_ms = 0.0
        self._sampler = sampler  # time series for the HTML report; None unless asked
        self._make_coord: CoordinatorFactory = coordinator_factory or HandoffCoordinator
        self._timers: dict[int, Callable[[], None]] = {}
        self._pool_gone = [False, False]  # per stage: empty for good (no restart): acquires fail
        self._acquire_hooks: dict[int, Callable[[], bool]] = {}  # request -> "fail this acquire?"
        self._timer_seq = 0
        self._admission = admission
        self._workers: tuple[list[EngineWorker], list[EngineWorker]] = (prefill_workers, decode_workers)
        self._active: tuple[list[int], list[int]] = (
            list(range(len(prefill_workers))),
            list(range(len(decode_workers))),
        )
        self._routers: tuple[Router, Router] = (prefill_router or RoundRobin(), decode_router or RoundRobin())
        self._order = order
        self._block_size = prefill_args.page_tokens
        self._trace_block = admission_block_size(admission)
        self._engine_name = prefill_args.backend.value
        self.collector = collector
        self._cap = max_sim_time_ms
        self._records = records
        self._events_out = events
        self._on_retired = on_retired
        self._fallback = fallback_transfer_delay_ms

        self._events: EventQueue[tuple[int, int]] = EventQueue()
        self._live: dict[int, _Req] = {}
        self._in_flight = 0
        self._stale = 0
        self._stale_pruned = 0
        self._pending: deque[_Queued] = deque()
        self._waiting: tuple[deque[_Queued], deque[_Queued]] = (deque(), deque())
        self._deferred: tuple[dict[int, deque[_Queued]], dict[int, deque[_Queued]]] = ({}, {})
        self._source_output_tokens = 0
        # A worker is "dirty" when something happened to it since its last start_pass
        # returned None (a command, a pass completion): only dirty idle workers are asked to
        # start a pass, because start_pass is a pure function of the worker's state.
        self._dirty: tuple[list[bool], list[bool]] = (
            [True] * len(prefill_workers),
            [True] * len(decode_workers),
        )
        self._spec = load_spec()
        # The one event-log writer (shared with the conformance fixture), fed by the spec.
        self._event_log = EventLogWriter(events.write, self._engine_name, self._spec) if events is not None else None
        self._hash_cache: dict[int, tuple[int, ...]] = {}
        admission.set_prefetch(self._prefetch_hashes)
        if events is not None:
            events.write('{"dmocker_event_log":"1.0"}\n')

    # ------------------------------------------------------------------ main loop

    def run(self) -> RuntimeResult:
        capped = False
        self._drain()
        heap = self._events.raw
        next_ready = self._admission.next_ready_time
        cap = self._cap
        sampler = self._sampler
        while not self._is_done():
            t = next_ready()
            if heap and (t is None or heap[0][0] < t):
                t = heap[0][0]
            if t is None:
                raise DeadEndError(self.now_ms, self._describe_stuck())
            if cap is not None and t > cap:
                capped = True
                break
            if t < self.now_ms:
                raise ReplayInvariantError(f"clock would move backwards: {t} < {self.now_ms}")
            if sampler is not None and t > sampler.next_ms:  # time series: once per bucket
                sampler.sample_until(t)
            self.now_ms = t
            self._drain()
        n_p, n_d = len(self._workers[0]), len(self._workers[1])
        self.collector.add_worker_seconds(n_p * self.now_ms / 1000.0, n_d * self.now_ms / 1000.0)
        return RuntimeResult(self.now_ms, capped, self._stale_pruned)

    def inject(self, t_ms: float, request_id: int, kind: type[Canceled] | type[Failed] | type[TimedOut]) -> None:
        """Deliver a terminal fact to a request's coordinator at ``t_ms`` (if it is still live).

        The replay itself never produces these (neither does the reference offline); tests use
        this to exercise cancellation and timeouts mid-flight.
        """
        code = _INJECT_CODES[kind]
        self._events.push(t_ms, EventKind.INJECTED_FACT, (code, request_id))

    def _apply_injected(self) -> bool:
        changed = False
        now = self.now_ms
        while True:
            popped, payload = self._events.pop_ready(now, EventKind.INJECTED_FACT)
            if not popped:
                return changed
            assert payload is not None
            code, rid = payload
            if code == _TIMER_CODE:
                self._timers.pop(rid)()
                changed = True
                continue
            req = self._live.get(rid)
            if req is None:
                continue
            cls = _INJECT_KINDS[code]
            status = TerminalStatus.CANCELED if cls is Canceled else TerminalStatus.FAILED
            if self.collector.on_terminal(rid, status, now):
                req.terminal_ms = now
            self._fact(req, cls(rid))
            changed = True

    def write_incomplete_records(self) -> None:
        """Records of requests still in flight at the end (time cap), in request-id order."""
        if self._records is None:
            return
        for rid in sorted(self._live):
            self._write_record(self._live[rid])

    @property
    def in_flight(self) -> int:
        """Requests arrived and not yet terminal (time-series probe)."""
        return self._in_flight

    @property
    def source_output_tokens(self) -> int:
        return self._source_output_tokens

    def _drain(self) -> None:
        """The per-timestamp drain (phases in the fixed order above), looped to a fixed point.

        Each phase is guarded by a cheap "anything to do?" test so that an idle phase costs a
        comparison, not a call: the drain runs once per distinct timestamp.
        """
        heap = self._events.raw
        admission = self._admission
        dirty_p, dirty_d = self._dirty
        sweeps = 0
        while True:
            now = self.now_ms
            changed = False
            if heap:
                rank = heap[0][1]
                if self._stale > 32 or rank == _TRANSFER:
                    changed = self._prune_stale_transfers()
                if heap and heap[0][0] == now:
                    if heap[0][1] == _PASS:
                        changed = self._apply_pass_completions() or changed
                    if heap and heap[0][0] == now and heap[0][1] == _TRANSFER:
                        changed = self._apply_transfer_completions() or changed
                    if heap and heap[0][0] == now and heap[0][1] == _INJECTED:
                        changed = self._apply_injected() or changed
            if admission.has_ready(now):
                changed = self._release_arrivals() or changed
            if self._pending:
                changed = self._drive_actions() or changed
            if True in dirty_p:
                changed = self._drive_pool(Stage.PREFILL) or changed
            if True in dirty_d:
                changed = self._drive_pool(Stage.DECODE) or changed
            if not changed:
                return
            # Skip the confirming sweep when it provably finds nothing to do: every phase
            # above is guarded by exactly one of these tests, so this is the same fixed point.
            if (
                not self._pending
                and True not in dirty_p
                and True not in dirty_d
                and not (heap and (heap[0][0] == now or heap[0][1] == _TRANSFER or self._stale > 32))
                and not admission.has_ready(now)
            ):
                return
            sweeps += 1
            if sweeps > 1_000_000:
                raise ReplayInvariantError("drain did not reach a fixed point (a phase reports progress forever)")

    def _is_done(self) -> bool:
        return (
            self._in_flight == 0
            and not self._live
            and len(self._events) == 0
            and not self._pending
            and not self._waiting[0]
            and not self._waiting[1]
            and self._admission.is_drained()
        )

    def _describe_stuck(self) -> list[str]:
        out: list[str] = []
        for rid in sorted(self._live):
            r = self._live[rid]
            where = []
            if r.prefill_worker >= 0:
                where.append(f"prefill worker {r.prefill_worker}")
            if r.decode_worker >= 0:
                where.append(f"decode worker {r.decode_worker}")
            out.append(
                f"request {rid} (phase {r.phase.value}, handoff {r.coord.state_label()}"
                + (", " + ", ".join(where) if where else "")
                + f", input_length {r.turn.input_length})"
            )
        if not out and self._admission.has_pending_release():
            out.append("unreleased workload turns with no future arrival time")
        return out

    # ------------------------------------------------------------------ phases

    def _prune_stale_transfers(self) -> bool:
        removed = False
        events = self._events
        while True:
            top = events.peek()
            if top is None or top.kind is not EventKind.TRANSFER_COMPLETE:
                break
            payload = events.peek_payload()
            assert payload is not None
            if payload[1] in self._live:
                break
            events.pop_top()
            self._stale = max(self._stale - 1, 0)
            self._stale_pruned += 1
            removed = True
        if self._stale > 32 and self._stale * 2 > len(events):
            live = self._live
            dropped = events.retain(
                lambda kind, p: not (kind is EventKind.TRANSFER_COMPLETE and p[1] not in live)
            )
            self._stale_pruned += dropped
            self._stale = 0
            removed = removed or dropped > 0
        return removed

    def _apply_pass_completions(self) -> bool:
        changed = False
        now = self.now_ms
        heap = self._events.raw
        workers = self._workers
        dirty = self._dirty
        while heap and heap[0][0] == now and heap[0][1] == _PASS:
            stage, idx = heapq.heappop(heap)[3]
            completion = workers[stage][idx].finish_pass()
            dirty[stage][idx] = True
            if self._deferred[stage]:
                self._wake_deferred(stage, idx)
            self._process_pass(_STAGES[stage], completion, idx)
            changed = True
        return changed

    def _apply_transfer_completions(self) -> bool:
        changed = False
        now = self.now_ms
        while True:
            popped, payload = self._events.pop_ready(now, EventKind.TRANSFER_COMPLETE)
            if not popped:
                return changed
            assert payload is not None
            req = self._live.get(payload[1])
            if req is None:
                self._stale = max(self._stale - 1, 0)
                self._stale_pruned += 1
                continue
            self._fact(req, TransferCompleted(req.rid))
            changed = True

    def _release_arrivals(self) -> bool:
        ready = self._admission.drain_ready(self.now_ms)
        for item in ready:
            self._on_arrival(item)
        return bool(ready)

    def _drive_actions(self) -> bool:
        changed = False
        pending = self._pending
        popleft = pending.popleft
        executors = _EXECUTORS
        while pending:
            req, issued = popleft()
            req.queued -= 1
            if req.phase is _DONE:  # pragma: no cover - removed on retirement
                continue
            # One dict lookup on the action class (see _EXECUTORS); False = parked or deferred.
            execute = executors.get(type(issued.action))
            if execute is None:  # pragma: no cover - closed set
                execute = _executor(issued)
            if execute(self, req, issued):
                changed = True
        return changed

    def _drive_pool(self, stage: Stage) -> bool:
        changed = False
        workers = self._workers[stage]
        dirty = self._dirty[stage]
        now = self.now_ms
        progress = True
        while progress:
            progress = False
            for idx in self._active[stage]:
                if not dirty[idx]:
                    continue
                dirty[idx] = False
                w = workers[idx]
                if w.busy:
                    continue  # its pass completion marks it dirty again
                plan = w.start_pass(now)
                if plan is None:
                    continue
                progress = changed = True
                if plan.admissions:
                    self._on_pass_start(stage, plan)
                if plan.end_ms <= now:
                    completion = w.finish_pass()
                    dirty[idx] = True
                    self._wake_deferred(stage, idx)
                    self._process_pass(stage, completion, idx)
                else:
                    self._events.push(plan.end_ms, EventKind.PASS_COMPLETION, (int(stage), idx))
        return changed

    # ------------------------------------------------------------------ passes

    def _on_pass_start(self, stage: Stage, plan: PassPlan) -> None:
        now = self.now_ms
        live = self._live
        collector = self.collector
        for adm in plan.admissions:
            req = live.get(adm.request_id)
            if req is None:
                raise ReplayInvariantError(f"admission of unknown request {adm.request_id}")
            collector.on_admit(req.rid, adm.reused_input_tokens)
            if req.first_admit_ms is None:
                req.first_admit_ms = now
            if stage == Stage.PREFILL:
                if req.prefill_admit_ms is None:
                    req.prefill_admit_ms = now
                    req.prefill_reused = adm.reused_input_tokens
                if req.phase is Phase.QUEUED_PREFILL:
                    req.phase = Phase.RUNNING_PREFILL
            else:
                collector.on_decode_admit(req.rid)
                if req.decode_admit_ms is None:
                    req.decode_admit_ms = now
                    req.decode_reused = adm.reused_input_tokens
                if req.phase is Phase.READY_DECODE:
                    req.phase = Phase.RUNNING_DECODE
                elif req.phase is not Phase.RUNNING_DECODE:
                    raise ReplayInvariantError(
                        f"decode admission of request {req.rid} in phase {req.phase.value}"
                    )

    def _process_pass(self, stage: Stage, done: PassCompletion, idx: int) -> None:
        live = self._live
        now = self.now_ms
        if stage == Stage.PREFILL:
            self._source_output_tokens += int(done.emitted.shape[0])
            for rid in done.rejected:
                req = live.get(rid)
                if req is None:
                    continue
                if self.collector.on_terminal(rid, TerminalStatus.REJECTED, now):
                    req.terminal_ms = now
                self._fact(req, Failed(rid))
            if done.lifecycle:
                self._lifecycle(done.lifecycle)
            return
        # Decode: tokens, then terminals, then lifecycle facts (the reference's order).
        self.collector.on_tokens(done.emitted, now, idx, done.lockstep)
        if done.finished.shape[0] == 0 and not done.rejected:
            if done.lifecycle:
                self._lifecycle(done.lifecycle)
            return
        for rid in done.finished.tolist():
            req = live.get(rid)
            if req is None:
                continue
            if self.collector.on_terminal(rid, TerminalStatus.COMPLETED, now):
                req.terminal_ms = now
            self._routers[_D].on_request_done(rid)
            req.routed &= 1
            self._finish_logical(req, remove_actions=False)
        for rid in done.rejected:
            req = live.get(rid)
            if req is None:
                continue
            if self.collector.on_terminal(rid, TerminalStatus.REJECTED, now):
                req.terminal_ms = now
            self._finish_logical(req, remove_actions=False)
        if done.lifecycle:
            self._lifecycle(done.lifecycle)

    def _lifecycle(self, events: tuple[LifecycleEvent, ...]) -> None:
        for ev in events:
            req = self._live.get(ev.handoff_id)  # type: ignore[call-overload]
            if req is None:
                raise ReplayInvariantError(f"lifecycle event for unknown handoff {ev.handoff_id!r}")
            if isinstance(ev, SourceHeld):
                if req.source_held_ms is None:
                    req.source_held_ms = self.now_ms
                req.held_tokens = ev.transfer_timing.full_prompt_tokens
            elif isinstance(ev, DestinationReserved):
                if req.destination_reserved_ms is None:
                    req.destination_reserved_ms = self.now_ms
            self._fact(req, ev)

    # ------------------------------------------------------------------ arrivals & retirement

    def _prefetch_hashes(self, turns: list[Turn]) -> None:
        """Hash upcoming first turns in one vectorised batch (same values as one by one)."""
        hashes = block_hashes_from_trace_batch(
            [t.hash_ids for t in turns], [t.input_length for t in turns], self._trace_block, self._block_size
        )
        cache = self._hash_cache
        for t, h in zip(turns, hashes):
            cache[t.request_id] = h

    def _on_arrival(self, item: ReadyTurn) -> None:
        turn = item.turn
        rid = turn.request_id
        if rid in self._live:
            raise ReplayInvariantError(f"request {rid} is already active")
        hashes = self._hash_cache.pop(rid, None)
        if hashes is None:
            hashes = block_hashes_from_trace(turn.hash_ids, turn.input_length, self._trace_block, self._block_size)
        request = EngineRequest(rid, turn.input_length, turn.output_length, hashes)
        coord = self._make_coord(rid, self._order, fallback_transfer_delay_ms=self._fallback, spec=self._spec)
        req = _Req(turn, item.arrival_ms, coord, request)
        if self._order is _DEST_FIRST:
            req.phase = _AWAITING_DESTINATION
        self.collector.on_arrival(rid, item.arrival_ms, turn.input_length)
        self._live[rid] = req
        self._in_flight += 1
        logging = self._events_out is not None
        prev = coord.state if logging else -1
        try:
            actions = coord.start()
        except HandoffError as exc:  # pragma: no cover - start never rejects
            raise ReplayInvariantError(f"request {rid}: coordinator start failed: {exc}") from exc
        if logging:
            self._log(req, prev, "start", None)
        if actions:  # queue what was issued (inlined: ~6 calls a request issue an action)
            req.queued += len(actions)
            for a in actions:
                self._pending.append((req, a))

    def _finish_logical(self, req: _Req, *, remove_actions: bool) -> None:
        """The request's decode ended (or its handoff was canceled): free its logical slot."""
        if not req.counted or req.phase is Phase.DONE:
            raise ReplayInvariantError(f"request {req.rid} finalized more than once")
        if req.phase is Phase.TRANSFER_PENDING:
            self._stale += 1
        req.counted = False
        req.phase = Phase.CLEANUP_PENDING
        self._in_flight -= 1
        if remove_actions:
            self._remove_actions(req)
        self._admission.on_request_terminal(req.rid, self.now_ms)
        self._retire(req)

    def _retire(self, req: _Req) -> None:
        if req.counted or not req.coord.is_complete:
            return
        if req.queued:
            raise ReplayInvariantError(f"completed handoff {req.rid} still has {req.queued} queued action(s)")
        req.phase = Phase.DONE
        if req.routed:  # a failed, rejected or canceled request frees its router state too
            self._release_routes(req)
        if self._acquire_hooks:
            self._acquire_hooks.pop(req.rid, None)
        del self._live[req.rid]
        if self._records is not None:
            self._write_record(req)
        if self._on_retired is not None:
            self._on_retired(req.rid)

    # ------------------------------------------------------------------ fault hooks
    # Used by dmocker.replay.faults (only when faults are injected): timed callbacks, terminal
    # facts delivered from outside, and a worker leaving and rejoining its pool.

    def at(self, t_ms: float, callback: Callable[[], None]) -> None:
        """Run ``callback()`` at ``t_ms``, in the injected-fact phase (in scheduling order)."""
        key = self._timer_seq
        self._timer_seq = key + 1
        self._timers[key] = callback
        self._events.push(t_ms, EventKind.INJECTED_FACT, (_TIMER_CODE, key))

    def deliver(self, request_id: int, kind: type[Canceled] | type[Failed] | type[TimedOut]) -> tuple[bool, bool]:
        """Deliver a terminal fact now: (the request was live, its terminal status was recorded here)."""
        req = self._live.get(request_id)
        if req is None:
            return False, False
        status = TerminalStatus.CANCELED if kind is Canceled else TerminalStatus.FAILED
        recorded = self.collector.on_terminal(request_id, status, self.now_ms)
        if recorded:
            req.terminal_ms = self.now_ms
        self._fact(req, kind(request_id))
        return True, recorded

    def remove_worker(self, stage: int, idx: int, replacement: EngineWorker) -> list[int]:
        """Worker ``idx`` of ``stage`` leaves its pool at once (a crash): its running pass and KV
        are lost (``replacement``, an empty worker, takes its slot), routing skips it, actions
        deferred behind its pass run now against the empty worker.  Returns the live requests
        that still depend on it (sources not yet released; any destination), in id order."""
        active = self._active[stage]
        if idx in active:
            active.remove(idx)
        self._events.retain(lambda kind, p: not (kind is EventKind.PASS_COMPLETION and p == (stage, idx)))
        self._workers[stage][idx] = replacement
        self._dirty[stage][idx] = False
        self._wake_deferred(stage, idx)
        out: list[int] = []
        for rid in sorted(self._live):
            r = self._live[rid]
            if stage == _P and r.prefill_worker == idx and r.source_released_ms is None:
                out.append(rid)
            elif stage == _D and r.decode_worker == idx:
                out.append(rid)
        return out

    def add_worker(self, stage: int, idx: int) -> None:
        """Worker ``idx`` of ``stage`` (re)joins its pool; actions parked on an empty pool resume."""
        active = self._active[stage]
        if idx not in active:
            active.append(idx)
            active.sort()
        self._dirty[stage][idx] = True
        parked = self._waiting[stage]
        if parked:
            self._pending.extend(parked)
            parked.clear()

    def on_acquire(self, request_id: int, hook: Callable[[], bool]) -> None:
        """Ask ``hook()`` before each SubmitPrefill / ReserveDestination of the request; True:
        the command fails (acknowledged FAILED, not executed) and the hook is dropped."""
        self._acquire_hooks[request_id] = hook

    def _acquire_fails(self, req: _Req, issued: IssuedAction, stage: int) -> bool:
        hook = self._acquire_hooks.get(req.rid)
        if hook is None or not hook():
            return False
        del self._acquire_hooks[req.rid]
        self._ack(req, issued, Outcome(_K_FAILED, f"injected failure of the {_ACQUIRE[stage][3]}"))
        return True

    def set_pool_gone(self, stage: int) -> None:
        """The pool of ``stage`` is empty and stays so: parked and future acquires fail."""
        self._pool_gone[stage] = True
        parked = self._waiting[stage]
        if parked:
            self._pending.extend(parked)
            parked.clear()

    def workers(self, stage: int) -> tuple[EngineWorker, ...]:
        return tuple(self._workers[stage])

    def routers(self) -> tuple[Router, Router]:
        return self._routers

    def live_requests(self) -> list[int]:
        return sorted(self._live)

    def coordinator_of(self, request_id: int) -> HandoffCoordinator | None:
        req = self._live.get(request_id)
        return None if req is None else req.coord

    @property
    def routed_unreleased(self) -> int:
        """Router holds not yet released (requests still live); 0 at the end of a complete run."""
        return sum(bin(r.routed).count("1") for r in self._live.values())

    def _release_routes(self, req: _Req) -> None:
        if req.routed & 1:
            self._routers[_P].on_request_done(req.rid)
        if req.routed & 2:
            self._routers[_D].on_request_done(req.rid)
        req.routed = 0

    # ------------------------------------------------------------------ coordinator I/O

    def _fact(self, req: _Req, fact: Fact) -> None:
        coord = req.coord
        logging = self._events_out is not None
        prev = coord.state if logging else -1  # the log needs the state the fact arrived in
        try:
            actions = coord.on_fact(fact)
        except HandoffError as exc:
            raise ReplayInvariantError(f"request {req.rid}: coordinator rejected {type(fact).__name__}: {exc}") from exc
        if logging:
            self._log(req, prev, type(fact).__name__, fact)
        if actions:  # queue what was issued (inlined: ~6 calls a request issue an action)
            req.queued += len(actions)
            for a in actions:
                self._pending.append((req, a))

    def _ack(self, req: _Req, issued: IssuedAction, outcome: Outcome) -> None:
        """Report any outcome (a FAILED one also records the request's terminal status)."""
        if outcome.kind is _K_FAILED:
            if self.collector.on_terminal(req.rid, TerminalStatus.FAILED, self.now_ms):
                req.terminal_ms = self.now_ms
        self._ack_ok(req, issued, outcome.kind, outcome)

    def _ack_ok(self, req: _Req, issued: IssuedAction, kind: OutcomeKind, outcome: Outcome | None = None) -> None:
        """Hand an action's outcome to the coordinator and queue what it issues.

        Without ``outcome`` (a message-less kind other than FAILED; the replay's ~5
        acknowledgements per request) the coordinator's lean ``on_outcome_kind`` answers
        exactly as ``on_action_outcome`` would, without building an Outcome.
        """
        coord = req.coord
        logging = self._events_out is not None
        prev = coord.state if logging else -1
        try:
            if outcome is None:
                actions = coord.on_outcome_kind(issued.id, kind)
            else:
                actions = coord.on_action_outcome(issued.id, outcome)
        except HandoffError as exc:
            raise ReplayInvariantError(
                f"request {req.rid}: coordinator rejected outcome {kind.value} for "
                f"{type(issued.action).__name__}: {exc}"
            ) from exc
        if logging:
            self._log(req, prev, f"{type(issued.action).__name__}.{kind.value}", None)
        if actions:  # queue what was issued (inlined: ~6 calls a request issue an action)
            req.queued += len(actions)
            for a in actions:
                self._pending.append((req, a))

    def _log(self, req: _Req, prev: int, event: str, fact: Fact | None) -> None:
        writer = self._event_log
        if writer is not None:
            writer.log(self.now_ms, req.coord, prev, event, fact, req.prefill_worker, req.decode_worker)

    # ------------------------------------------------------------------ action execution

    def _wake_deferred(self, stage: int, idx: int) -> None:
        queued = self._deferred[stage].pop(idx, None)
        if queued:
            self._pending.extend(queued)

    def _defer(self, req: _Req, issued: IssuedAction, stage: Stage, idx: int) -> bool:
        self._deferred[stage].setdefault(idx, deque()).append((req, issued))
        req.queued += 1
        return False

    def _park(self, req: _Req, issued: IssuedAction, stage: Stage) -> bool:
        self._waiting[stage].append((req, issued))
        req.queued += 1
        return False

    def _remove_actions(self, req: _Req) -> None:
        """Drop every queued, parked or deferred action of a request that is being torn down."""
        if not req.queued:
            return

        def keep(q: deque[_Queued]) -> None:
            kept = [item for item in q if item[0] is not req]
            q.clear()
            q.extend(kept)

        keep(self._pending)
        for stage in (0, 1):
            keep(self._waiting[stage])
            d = self._deferred[stage]
            for key in sorted(d):
                keep(d[key])
                if not d[key]:
                    del d[key]
        req.queued = 0

    def _submit_prefill(self, req: _Req, issued: IssuedAction) -> bool:
        return self._acquire(req, issued, _P)

    def _reserve_destination(self, req: _Req, issued: IssuedAction) -> bool:
        return self._acquire(req, issued, _D)

    def _acquire(self, req: _Req, issued: IssuedAction, stage: int) -> bool:
        """Route SubmitPrefill (prefill pool) or ReserveDestination (decode pool) and apply it.

        The two commands differ only in the engine call, the phase, the expected result and the
        worker field they set; everything else (park while the pool is empty, round robin, mark
        the worker dirty, FAILED on a command error, acknowledge, forward lifecycle) is shared.
        """
        if self._acquire_hooks and self._acquire_fails(req, issued, stage):
            return True
        active = self._active[stage]
        if not active:
            if self._pool_gone[stage]:  # crashed for good: the request cannot be served
                self._ack(req, issued, Outcome(_K_FAILED, f"no {_STAGES[stage].name.lower()} worker left"))
                return True
            return self._park(req, issued, _STAGES[stage])
        phase, expected, ok, what = _ACQUIRE[stage]
        req.phase = phase
        idx = self._routers[stage].pick(req.rid, active)
        req.routed |= stage + 1
        self._dirty[stage][idx] = True
        worker = self._workers[stage][idx]
        try:
            if stage == _P:
                effects = worker.submit_handoff_prefill(req.rid, req.engine_request)
            else:
                effects = worker.reserve_destination(req.rid, req.engine_request)
        except EngineCommandError as exc:
            self._ack(req, issued, Outcome(_K_FAILED, str(exc)))
            return True
        if effects.result is not expected:
            raise ReplayInvariantError(f"{what} of request {req.rid} returned {effects.result.value}")
        if stage == _P:
            req.prefill_worker = idx
        else:
            req.decode_worker = idx
        self._ack_ok(req, issued, ok)
        if effects.lifecycle:
            self._lifecycle(effects.lifecycle)
        return True

    def _start_transfer(self, req: _Req, issued: IssuedAction) -> bool:
        action = issued.action
        assert isinstance(action, StartTransfer)
        self._ack_ok(req, issued, _K_SCHEDULED)
        req.phase = _TRANSFER_PENDING
        if action.delay_ms > 0.0:
            self._events.push(self.now_ms + action.delay_ms, _EV_TRANSFER, (0, req.rid))
        else:
            self._fact(req, TransferCompleted(req.rid))
        return True

    def _activate_destination(self, req: _Req, issued: IssuedAction) -> bool:
        idx = req.decode_worker
        if idx < 0:
            raise ReplayInvariantError(f"activation of request {req.rid} with no decode worker")
        w = self._workers[_D][idx]
        if w.busy:
            return self._defer(req, issued, _DECODE, idx)
        try:
            self._dirty[_D][idx] = True
            effects = w.activate_destination(req.rid)
        except EngineCommandError as exc:
            self._ack(req, issued, Outcome(_K_FAILED, str(exc)))
            return True
        if effects.result is not _R_APPLIED:
            self._ack(req, issued, Outcome(_K_FAILED, "destination activation was not applied"))
            return True
        req.phase = _READY_DECODE
        req.destination_activated_ms = self.now_ms
        self._ack_ok(req, issued, _K_ACTIVATED)
        if effects.lifecycle:
            self._lifecycle(effects.lifecycle)
        return True

    def _release_source(self, req: _Req, issued: IssuedAction) -> bool:
        if req.prefill_worker < 0:
            raise ReplayInvariantError(f"release of request {req.rid} with no prefill worker")
        return self._cleanup(req, issued, _PREFILL, req.prefill_worker, ReleaseSource)

    def _cancel_source(self, req: _Req, issued: IssuedAction) -> bool:
        if req.prefill_worker < 0:
            self._ack_ok(req, issued, _K_NOOP)
            return True
        return self._cleanup(req, issued, _PREFILL, req.prefill_worker, CancelSource)

    def _cancel_destination(self, req: _Req, issued: IssuedAction) -> bool:
        if req.decode_worker < 0:
            self._ack_ok(req, issued, _K_NOOP)
            return True
        return self._cleanup(req, issued, _DECODE, req.decode_worker, CancelDestination)

    def _complete_action(self, req: _Req, issued: IssuedAction) -> bool:
        self._complete(req)
        return True

    def _cleanup(
        self,
        req: _Req,
        issued: IssuedAction,
        stage: Stage,
        idx: int,
        cls: type[ReleaseSource] | type[CancelSource] | type[CancelDestination],
    ) -> bool:
        """Run one source/destination cleanup command on worker ``idx`` of ``stage``.

        ReleaseSource, CancelSource and CancelDestination share the same shape (defer while the
        worker is mid-pass, mark it dirty, run the command, acknowledge with the cleanup outcome,
        forward lifecycle effects); only the engine command differs, so it is chosen here.
        False when the action was deferred behind a busy worker.
        """
        w = self._workers[stage][idx]
        if w.busy:
            return self._defer(req, issued, stage, idx)
        self._dirty[stage][idx] = True
        if cls is ReleaseSource:
            effects = w.release_source(req.rid)
            req.source_released_ms = self.now_ms
        elif cls is CancelSource:
            effects = w.cancel_source(req.rid)
        else:
            effects = w.cancel_destination(req.rid)
        # APPLIED or NOOP acknowledge as such; anything else is an engine bug.  Compared by
        # identity, not looked up in a dict: hashing an enum member is a Python-level call.
        result = effects.result
        if result is _R_APPLIED:
            self._ack_ok(req, issued, _K_APPLIED)
        elif result is _R_NOOP:
            self._ack_ok(req, issued, _K_NOOP)
        else:
            raise ReplayInvariantError(f"{cls.__name__} for request {req.rid} returned {result.value}")
        if effects.lifecycle:
            self._lifecycle(effects.lifecycle)
        return True

    def _complete(self, req: _Req) -> None:
        completion = req.coord.completion
        if completion is _SUCCESS:
            self._routers[_P].on_request_done(req.rid)
            req.routed &= 2
            self._retire(req)
        elif completion is _CANCELED:
            if self.collector.on_terminal(req.rid, TerminalStatus.CANCELED, self.now_ms):
                req.terminal_ms = self.now_ms
            if req.counted:
                self._finish_logical(req, remove_actions=True)
            else:
                self._remove_actions(req)
                self._retire(req)
        else:
            raise ReplayInvariantError(f"request {req.rid}: Complete without a completion")

    # ------------------------------------------------------------------ records

    def _write_record(self, req: _Req) -> None:
        out = self._records
        assert out is not None
        c = self.collector
        rid = req.rid
        n, first_ms, second_ms, last_ms = c.output_of(rid)  # settled (lazy lockstep cohorts)
        first = first_ms if n > 0 else None
        last = last_ms if n > 0 else None
        second = second_ms if n > 1 else None
        status = TerminalStatus(int(c.status[rid]))
        completed = status is TerminalStatus.COMPLETED
        rec: dict[str, object] = {
            "request_id": rid,
            "uuid": request_uuid(rid),
            "session_index": req.turn.session_index,
            "turn_index": req.turn.turn_index,
            "arrival_time_ms": req.arrival_ms,
            "first_admit_ms": req.first_admit_ms,
            "terminal_time_ms": req.terminal_ms,
            "first_token_ms": first,
            "last_token_ms": last,
            "ttft_ms": (first - req.arrival_ms) if first is not None and completed else None,
            "ttst_ms": (second - first) if second is not None and first is not None and completed else None,
            "e2e_latency_ms": (last - req.arrival_ms) if last is not None and completed else None,
            "itl_ms": ((last - first) / (n - 1)) if n > 1 and last is not None and first is not None else None,
            "input_length": req.turn.input_length,
            "requested_output_length": req.turn.output_length,
            "output_length": n,
            "reused_input_tokens": int(c.reused[rid]),
            "prefill_worker_idx": req.prefill_worker if req.prefill_worker >= 0 else None,
            "decode_worker_idx": req.decode_worker if req.decode_worker >= 0 else None,
            "prefill_admit_ms": req.prefill_admit_ms,
            "source_held_ms": req.source_held_ms,
            "destination_reserved_ms": req.destination_reserved_ms,
            "destination_activated_ms": req.destination_activated_ms,
            "decode_admit_ms": req.decode_admit_ms,
            "source_released_ms": req.source_released_ms,
            "prefill_reused_input_tokens": req.prefill_reused,
            "decode_reused_input_tokens": req.decode_reused,
            "terminal_status": status.label,
        }
        out.write(stable_json_line(rec))


_Executor = Callable[[DisaggRuntime, _Req, IssuedAction], bool]
# Action class -> the runtime method that executes it (the dispatch of _drive_actions).
_EXECUTORS: Final[dict[type, _Executor]] = {
    SubmitPrefill: DisaggRuntime._submit_prefill,
    ReserveDestination: DisaggRuntime._reserve_destination,
    StartTransfer: DisaggRuntime._start_transfer,
    ActivateDestination: DisaggRuntime._activate_destination,
    ReleaseSource: DisaggRuntime._release_source,
    CancelSource: DisaggRuntime._cancel_source,
    CancelDestination: DisaggRuntime._cancel_destination,
    Complete: DisaggRuntime._complete_action,
}


def _executor(issued: IssuedAction) -> _Executor:
    execute = _EXECUTORS.get(type(issued.action))
    if execute is None:  # pragma: no cover - closed set
        raise ReplayInvariantError(f"unknown action {issued.action!r}")
    return execute


def admission_block_size(admission: AdmissionQueue) -> int:
    return admission.trace_block_size
