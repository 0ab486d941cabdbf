"""The server's life: build the live cluster and the front, listen, and on stop cancel what is in
flight, write the outputs and check the end state (``dmocker serve``, docs/serve.md)."""

from __future__ import annotations

import asyncio
import enum
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, cast

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage

from dmocker._atomic import AtomicFile, write_atomic
from dmocker.handoff import HandoffOrder, order_for_engine
from dmocker.conformance import Violation
from dmocker.replay.config import ClusterMode, ReplayConfig
from dmocker.replay.end_of_run import prepare
from dmocker.replay.invariants import conformance_break
from dmocker.replay.live import LiveCluster
from dmocker.replay.report import JsonValue, stable_json

from .app import FrontConfig, Responder, build_app
from .cluster import ServeCluster, Sinks
from .live_check import LiveCheck
from .metrics import MissingServeExtra, WorkerMetrics
from .openai_api import ServedModel
from .workers import SglangWorkers, VllmWorkers

__all__ = ["Front", "ServeOptions", "serve"]

_DEFAULT_NAME = "dmocker-mock"
_DEFAULT_MAX_MODEL_LEN = 131072


class Front(enum.Enum):
    """Who chooses the workers: dmocker's own front (the replay's routers), or a real proxy in
    front of the workers' own servers."""

    DMOCKER = "dmocker"
    WORKERS = "workers"


@dataclass(frozen=True)
class ServeOptions:
    """A checked ``dmocker serve`` invocation."""

    config: ReplayConfig
    host: str
    port: int
    served: ServedModel
    capacity: int
    out: str | None
    per_request: str | None
    events: str | None
    stop_after_s: float | None
    front: Front = Front.DMOCKER

    @classmethod
    def check(cls, config: ReplayConfig, *, host: str, port: int, names: list[str] | None, capacity: int,
              out: str | None, per_request: str | None, events: str | None, stop_after_s: float | None,
              front: str = "dmocker") -> ServeOptions:
        """ValueError naming the flag at fault."""
        if config.cluster.mode is not ClusterMode.DISAGG:
            raise ValueError("--mode: dmocker serve runs a disaggregated cluster")
        if config.planner.policy is not None:
            raise ValueError("--planner: dmocker serve runs fixed pools")
        if not 0 <= port <= 65535:
            raise ValueError(f"--port must be in 0..65535, got {port}")
        if capacity < 1:
            raise ValueError(f"--capacity must be >= 1, got {capacity}")
        if stop_after_s is not None and not stop_after_s > 0:
            raise ValueError(f"--stop-after-s must be > 0, got {stop_after_s}")
        chosen = Front(front)
        n_p, n_d = config.cluster.prefill_workers, config.cluster.decode_workers
        faults = config.faults
        if faults is not None and faults.crashes and chosen is Front.WORKERS:
            raise ValueError("--worker-crash: with --front workers the proxy in front chooses the workers; "
                             "crash workers behind dmocker's own front")
        # the fault plan and a user's coordinator, checked as the replay checks them
        prefill_args, decode_args = config.engine_args()
        prepare(faults, config.coordinator, prefill_args=prefill_args, decode_args=decode_args,
                prefill_workers=n_p, decode_workers=n_d, num_requests=capacity)
        # the workers, and with SGLang's order each prefill worker's bootstrap server
        sglang = order_for_engine(config.engine) is HandoffOrder.DESTINATION_FIRST
        ports = (n_p + n_d + (n_p if sglang else 0)) if chosen is Front.WORKERS else 1
        if port and port + ports - 1 > 65535:
            raise ValueError(f"--port {port}: the workers' {ports} ports do not fit below 65536")
        # the longest prompt + output the front accepts: the engines' limit, when they have one
        length = config.decode.max_model_len or _DEFAULT_MAX_MODEL_LEN
        served = ServedModel(tuple(names) if names else (config.model.name or _DEFAULT_NAME,), length)
        return cls(config, host, port, served, capacity, out, per_request, events, stop_after_s, chosen)


