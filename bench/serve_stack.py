"""Which async HTTP stack `dmocker serve` is built on, chosen by measurement.

Each candidate serves the same minimal streaming endpoint: ``POST /v1/completions`` answers
with Server-Sent Events, ``--tokens`` chunks shaped like vLLM's streamed completion chunks
with ``--gap`` seconds between them, then ``data: [DONE]``. The server runs in a subprocess
on 127.0.0.1 (a free port); an aiohttp client in this process (on uvloop when installed) keeps C streams open at a
time for ``--seconds`` at each concurrency C and reports

* streamed tokens per second (what the client received),
* the server process's CPU time per streamed token, in microseconds (user + system, read
  from ``/proc/<pid>/stat``: the cost the stack adds per token, whatever the client does),
* the mean gap between tokens the client saw (a stack that keeps up shows about ``--gap``),
* errors (failed connections, bad status, streams cut short).

The peak is the largest C with no error whose mean gap stays under twice ``--gap``.

Candidates: aiohttp's server on the default asyncio loop and on uvloop; uvicorn with a raw
ASGI app, with h11 on asyncio and with httptools on uvloop (uvicorn's fast path, which vLLM
and SGLang run under FastAPI); Starlette's ``StreamingResponse`` on the latter (FastAPI's
streaming layer, without FastAPI's request validation).

Loopback only; every run stops by itself (each level is bounded by ``--seconds`` plus a
drain timeout). Needs the stacks installed (``pip install aiohttp uvicorn uvloop httptools
starlette``). Run:

    python bench/serve_stack.py                      # all stacks, 64 256 1024 2048 streams, 2 passes
    python bench/serve_stack.py --stacks aiohttp uvicorn-httptools --levels 64 512
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, MutableMapping
from dataclasses import dataclass
from typing import Any

import orjson

STACKS = ("aiohttp", "aiohttp-uvloop", "uvicorn-h11", "uvicorn-httptools", "starlette")
DONE = b"data: [DONE]\n\n"


def chunk(index: int, created: int) -> bytes:
    """One streamed completion chunk, framed, about the size of a real one."""
    body = {"id": "cmpl-0", "object": "text_completion", "created": created, "model": "mock",
            "choices": [{"index": 0, "text": " tok", "logprobs": None, "finish_reason": None,
                         "stop_reason": None}], "usage": None}
    return b"data: " + orjson.dumps(body) + b"\n\n"


async def tokens(body: bytes) -> AsyncIterator[bytes]:
    """The stream for one request: ``max_tokens`` and ``gap`` come from the request body."""
    request = orjson.loads(body)
    count, gap = int(request["max_tokens"]), float(request["gap"])
    created = int(time.time())
    for i in range(count):
        if i:
            await asyncio.sleep(gap)
        yield chunk(i, created)
    yield DONE


# -- the servers (run in the subprocess) ------------------------------------------------------

def serve_aiohttp(port: int, use_uvloop: bool) -> None:
    from aiohttp import web

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        async for piece in tokens(body):
            await response.write(piece)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    loop_factory = None
    if use_uvloop:
        import uvloop
        loop_factory = uvloop.new_event_loop
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None, backlog=4096,
                handle_signals=True, loop=loop_factory() if loop_factory else None)


Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


async def raw_asgi(scope: Scope, receive: Receive, send: Send) -> None:
    """The endpoint as a bare ASGI app: no framework between uvicorn and the stream."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]})
    async for piece in tokens(body):
        await send({"type": "http.response.body", "body": piece, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def starlette_app() -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    async def completions(request: Request) -> StreamingResponse:
        body = await request.body()
        return StreamingResponse(tokens(body), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])


def serve_uvicorn(port: int, app: Any, fast: bool) -> None:
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, backlog=4096,
                loop="uvloop" if fast else "asyncio", http="httptools" if fast else "h11", lifespan="off")


def serve(stack: str, port: int) -> None:
    if stack == "aiohttp":
        serve_aiohttp(port, use_uvloop=False)
    elif stack == "aiohttp-uvloop":
        serve_aiohttp(port, use_uvloop=True)
    elif stack == "uvicorn-h11":
        serve_uvicorn(port, raw_asgi, fast=False)
    elif stack == "uvicorn-httptools":
        serve_uvicorn(port, raw_asgi, fast=True)
    elif stack == "starlette":
        serve_uvicorn(port, starlette_app(), fast=True)
    else:
        raise SystemExit(f"unknown stack {stack!r}")


# -- the driver (this process) --------------------------------------------------------------------

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Level:
    concurrency: int
    tokens: int
    seconds: float
    cpu_us_per_token: float
    mean_gap_ms: float
    errors: int
    server_cpu: float  # the server's CPU time over the level's wall time (1.0 is one core)
    client_cpu: float  # likewise for this process, the client

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0


