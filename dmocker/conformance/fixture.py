"""The per-backend one-request handoff conformance fixture (reference ``run_handoff_conformance``).

One request (tokens 0..7: two full blocks of 4, two output tokens, arrival 0) goes through one
prefill and one decode worker of the engine, driven by our HandoffCoordinator, once per
transfer-timing mode.  The run captures what the reference's capture does (``ai-dynamo/dynamo``
``lib/mocker/src/replay/offline/disagg.rs``, its handoff conformance run):

* the normalized lifecycle events in the order they happen;
* source output tokens (the prefill's one token), destination output tokens, completed requests;
* KV "stored" blocks on the decode worker in the ReserveDestination effects (must be 0), in the
  ActivateDestination effects (must be > 0), and later decode passes re-storing an activation
  hash (must be 0) — a reservation publishes nothing, an activation publishes the prompt;
* whether the source engine, the destination engine and the driver are drained at the end;

and ``validate`` applies every rule of the reference's ``validate()``.  As a bonus the run also
writes the native event log and checks it with the streaming validator.

The driver is a minimal discrete-event loop for one request: the drain order within a timestamp
follows the reference (pass completions, transfer completions, handoff actions, prefill
passes, decode passes, to a fixed point), deferring activate/release/cancel while the target
worker is mid-pass, as the reference runtime does.  It is deliberately not the replay runtime: a fixture should depend on
the engines and the coordinator only, so a failure points at one of them.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from typing import Final

from dmocker._atomic import write_atomic
from dmocker.conformance.stream import check_native
from dmocker.conformance.results import ConformanceResult
from dmocker.conformance.validator import Validator
from dmocker.handoff import (
    ActivateDestination,
    CancelDestination,
    CancelSource,
    Complete,
    Completion,
    EventLogWriter,
    Fact,
    HandoffCoordinator,
    HandoffOrder,
    IssuedAction,
    Outcome,
    OutcomeKind,
    ReleaseSource,
    ReserveDestination,
    StartTransfer,
    SubmitPrefill,
    TransferCompleted,
    TransferTimingMode,
    load_spec,
    order_for_engine,
    success_outcomes,
)
from dmocker.engines.hashing import block_hashes_from_tokens
from dmocker.engines.interface import (
    CommandEffects,
    CommandResult,
    EngineArgs,
    EngineCommandError,
    EngineRequest,
    EngineWorker,
    KvEvent,
    KvStored,
    WorkerType,
)
from dmocker.engines.registry import engine_names, make_worker

REQUEST_ID: Final = 0
TOKENS: Final = tuple(range(8))
MAX_OUTPUT_TOKENS: Final = 2
BLOCK_SIZE: Final = 4
_MAX_STEPS: Final = 10_000  # a one-request run takes a few dozen; more is a livelock
_OK: Final = success_outcomes()  # action name -> its success acknowledgement (spec)



def _normalized_names() -> dict[str, str]:
    """Observable kind -> the reference's normalized lifecycle event, for the kinds a lifecycle
    lists (``source_held`` -> ``SourceHeld``): the spec's ``lifecycles`` name them in CamelCase."""
    spec = load_spec()
    listed = {name for _, names in spec.lifecycles for name in names}
    camel = {kind: "".join(part.capitalize() for part in kind.split("_")) for kind in spec.observable_kinds}
    return {kind: name for kind, name in camel.items() if name in listed}


_NORMALIZED: Final = _normalized_names()


def fixture_args(engine: str, worker_type: WorkerType, mode: TransferTimingMode) -> EngineArgs:
    """The reference fixture's engine arguments (small pools, block size 4, a 1 GB/s link)."""
    return EngineArgs(
        engine=engine,
        worker_type=worker_type,
        block_size=BLOCK_SIZE,
        num_gpu_blocks=64,
        max_num_batched_tokens=64,
        max_num_seqs=2,
        speedup_ratio=1000.0,
        decode_speedup_ratio=1000.0,
        kv_transfer_bandwidth=1.0,
        kv_bytes_per_token=1_000_000,
        kv_transfer_timing_mode=mode,
    )


@dataclass(frozen=True, slots=True)
class FixtureCapture:
    """What one fixture run observed (the reference's ``HandoffConformanceCapture``)."""

    engine: str
    mode: TransferTimingMode
    order: HandoffOrder
    lifecycle: tuple[str, ...]
    source_output_tokens: int
    destination_output_tokens: int
    completed_requests: int
    stored_before_activation: int
    stored_on_activation: int
    repeated_activation_hashes_after_activation: int
    source_drained: bool
    destination_drained: bool
    driver_drained: bool
    events: tuple[str, ...] = field(repr=False)
    end_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class FixtureVerdict:
    capture: FixtureCapture
    failures: tuple[str, ...]
    log: ConformanceResult

    @property
    def ok(self) -> bool:
        return not self.failures