class _NotHttp1(logging.Filter):
    """Drops aiohttp's report of a connection that does not speak HTTP/1 (``sglang-router``
    probes its workers for gRPC over HTTP/2 before it talks HTTP/1.1 to them): answered with a
    400 and closed, as it should be, so not an error of the server."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, BadHttpMessage)


class _WriterIO:
    """The slice of ``IO[str]`` the cluster writes through, over an AtomicFile."""

    def __init__(self, w: AtomicFile) -> None:
        self.write = w.write


async def serve(options: ServeOptions, stop: asyncio.Event, *, started: Callable[[str], None],
                wall: Callable[[], float]) -> int:
    """Serve until ``stop`` is set (or ``stop_after_s``); 0, or 1 when an end-of-run check broke."""
    loop = asyncio.get_running_loop()
    logging.getLogger("aiohttp.server").addFilter(_NotHttp1())
    records_w = AtomicFile(options.per_request) if options.per_request is not None else None
    events_w = AtomicFile(options.events) if options.events is not None else None
    try:
        metrics: WorkerMetrics | None = WorkerMetrics(options.served.names[0], engine="0")
    except MissingServeExtra:
        metrics = None

    workers_front = options.front is Front.WORKERS
    log = logging.getLogger("dmocker.serve")

    def violated(v: Violation) -> None:
        if metrics is not None:
            metrics.handoff_violation(v.kind.value)
        log.warning("request %s broke the spec (%s) at %.3f ms: %s", v.handoff, v.kind.value, v.t_ms, v.message)

    # Every handoff is checked as it runs; the log goes on to --events when asked for.
    check = LiveCheck(order_for_engine(options.config.engine),
                      forward=events_w.write if events_w is not None else None, report=violated,
                      worker_event=metrics.worker_event if metrics is not None else None)

    def make(sinks: Sinks) -> LiveCluster:
        return LiveCluster(options.config, capacity=options.capacity, on_tokens=sinks.on_tokens,
                           on_end=sinks.on_end, on_held=sinks.on_held, pinned=workers_front,
                           records=cast(IO[str], _WriterIO(records_w)) if records_w is not None else None,
                           events=cast(IO[str], check))

    runners: list[web.AppRunner] = []
    workers: VllmWorkers | SglangWorkers | None = None

    async def listen(app: web.Application, port: int) -> tuple[str, int]:
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        runners.append(runner)
        await web.TCPSite(runner, options.host, port).start()
        host, bound = cast("tuple[str, int]", runner.addresses[0])[:2]
        return host, bound

    try:
        cluster = ServeCluster(make, loop.time)
        front = FrontConfig(options.served, int(wall()))
        if workers_front:
            responder = Responder(cluster, front, metrics)
            n_p, n_d = options.config.cluster.prefill_workers, options.config.cluster.decode_workers

            def port_of(k: int) -> int:
                return options.port + k if options.port else 0

            urls: dict[str, list[str]] = {"prefill": [], "decode": [], "bootstrap": []}
            if order_for_engine(options.config.engine) is HandoffOrder.SOURCE_FIRST:
                vllm = VllmWorkers(responder, options.config.model.tensor_parallel_size)
                workers = vllm
                for i in range(n_p):
                    host, port = await listen(vllm.prefill_app(i), port_of(i))
                    vllm.side_channels[i] = (host, port)
                    urls["prefill"].append(f"http://{host}:{port}")
                for j in range(n_d):
                    host, port = await listen(vllm.decode_app(j), port_of(n_p + j))
                    urls["decode"].append(f"http://{host}:{port}")
            else:
                sgl = SglangWorkers(responder)
                workers = sgl
                for i in range(n_p):
                    host, port = await listen(sgl.worker_app("prefill", i), port_of(i))
                    urls["prefill"].append(f"http://{host}:{port}")
                for j in range(n_d):
                    host, port = await listen(sgl.worker_app("decode", j), port_of(n_p + j))
                    urls["decode"].append(f"http://{host}:{port}")
                for i in range(n_p):
                    host, port = await listen(sgl.bootstrap_app(i), port_of(n_p + n_d + i))
                    sgl.bootstrap[i] = (host, port)
                    urls["bootstrap"].append(str(port))
            started("prefill workers " + " ".join(urls["prefill"]) + "; decode workers " + " ".join(urls["decode"])
                    + ("; bootstrap ports " + " ".join(urls["bootstrap"]) if urls["bootstrap"] else ""))
        else:
            host, port = await listen(build_app(cluster, front, metrics), options.port)
            started(f"http://{host}:{port}")
        driver = asyncio.create_task(cluster.run())
        try:
            await asyncio.wait_for(stop.wait(), options.stop_after_s)
        except asyncio.TimeoutError:
            pass
        cluster.stop()
        await driver
        for runner in runners:
            await runner.cleanup()
        if workers is not None:
            await workers.close()
        live = cluster.cluster
        live.drain(max(cluster.now_ms(), live.now_ms))
    except BaseException:
        for w in (records_w, events_w):
            if w is not None:
                w.abort()
        raise
    for w in (records_w, events_w):
        if w is not None:
            w.commit()
    summary = live.finish()  # the log's verdict is the live check's: the file is not read again
    summary["live_check"] = check.summary()
    problem = conformance_break(check.result())
    if problem is not None:
        breaks = summary.get("invariant_breaks")
        if isinstance(breaks, list):
            breaks.append(problem.to_json())
        summary["invariants_ok"] = False
    if options.out is not None:
        report: dict[str, JsonValue] = {"summary": summary, "config": options.config.to_json(outputs=False)}
        write_atomic(options.out, stable_json(report))
    ok = summary.get("invariants_ok") is True
    print(f"dmocker serve: stopped; {summary.get('completed_requests')} completed, "
          f"{summary.get('canceled_requests')} canceled, leaked KV blocks {summary.get('leaked_kv_blocks')}"
          + ("" if ok else f"; end-of-run checks broke: {summary.get('invariant_breaks')}"),
          file=sys.stderr if not ok else sys.stdout, flush=True)
    return 0 if ok else 1