async def drive(port: int, pid: int, concurrency: int, seconds: float, count: int, gap: float) -> Level:
    import aiohttp

    url = f"http://127.0.0.1:{port}/v1/completions"
    payload = orjson.dumps({"max_tokens": count, "gap": gap, "stream": True})
    received = 0
    errors = 0
    gap_sum = 0.0
    gap_n = 0
    deadline = time.perf_counter() + seconds

    async def one_stream(session: aiohttp.ClientSession) -> None:
        nonlocal received, errors, gap_sum, gap_n
        try:
            async with session.post(url, data=payload, headers={"Content-Type": "application/json"}) as resp:
                if resp.status != 200:
                    errors += 1
                    return
                got = 0
                last = None
                done = False
                async for piece in resp.content.iter_any():
                    now = time.perf_counter()
                    n = piece.count(b"data: ")
                    if DONE in piece:
                        n -= 1
                        done = True
                    if n and last is not None:
                        gap_sum += now - last
                        gap_n += n
                    if n:
                        last = now
                    got += n
                received += got
                if got != count or not done:
                    errors += 1
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            errors += 1

    async def worker(session: aiohttp.ClientSession) -> None:
        while time.perf_counter() < deadline:
            await one_stream(session)

    timeout = aiohttp.ClientTimeout(total=seconds + count * gap * 20 + 10)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        cpu0 = cpu_seconds(pid)
        own0 = time.process_time()
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
        elapsed = time.perf_counter() - t0
        cpu = cpu_seconds(pid) - cpu0
        own = time.process_time() - own0
    return Level(concurrency, received, elapsed, cpu / received * 1e6 if received else float("nan"),
                 gap_sum / gap_n * 1e3 if gap_n else float("nan"), errors, cpu / elapsed, own / elapsed)


def run_client(main: Coroutine[None, None, Level]) -> Level:
    """The client runs on uvloop when it is installed: the cheaper the client, the later it is the bottleneck."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(main)
    return uvloop.run(main)


def wait_listening(port: int, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("server did not start listening")


def run_stack(stack: str, levels: list[int], seconds: float, count: int, gap: float) -> list[Level]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--serve", stack, "--port", str(port)])
    try:
        wait_listening(port, proc)
        results = []
        for c in levels:
            level = run_client(drive(port, proc.pid, c, seconds, count, gap))
            results.append(level)
            print(f"{stack:18} C={c:5d}  {level.tokens_per_s:7.0f} tok/s  {level.cpu_us_per_token:5.1f} us/tok  "
                  f"gap {level.mean_gap_ms:5.1f} ms  errors {level.errors}  "
                  f"cpu server {level.server_cpu:4.2f} client {level.client_cpu:4.2f}", flush=True)
            if level.errors:
                break  # a level with errors ends the ramp: higher levels would only pile up more
        return results
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stacks", nargs="+", default=list(STACKS), choices=STACKS)
    parser.add_argument("--levels", nargs="+", type=int, default=[64, 256, 1024, 2048],
                        help="concurrent streams, in increasing order")
    parser.add_argument("--seconds", type=float, default=2.0, help="time each level keeps opening streams")
    parser.add_argument("--tokens", type=int, default=32, help="tokens per stream")
    parser.add_argument("--gap", type=float, default=0.02, help="seconds between a stream's tokens")
    parser.add_argument("--repeat", type=int, default=2,
                        help="passes over the stacks, in alternating order (the machine's other load moves)")
    parser.add_argument("--serve", choices=STACKS, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port)
        return
    print(f"{args.tokens} tokens per stream, {args.gap * 1e3:.0f} ms apart; {args.seconds:g} s per level; "
          f"{args.repeat} passes; {os.cpu_count()} CPUs", flush=True)
    runs: dict[str, list[list[Level]]] = {stack: [] for stack in args.stacks}
    for k in range(args.repeat):
        for stack in args.stacks if k % 2 == 0 else reversed(args.stacks):
            runs[stack].append(run_stack(stack, args.levels, args.seconds, args.tokens, args.gap))
    limit = 2 * args.gap * 1e3
    print(f"\nmedian over passes; a level is held when every pass had no error and a mean gap under {limit:.0f} ms")
    print(f"  {'stack':18} {'C':>5} {'tok/s':>8} {'us/tok':>7}  held")
    for stack, passes in runs.items():
        for c in args.levels:
            at = [level for levels in passes for level in levels if level.concurrency == c]
            if not at:
                continue
            held = len(at) == len(passes) and all(not lv.errors and lv.mean_gap_ms < limit for lv in at)
            print(f"  {stack:18} {c:5d} {statistics.median(lv.tokens_per_s for lv in at):8.0f} "
                  f"{statistics.median(lv.cpu_us_per_token for lv in at):7.1f}  {'yes' if held else 'no'}")


if __name__ == "__main__":
    main()