def validate(capture: FixtureCapture, log: ConformanceResult) -> tuple[str, ...]:
    """Every rule of the reference's ``validate()``, plus: the event log conforms."""
    failures: list[str] = []
    expected_order = order_for_engine(capture.engine)
    if capture.order is not expected_order:
        failures.append(f"order {capture.order.value} does not match engine {capture.engine} ({expected_order.value})")
    expected = load_spec().lifecycle(expected_order)
    if capture.lifecycle != expected:
        failures.append(f"lifecycle {list(capture.lifecycle)} != expected {list(expected)}")
    for name, got, want in (
        ("source_output_tokens", capture.source_output_tokens, 1),
        ("destination_output_tokens", capture.destination_output_tokens, MAX_OUTPUT_TOKENS),
        ("completed_requests", capture.completed_requests, 1),
        ("stored_before_activation", capture.stored_before_activation, 0),
        ("repeated_activation_hashes_after_activation", capture.repeated_activation_hashes_after_activation, 0),
    ):
        if got != want:
            failures.append(f"{name} = {got}, expected {want}")
    if capture.stored_on_activation <= 0:
        failures.append(f"stored_on_activation = {capture.stored_on_activation}, expected > 0")
    for name, drained in (("source", capture.source_drained), ("destination", capture.destination_drained),
                          ("driver", capture.driver_drained)):
        if not drained:
            failures.append(f"{name} not drained at the end")
    if log.exit_code != 0:
        failures.append(f"the fixture's event log does not conform (exit {log.exit_code})")
    return tuple(failures)


