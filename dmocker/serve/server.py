"""The server's life: build the live cluster and the front, listen, and on stop cancel what is in
flight, write the outputs and check the end state (``dmocker serve``, docs/serve.md)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, cast

from aiohttp import web

from dmocker._atomic import AtomicFile, write_atomic
from dmocker.replay.collector import TerminalStatus
from dmocker.replay.config import ClusterMode, ReplayConfig
from dmocker.replay.live import LiveCluster
from dmocker.replay.report import JsonValue, stable_json

from .app import FrontConfig, build_app
from .cluster import ServeCluster
from .metrics import MissingServeExtra, WorkerMetrics
from .openai_api import ServedModel

__all__ = ["ServeOptions", "serve"]

_DEFAULT_NAME = "dmocker-mock"
_DEFAULT_MAX_MODEL_LEN = 131072


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

    @classmethod
    def check(cls, config: ReplayConfig, *, host: str, port: int, names: list[str] | None, capacity: int, out: str | None, per_request: str | None, events: str | None,
              stop_after_s: float | None) -> ServeOptions:
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
        # the longest prompt + output the front accepts: the engines' limit, when they have one
        length = config.decode.max_model_len or _DEFAULT_MAX_MODEL_LEN
        served = ServedModel(tuple(names) if names else (config.model.name or _DEFAULT_NAME,), length)
        return cls(config, host, port, served, capacity, out, per_request, events, stop_after_s)


class _WriterIO:
    """The slice of ``IO[str]`` the cluster writes through, over an AtomicFile."""

    def __init__(self, w: AtomicFile) -> None:
        self.write = w.write


async def serve(options: ServeOptions, stop: asyncio.Event, *, started: Callable[[str], None],
                wall: Callable[[], float]) -> int:
    """Serve until ``stop`` is set (or ``stop_after_s``); 0, or 1 when an end-of-run check broke."""
    loop = asyncio.get_running_loop()
    records_w = AtomicFile(options.per_request) if options.per_request is not None else None
    events_w = AtomicFile(options.events) if options.events is not None else None
    try:
        metrics: WorkerMetrics | None = WorkerMetrics(options.served.names[0], engine="0")
    except MissingServeExtra:
        metrics = None

    def make(on_tokens: Callable[[list[int], float], None],
             on_end: Callable[[int, TerminalStatus, float], None]) -> LiveCluster:
        return LiveCluster(options.config, capacity=options.capacity, on_tokens=on_tokens, on_end=on_end,
                           records=cast(IO[str], _WriterIO(records_w)) if records_w is not None else None,
                           events=cast(IO[str], _WriterIO(events_w)) if events_w is not None else None)

    try:
        cluster = ServeCluster(make, loop.time)
        app = build_app(cluster, FrontConfig(options.served, int(wall())), metrics)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, options.host, options.port)
        await site.start()
        host, port = cast("tuple[str, int]", runner.addresses[0])[:2]
        started(f"http://{host}:{port}")
        driver = asyncio.create_task(cluster.run())
        try:
            await asyncio.wait_for(stop.wait(), options.stop_after_s)
        except asyncio.TimeoutError:
            pass
        cluster.stop()
        await driver
        await runner.cleanup()
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
    summary = live.finish(options.events)
    if options.out is not None:
        report: dict[str, JsonValue] = {"summary": summary, "config": options.config.to_json(outputs=False)}
        write_atomic(options.out, stable_json(report))
    ok = summary.get("invariants_ok") is True
    print(f"dmocker serve: stopped; {summary.get('completed_requests')} completed, "
          f"{summary.get('canceled_requests')} canceled, leaked KV blocks {summary.get('leaked_kv_blocks')}"
          + ("" if ok else f"; end-of-run checks broke: {summary.get('invariant_breaks')}"),
          file=sys.stderr if not ok else sys.stdout, flush=True)
    return 0 if ok else 1
