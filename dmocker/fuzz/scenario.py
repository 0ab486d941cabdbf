"""A fuzz scenario: a tiny cluster, a handful of requests, exact faults; its JSON form and its run.

Why a value of its own: what ``dmocker fuzz`` finds must be re-runnable exactly, by
``dmocker replay --scenario FILE`` and by anyone reading the file, so a scenario holds every
input of the run (pools, engine sizes, transfer speed, each request, each fault with its exact
time, each crash) and nothing derived.  :func:`run_scenario` runs it through the public replay
(:func:`dmocker.replay.run`) with the coordinator under test in the loop and records, step by
step, what each coordinator was given and what it issued.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from dmocker.check.target import TargetError, load_target, target_from_factory
from dmocker.engines.registry import engine_names
from dmocker.handoff import HandoffCoordinator, HandoffOrder, IssuedAction, order_for_engine
from dmocker.replay import run as replay_run
from dmocker.replay.config import (
    ClusterConfig,
    OutputsConfig,
    PoolConfig,
    ReplayConfig,
    TransferConfig,
    WorkloadConfig,
)
from dmocker.replay.coordinators import CoordinatorFault, ForeignFactory
from dmocker.replay.errors import DeadEndError, ReplayInvariantError
from dmocker.replay.faults import FaultKind, FaultPlan, Pool, ScheduledFault, WorkerCrash
from dmocker._atomic import write_atomic
from dmocker.replay.report import Report, stable_json
from dmocker.replay.workload import NO_NEXT, SessionStart, Turn

__all__ = [
    "FORMAT",
    "Request",
    "Scenario",
    "ScenarioError",
    "Outcome",
    "load_scenario",
    "save_scenario",
    "run_scenario",
]

FORMAT = "dmocker-scenario/1"
TRACE_BLOCK = 16  # tokens per scenario hash id (= the engines' block size in scenarios)


class ScenarioError(ValueError):
    """A scenario file that cannot be run (names the file and the field)."""


@dataclass(frozen=True, slots=True)
class Request:
    arrival_ms: float
    input_length: int
    output_length: int
    prefix_group: int = 0  # requests of one group share their leading blocks (prefix caching)


@dataclass(frozen=True)
class Scenario:
    engine: str
    prefill_workers: int
    decode_workers: int
    num_gpu_blocks: int
    requests: tuple[Request, ...]
    kv_transfer_bandwidth: float | None = None  # GB/s; None: no transfer delay
    kv_bytes_per_token: int = 1000
    faults: tuple[ScheduledFault, ...] = ()
    crashes: tuple[WorkerCrash, ...] = ()
    restart_s: float | None = None
    max_num_seqs: int = 8

    @property
    def order(self) -> HandoffOrder:
        return order_for_engine(self.engine)

    def fault_plan(self) -> FaultPlan:
        return FaultPlan(schedule=self.faults, crashes=self.crashes, restart_s=self.restart_s)

    def replay_config(self, coordinator: ForeignFactory, events: str | None = None) -> ReplayConfig:
        """The replay of this scenario with ``coordinator`` driving every handoff."""
        pool = PoolConfig(block_size=TRACE_BLOCK, num_gpu_blocks=self.num_gpu_blocks, max_num_seqs=self.max_num_seqs)
        transfer = TransferConfig()
        if self.kv_transfer_bandwidth is not None:
            transfer = TransferConfig(bandwidth_gb_s=self.kv_transfer_bandwidth, kv_bytes_per_token=self.kv_bytes_per_token)
        return ReplayConfig(
            cluster=ClusterConfig(engine=self.engine, prefill_workers=self.prefill_workers,
                                  decode_workers=self.decode_workers),
            prefill=pool,
            decode=pool,
            transfer=transfer,
            faults=self.fault_plan(),
            workload=WorkloadConfig(explicit=ScenarioWorkload(self.requests)),
            outputs=OutputsConfig(events=events),
            coordinator=coordinator,
        )

    def to_json(self) -> dict[str, object]:
        return {
            "format": FORMAT,
            "engine": self.engine,
            "prefill_workers": self.prefill_workers,
            "decode_workers": self.decode_workers,
            "num_gpu_blocks": self.num_gpu_blocks,
            "max_num_seqs": self.max_num_seqs,
            "block_size": TRACE_BLOCK,
            "kv_transfer_bandwidth": self.kv_transfer_bandwidth,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "requests": [
                {"arrival_ms": r.arrival_ms, "input_length": r.input_length, "output_length": r.output_length,
                 "prefix_group": r.prefix_group}
                for r in self.requests
            ],
            "faults": [{"t_ms": f.t_ms, "request": f.request_id, "kind": f.kind.value} for f in self.faults],
            "worker_crashes": [{"pool": c.pool.value, "index": c.index, "t_ms": c.t_ms} for c in self.crashes],
            "worker_restart_s": self.restart_s,
        }


class ScenarioWorkload:
    """The scenario's requests as a replay workload (one turn per session)."""

    def __init__(self, requests: tuple[Request, ...]) -> None:
        self._requests = requests

    @property
    def trace_block_size(self) -> int:
        return TRACE_BLOCK

    @property
    def num_requests(self) -> int:
        return len(self._requests)

    def session_starts(self) -> Iterator[SessionStart]:
        order = sorted(range(len(self._requests)), key=lambda i: (self._requests[i].arrival_ms, i))
        for i in order:
            yield SessionStart(self._requests[i].arrival_ms, i)

    def load(self, request_id: int) -> Turn:
        r = self._requests[request_id]
        n_blocks = -(-r.input_length // TRACE_BLOCK)
        hashes = tuple(r.prefix_group * 10_000 + b if b < n_blocks // 2 else request_id * 10_000 + 5_000 + b
                       for b in range(n_blocks))
        return Turn(request_id, r.input_length, r.output_length, hashes, 0.0, NO_NEXT, request_id, 0)

    def delay_of(self, request_id: int) -> float:
        return 0.0


# --- JSON ---------------------------------------------------------------------------------------


def _field(obj: dict[str, object], key: str, where: str, kind: type, *, minimum: float | None = None,
           optional: bool = False) -> object:
    if key not in obj or obj[key] is None:
        if optional:
            return None
        raise ScenarioError(f"{where}: field '{key}' is missing")
    v = obj[key]
    ok = isinstance(v, kind) and not isinstance(v, bool)
    if kind is float:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))
    if not ok:
        raise ScenarioError(f"{where}: field '{key}' must be {'a number' if kind is float else kind.__name__}, got {v!r}")
    if minimum is not None and float(v) < minimum:  # type: ignore[arg-type]
        raise ScenarioError(f"{where}: field '{key}' must be >= {minimum:g}, got {v!r}")
    return float(v) if kind is float else v  # type: ignore[arg-type]