class _Driver:
    """One request, one prefill worker, one decode worker, a virtual clock."""

    def __init__(self, engine: str, mode: TransferTimingMode) -> None:
        self.engine = engine
        self.order = order_for_engine(engine)
        self.src: EngineWorker = make_worker(fixture_args(engine, WorkerType.PREFILL, mode), 0, record_kv_events=True)
        self.dst: EngineWorker = make_worker(fixture_args(engine, WorkerType.DECODE, mode), 0, record_kv_events=True)
        self.request = EngineRequest(REQUEST_ID, len(TOKENS), MAX_OUTPUT_TOKENS, block_hashes_from_tokens(TOKENS, BLOCK_SIZE))
        self.coord = HandoffCoordinator(REQUEST_ID, self.order)
        self.now = 0.0
        self.queue: list[IssuedAction] = []
        self.transfer_at: float | None = None
        self.src_end: float | None = None
        self.dst_end: float | None = None
        self.events: list[str] = []
        self.writer = EventLogWriter(lambda line: self.events.append(line.rstrip("\n")), engine)
        self.lifecycle: list[str] = []
        self.src_tokens = 0
        self.dst_tokens = 0
        self.decode_finished = False
        self.stored_reserve = 0
        self.stored_activate = 0
        self.activation_hashes: set[int] = set()
        self.activated = False
        self.repeated = 0

    # --- logging --------------------------------------------------------------------------

    def _log(self, before: int, event: str, fact: Fact | None) -> None:
        """Log what the coordinator's step made observable (the spec's table says what)."""
        for kind in self.writer.log(self.now, self.coord, before, event, fact, 0, 0):
            name = _NORMALIZED.get(kind)
            if name is not None:
                self.lifecycle.append(name)

    def _take(self, issued: list[IssuedAction]) -> None:
        self.queue.extend(ia for ia in issued if not isinstance(ia.action, Complete))

    def _fact(self, fact: Fact) -> None:
        before = self.coord.state
        issued = self.coord.on_fact(fact)
        self._log(before, type(fact).__name__, fact)
        self._take(issued)

    def _answer(self, ia: IssuedAction, outcome: Outcome) -> None:
        before = self.coord.state
        issued = self.coord.on_action_outcome(ia.id, outcome)
        self._log(before, f"{type(ia.action).__name__}.{outcome.kind.value}", None)
        self._take(issued)

    def _effects(self, effects: CommandEffects) -> None:
        for fact in effects.lifecycle:
            self._fact(fact)

    @staticmethod
    def _stored(events: tuple[KvEvent, ...]) -> tuple[int, ...]:
        return tuple(h for e in events if isinstance(e, KvStored) for h in e.block_hashes)

    def _decode_kv(self, events: tuple[KvEvent, ...]) -> None:
        if self.activated:
            self.repeated += sum(1 for h in self._stored(events) if h in self.activation_hashes)

    # --- actions --------------------------------------------------------------------------

    def _execute(self, ia: IssuedAction) -> bool:
        """Run one action; False when it must wait for its worker's pass to end."""
        action = ia.action
        hid = action.handoff_id
        try:
            if isinstance(action, SubmitPrefill):
                effects = self.src.submit_handoff_prefill(hid, self.request)
                self._answer(ia, Outcome(_OK[type(action).__name__]))
                self._effects(effects)
            elif isinstance(action, ReserveDestination):
                effects = self.dst.reserve_destination(hid, self.request)
                self.stored_reserve += len(self._stored(effects.kv_events))
                self._answer(ia, Outcome(_OK[type(action).__name__]))
                self._effects(effects)
            elif isinstance(action, StartTransfer):
                self._answer(ia, Outcome(_OK[type(action).__name__]))
                if action.delay_ms <= 0.0:
                    self._fact(TransferCompleted(hid))  # zero delay completes in the same drain
                else:
                    self.transfer_at = self.now + action.delay_ms
            elif isinstance(action, ActivateDestination):
                if self.dst.busy:
                    return False
                effects = self.dst.activate_destination(hid)
                stored = self._stored(effects.kv_events)
                self.stored_activate += len(stored)
                self.activation_hashes.update(stored)
                self.activated = True
                if effects.result is CommandResult.APPLIED:
                    self._answer(ia, Outcome(_OK[type(action).__name__]))
                else:  # an Activate that is not Applied becomes Failed (as the reference)
                    self._answer(ia, Outcome(OutcomeKind.FAILED, "activation not applied"))
                self._effects(effects)
            elif isinstance(action, (ReleaseSource, CancelSource)):
                if self.src.busy:
                    return False
                release = isinstance(action, ReleaseSource)
                effects = self.src.release_source(hid) if release else self.src.cancel_source(hid)
                kind = OutcomeKind.APPLIED if effects.result is CommandResult.APPLIED else OutcomeKind.NOOP
                self._answer(ia, Outcome(kind))
                self._effects(effects)
            elif isinstance(action, CancelDestination):
                if self.dst.busy:
                    return False
                effects = self.dst.cancel_destination(hid)
                kind = OutcomeKind.APPLIED if effects.result is CommandResult.APPLIED else OutcomeKind.NOOP
                self._answer(ia, Outcome(kind))
                self._effects(effects)
        except EngineCommandError as exc:
            self._answer(ia, Outcome(OutcomeKind.FAILED, str(exc)))
        return True

    # --- the loop -------------------------------------------------------------------------

    def _drain(self) -> None:
        progress = True
        while progress:
            progress = False
            waiting: list[IssuedAction] = []
            queue, self.queue = self.queue, []
            for ia in queue:
                if self._execute(ia):
                    progress = True
                else:
                    waiting.append(ia)
            self.queue = waiting + self.queue
            for worker, is_src in ((self.src, True), (self.dst, False)):
                if worker.busy:
                    continue
                plan = worker.start_pass(self.now)
                if plan is None:
                    continue
                progress = True
                if is_src:
                    self.src_end = plan.end_ms
                else:
                    self.dst_end = plan.end_ms
                    self._decode_kv(plan.pass_start_kv_events)

    def _finish(self, worker: EngineWorker, is_src: bool) -> None:
        done = worker.finish_pass()
        emitted = sum(1 for rid in done.emitted.tolist() if rid == REQUEST_ID)
        if is_src:
            self.src_tokens += emitted
            self.src_end = None
        else:
            self.dst_tokens += emitted
            self.dst_end = None
            self._decode_kv(done.kv_events)
            if REQUEST_ID in done.finished:
                self.decode_finished = True
        for fact in done.lifecycle:
            self._fact(fact)

    def run(self) -> FixtureCapture:
        self._take(self.coord.start())
        self._drain()
        for _ in range(_MAX_STEPS):
            times = [t for t in (self.src_end, self.dst_end, self.transfer_at) if t is not None]
            if not times:
                break
            self.now = max(self.now, min(times))
            if self.src_end is not None and self.src_end <= self.now:
                self._finish(self.src, True)
            if self.dst_end is not None and self.dst_end <= self.now:
                self._finish(self.dst, False)
            if self.transfer_at is not None and self.transfer_at <= self.now:
                self.transfer_at = None
                self._fact(TransferCompleted(self.request.request_id))
            self._drain()
        else:
            raise RuntimeError(f"fixture did not settle after {_MAX_STEPS} steps at t={self.now} ms")
        completed = 1 if (self.decode_finished and self.coord.completion is not None
                          and self.coord.completion is Completion.SUCCESS) else 0
        return FixtureCapture(
            engine=self.engine,
            mode=self.mode_of(),
            order=self.order,
            lifecycle=tuple(self.lifecycle),
            source_output_tokens=self.src_tokens,
            destination_output_tokens=self.dst_tokens,
            completed_requests=completed,
            stored_before_activation=self.stored_reserve,
            stored_on_activation=self.stored_activate,
            repeated_activation_hashes_after_activation=self.repeated,
            source_drained=self.src.is_drained(),
            destination_drained=self.dst.is_drained(),
            driver_drained=not self.queue and self.transfer_at is None and self.coord.is_complete,
            events=tuple(self.events),
            end_ms=self.now,
        )

    def mode_of(self) -> TransferTimingMode:
        return self.src.args.kv_transfer_timing_mode


