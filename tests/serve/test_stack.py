"""The pure front on the chosen stack: an aiohttp server on 127.0.0.1 built from
:mod:`dmocker.serve.openai_api` and :mod:`dmocker.serve.metrics`, driven by an aiohttp client.

No engine behind it (a fixed token gap): this checks that the bytes the front builds are what
a real client reads (SSE framing, ``[DONE]``, ``usage``, error bodies, ``/metrics``) over a
real socket. The server test is slow (it starts a server) and bounded in time; the framing
test beside it stays in the quick loop and needs no extra.
"""

from __future__ import annotations

import asyncio
import socket
import time

import orjson
import pytest

from dmocker.serve.openai_api import (
    Endpoint,
    ServedModel,
    parse,
    parse_completion,
)
from dmocker.serve.openai_errors import (
    ApiError,
)
from dmocker.serve.openai_responses import (
    DONE,
    Choice,
    FinishReason,
    Usage,
    chat_chunk,
    completion_chunk,
    generated_text,
    response,
    response_id,
    stream_tokens,
    usage_chunk,
)

SERVED = ServedModel(("mock-model",), max_model_len=2048)
CREATED = 1_700_000_000
GAP_S = 0.002


def sse_events(stream: bytes) -> list[bytes]:
    """The ``data:`` payloads of an SSE stream, as a client splits it (events end with a blank line)."""
    assert stream.endswith(b"\n\n")
    events = stream[:-2].split(b"\n\n")
    assert all(e.startswith(b"data: ") for e in events), events
    return [e[len(b"data: "):] for e in events]


def test_a_stream_splits_into_its_events_and_ends_with_done() -> None:
    r = parse_completion(orjson.dumps({"prompt": "abcdefgh", "stream": True, "stream_options": {"include_usage": True},
                                       "max_tokens": 4}), SERVED)
    events = sse_events(b"".join(stream_tokens(r, "cmpl-0", CREATED, 4, FinishReason.LENGTH)))
    assert events[-1] == b"[DONE]"
    usage = orjson.loads(events[-2])["usage"]
    # the final usage chunk has no null fields (vLLM writes it with exclude_none)
    assert usage == {"prompt_tokens": 2, "total_tokens": 6, "completion_tokens": 4}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def run_server_and_client(port: int) -> None:
    web = pytest.importorskip("aiohttp.web")
    aiohttp = pytest.importorskip("aiohttp")
    pytest.importorskip("prometheus_client")
    from dmocker.serve.metrics import WorkerMetrics

    metrics = WorkerMetrics("mock-model")
    counter = iter(range(1_000_000))

    async def generate(request: object, endpoint: Endpoint) -> object:
        assert isinstance(request, web.Request)
        try:
            req = parse(endpoint, await request.read(), SERVED)
        except ApiError as err:
            return web.Response(status=err.status, body=err.body(), content_type="application/json")
        rid = response_id(endpoint, next(counter))
        started = time.monotonic()
        n = req.max_tokens
        if not req.stream:
            await asyncio.sleep(GAP_S * n)
            metrics.request_finished("length", time.monotonic() - started)
            body = response(endpoint, rid, CREATED, req.model, [Choice(0, generated_text(n), FinishReason.LENGTH)],
                            Usage(req.prompt_tokens, n), req.kv_transfer_params)
            return web.Response(body=body, content_type="application/json")
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        chat = endpoint is Endpoint.CHAT
        if chat:
            await out.write(chat_chunk(rid, CREATED, req.model, Choice(0, ""), first=True))
        last = started
        for i in range(n):
            await asyncio.sleep(GAP_S)
            now = time.monotonic()
            if i == 0:
                metrics.prefilled(req.prompt_tokens)
                metrics.first_token(now - started)
            else:
                metrics.next_token(now - last)
            last = now
            choice = Choice(0, generated_text(1), FinishReason.LENGTH if i == n - 1 else None)
            await out.write(chat_chunk(rid, CREATED, req.model, choice) if chat
                            else completion_chunk(rid, CREATED, req.model, choice))
        if req.include_usage:
            await out.write(usage_chunk(endpoint, rid, CREATED, req.model, Usage(req.prompt_tokens, n)))
        await out.write(DONE)
        await out.write_eof()
        metrics.request_finished("length", time.monotonic() - started)
        return out

    async def completions(request: web.Request) -> object:
        return await generate(request, Endpoint.COMPLETIONS)

    async def chat(request: web.Request) -> object:
        return await generate(request, Endpoint.CHAT)

    async def metrics_page(_: web.Request) -> object:
        return web.Response(body=metrics.exposition(), headers={"Content-Type": "text/plain; version=0.0.4"})

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/metrics", metrics_page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:
            async def stream(endpoint: str, fields: dict[str, object]) -> list[bytes]:
                async with session.post(base + endpoint, data=orjson.dumps(fields)) as resp:
                    assert resp.status == 200
                    assert resp.headers["Content-Type"].startswith("text/event-stream")
                    return sse_events(await resp.read())

            # many streams at once, each complete and counted
            results = await asyncio.gather(*(
                stream("/v1/completions", {"model": "mock-model", "prompt": "x" * (4 * k + 1), "max_tokens": 8,
                                           "stream": True, "stream_options": {"include_usage": True}})
                for k in range(40)))
            for k, events in enumerate(results):
                assert events[-1] == b"[DONE]"
                chunks = [orjson.loads(e) for e in events[:-1]]
                text = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
                assert text == generated_text(8)
                assert chunks[-1]["usage"]["completion_tokens"] == 8
                assert chunks[-1]["usage"]["prompt_tokens"] == k + 1

            events = await stream("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                           "max_tokens": 3, "stream": True})
            assert events[-1] == b"[DONE]" and len(events) == 1 + 3 + 1

            async with session.post(base + "/v1/completions",
                                    data=orjson.dumps({"prompt": [1, 2, 3], "max_tokens": 2,
                                                       "kv_transfer_params": {"do_remote_decode": True}})) as resp:
                out = await resp.json()
                assert out["usage"] == {"prompt_tokens": 3, "total_tokens": 5, "completion_tokens": 2,
                                        "prompt_tokens_details": None}
                assert out["kv_transfer_params"] == {"do_remote_decode": True}

            async with session.post(base + "/v1/completions", data=b'{"prompt": ') as resp:
                assert resp.status == 400
                assert (await resp.json())["error"]["type"] == "Bad Request"
            async with session.post(base + "/v1/completions", data=orjson.dumps({"prompt": "p", "model": "x"})) as resp:
                assert resp.status == 404
                assert (await resp.json())["error"]["param"] == "model"

            async with session.get(base + "/metrics") as resp:
                text = await resp.text()
            parser = pytest.importorskip("prometheus_client.parser")
            parsed = {f.name: f for f in parser.text_string_to_metric_families(text)}
            done = {s.labels["finished_reason"]: s.value for s in parsed["vllm:request_success"].samples
                    if s.name.endswith("_total")}
            assert done["length"] == 40 + 1 + 1
            ttft = [s.value for s in parsed["vllm:time_to_first_token_seconds"].samples if s.name.endswith("_count")]
            assert ttft == [41]
    finally:
        await runner.cleanup()


@pytest.mark.slow  # starts a server
def test_the_front_serves_streams_errors_and_metrics_over_loopback() -> None:
    pytest.importorskip("aiohttp")
    pytest.importorskip("prometheus_client")

    async def bounded() -> None:
        await asyncio.wait_for(run_server_and_client(free_port()), timeout=60)

    asyncio.run(bounded())