def scenario_from_json(data: object, where: str = "scenario") -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError(f"{where}: expected a JSON object")
    if data.get("format") != FORMAT:
        raise ScenarioError(f"{where}: field 'format' must be {FORMAT!r}, got {data.get('format')!r}")
    engine = data.get("engine")
    if engine not in engine_names():
        raise ScenarioError(f"{where}: field 'engine' must be one of {', '.join(map(repr, engine_names()))}, got {engine!r}")
    if data.get("block_size", TRACE_BLOCK) != TRACE_BLOCK:
        raise ScenarioError(f"{where}: field 'block_size' must be {TRACE_BLOCK}")
    reqs_raw = data.get("requests")
    if not isinstance(reqs_raw, list) or not reqs_raw:
        raise ScenarioError(f"{where}: field 'requests' must be a non-empty list")
    requests = []
    for i, r in enumerate(reqs_raw):
        w = f"{where}: requests[{i}]"
        if not isinstance(r, dict):
            raise ScenarioError(f"{w}: expected an object")
        requests.append(Request(
            float(_field(r, "arrival_ms", w, float, minimum=0)),  # type: ignore[arg-type]
            int(_field(r, "input_length", w, int, minimum=1)),  # type: ignore[call-overload]
            int(_field(r, "output_length", w, int, minimum=1)),  # type: ignore[call-overload]
            int(_field(r, "prefix_group", w, int, minimum=0, optional=True) or 0),  # type: ignore[call-overload]
        ))
    faults = []
    for i, f in enumerate(_list(data, "faults", where)):
        w = f"{where}: faults[{i}]"
        try:
            kind = FaultKind(f.get("kind"))
        except ValueError:
            raise ScenarioError(f"{w}: field 'kind' must be cancel, fail or timeout, got {f.get('kind')!r}") from None
        rid = int(_field(f, "request", w, int, minimum=0))  # type: ignore[call-overload]
        if rid >= len(requests):
            raise ScenarioError(f"{w}: field 'request' names request {rid}, but there are {len(requests)}")
        faults.append(ScheduledFault(float(_field(f, "t_ms", w, float, minimum=0)), rid, kind))  # type: ignore[arg-type]
    crashes = []
    for i, c in enumerate(_list(data, "worker_crashes", where)):
        w = f"{where}: worker_crashes[{i}]"
        try:
            pool = Pool(c.get("pool"))
        except ValueError:
            raise ScenarioError(f"{w}: field 'pool' must be prefill or decode, got {c.get('pool')!r}") from None
        crashes.append(WorkerCrash(pool, int(_field(c, "index", w, int, minimum=0)),  # type: ignore[call-overload]
                                   float(_field(c, "t_ms", w, float, minimum=0))))  # type: ignore[arg-type]
    restart = _field(data, "worker_restart_s", where, float, minimum=0, optional=True)
    bw = _field(data, "kv_transfer_bandwidth", where, float, minimum=0, optional=True)
    sc = Scenario(
        engine=str(engine),
        prefill_workers=int(_field(data, "prefill_workers", where, int, minimum=1)),  # type: ignore[call-overload]
        decode_workers=int(_field(data, "decode_workers", where, int, minimum=1)),  # type: ignore[call-overload]
        num_gpu_blocks=int(_field(data, "num_gpu_blocks", where, int, minimum=1)),  # type: ignore[call-overload]
        max_num_seqs=int(_field(data, "max_num_seqs", where, int, minimum=1, optional=True) or 8),  # type: ignore[call-overload]
        requests=tuple(requests),
        kv_transfer_bandwidth=None if bw is None else float(bw),  # type: ignore[arg-type]
        kv_bytes_per_token=int(_field(data, "kv_bytes_per_token", where, int, minimum=1, optional=True) or 1000),  # type: ignore[call-overload]
        faults=tuple(faults),
        crashes=tuple(crashes),
        restart_s=None if restart is None else float(restart),  # type: ignore[arg-type]
    )
    try:
        sc.fault_plan().check_pools(sc.prefill_workers, sc.decode_workers, len(sc.requests))
    except ValueError as exc:
        raise ScenarioError(f"{where}: {exc}") from None
    return sc