def run_fixture(engine: str, mode: TransferTimingMode = TransferTimingMode.FULL_PROMPT) -> FixtureVerdict:
    """Run the fixture for ``engine`` (a mock engine's name) in one timing mode and validate it."""
    name = engine.strip().lower()
    if name not in engine_names():
        # The reference rejects TRT-LLM here: it has no destination-side handoff (and no mock).
        raise ValueError(f"the conformance fixture supports {' and '.join(engine_names())}, not {engine!r}")
    capture = _Driver(name, mode).run()
    validator = Validator(None)
    check_native([line + "\n" for line in capture.events], validator, keep_going=False)
    log = validator.result()
    return FixtureVerdict(capture, validate(capture, log), log)


def to_json(verdict: FixtureVerdict) -> dict[str, object]:
    c = verdict.capture
    return {
        "engine": c.engine,
        "kv_transfer_timing_mode": c.mode.value,
        "order": c.order.value,
        "lifecycle": list(c.lifecycle),
        "source_output_tokens": c.source_output_tokens,
        "destination_output_tokens": c.destination_output_tokens,
        "completed_requests": c.completed_requests,
        "kv_stored": {
            "before_activation": c.stored_before_activation,
            "on_activation": c.stored_on_activation,
            "repeated_activation_hashes_after_activation": c.repeated_activation_hashes_after_activation,
        },
        "drained": {"source": c.source_drained, "destination": c.destination_drained, "driver": c.driver_drained},
        "end_ms": round(c.end_ms, 6) if math.isfinite(c.end_ms) else None,
        "event_log": [json.loads(line) for line in c.events],
        "event_log_verdict": "conforms" if verdict.log.exit_code == 0 else "violates",
        "verdict": "pass" if verdict.ok else "fail",
        "failures": list(verdict.failures),
    }


def render_text(verdict: FixtureVerdict) -> str:
    c = verdict.capture
    lines = [
        f"fixture {c.engine} ({c.order.value}, {c.mode.value}): one request, 1 prefill + 1 decode worker",
        f"  lifecycle: {' -> '.join(c.lifecycle)}",
        f"  output tokens: source {c.source_output_tokens}, destination {c.destination_output_tokens}; "
        f"completed requests {c.completed_requests}",
        f"  KV stored on the decode worker: before activation {c.stored_before_activation}, "
        f"on activation {c.stored_on_activation}, activation hashes re-stored later "
        f"{c.repeated_activation_hashes_after_activation}",
        f"  drained: source {c.source_drained}, destination {c.destination_drained}, driver {c.driver_drained}",
        f"  event log: {len(c.events)} events, {'conforms' if verdict.log.exit_code == 0 else 'VIOLATES'}",
    ]
    lines.extend(f"  FAIL: {f}" for f in verdict.failures)
    lines.append(f"  verdict: {'PASS' if verdict.ok else 'FAIL'}")
    return "\n".join(lines) + "\n"


def run_fixture_cli(args: argparse.Namespace) -> int:
    """``dmocker conform --fixture ENGINE``: both timing modes; exit 0 pass, 1 fail."""
    verdicts = [run_fixture(args.fixture, mode) for mode in TransferTimingMode]
    for verdict in verdicts:
        sys.stdout.write(render_text(verdict))
    if getattr(args, "json_path", None):
        write_atomic(args.json_path, json.dumps({"fixtures": [to_json(v) for v in verdicts]}, indent=2, sort_keys=True) + "\n")
    return 0 if all(v.ok for v in verdicts) else 1