def _list(data: dict[str, object], key: str, where: str) -> list[dict[str, object]]:
    v = data.get(key, [])
    if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
        raise ScenarioError(f"{where}: field '{key}' must be a list of objects")
    return v


def load_scenario(path: str | os.PathLike[str]) -> Scenario:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as exc:
        raise ScenarioError(f"{os.fspath(path)}: cannot read: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"{os.fspath(path)}:{exc.lineno}: not JSON: {exc.msg}") from None
    return scenario_from_json(data, os.fspath(path))


def save_scenario(path: str | os.PathLike[str], scenario: Scenario, extra: dict[str, object] | None = None) -> None:
    body = scenario.to_json()
    if extra:
        body.update(extra)
    write_atomic(path, stable_json(body))


# --- running -------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What one run of a scenario came to: ``problems`` empty means nothing broke."""

    problems: list[str]
    steps: list[tuple[float, int, str]] = field(default_factory=list)  # (t_ms, request, text)
    report: Report | None = None

    @property
    def failed(self) -> bool:
        return bool(self.problems)


def _show_action(ia: IssuedAction) -> str:
    name = type(ia.action).__name__
    delay = getattr(ia.action, "delay_ms", None)
    return f"{name}#{ia.id}" + (f"(delay {delay:g} ms)" if isinstance(delay, float) else "")


def coordinator_factory(coordinator: str | Callable[..., object] | None) -> ForeignFactory:
    """The coordinator under test, always through the adapter (ours too: the monitor watches it)."""
    try:
        if coordinator is None:
            target = target_from_factory(HandoffCoordinator, "dmocker.handoff:HandoffCoordinator")
        elif isinstance(coordinator, str):
            target = load_target(coordinator)
        else:
            target = target_from_factory(coordinator)
    except TargetError as exc:
        raise ScenarioError(f"coordinator: {exc}") from None
    return ForeignFactory(target)


def run_scenario(scenario: Scenario, factory: ForeignFactory, *, record: bool = False) -> Outcome:
    """Run ``scenario`` with ``factory``'s coordinator; collect what broke (never raises for a
    failing run: a coordinator fault, a dead end or a runtime error is a finding)."""
    steps: list[tuple[float, int, str]] = []

    def recorder(request_id: int, step: int, what: str, issued: list[IssuedAction]) -> None:
        acts = ", ".join(_show_action(ia) for ia in issued) or "nothing"
        t = under_test.clock() if under_test.clock is not None else 0.0
        steps.append((t, request_id, f"step {step}: {what} -> {acts}"))

    under_test = ForeignFactory(factory.target, recorder=recorder if record else None)
    with tempfile.TemporaryDirectory(prefix="dmocker-fuzz-") as tmp:
        events = os.path.join(tmp, "events.jsonl")
        try:
            report = replay_run(scenario.replay_config(under_test, events))
        except CoordinatorFault as exc:
            return Outcome([str(exc)], steps)
        except (DeadEndError, ReplayInvariantError) as exc:
            return Outcome([f"runtime: {exc}"], steps)
    breaks = report.summary.get("invariant_breaks")
    problems: list[str] = []
    for b in breaks if isinstance(breaks, list) else []:
        if isinstance(b, dict):
            ids = b.get("request_ids")
            shown = f" (requests {', '.join(str(i) for i in ids)})" if isinstance(ids, list) and ids else ""
            problems.append(f"{b.get('invariant')}: {b.get('message')}{shown}")
    return Outcome(problems, steps, report)
