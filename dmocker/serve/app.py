"""dmocker's own front (``dmocker serve``): one OpenAI-compatible server in front of the whole
mock prefill/decode cluster, as Dynamo's frontend or an llm-d gateway stands in front of its
workers.  A request is routed by the replay's routers, handed off between a prefill and a
decode worker by the spec's coordinator, and its tokens are streamed as the decode worker's
passes end.

Endpoints: ``POST /v1/completions`` and ``/v1/chat/completions`` (streamed or not),
``GET /v1/models``, ``/health``, ``/metrics``.  A client that disconnects cancels its request
(a ``Canceled`` fact: the handoff cleans up both sides).  The mock has no end-of-sequence token:
a request generates exactly its ``max_tokens`` (``finish_reason: "length"``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from aiohttp import web

from dmocker.replay.collector import TerminalStatus
from dmocker.replay.live import LiveError

from .cluster import End, RequestStream, ServeCluster
from .metrics import LeakCause, WorkerMetrics
from .openai_api import (
    Endpoint,
    GenerationRequest,
    ServedModel,
    parse,
)
from .openai_errors import (
    ApiError,
    ErrorKind,
    ErrorStyle,
    serving_error,
)
from .openai_responses import (
    DONE,
    TOKEN_TEXT,
    Choice,
    FinishReason,
    Usage,
    chat_chunk,
    completion_chunk,
    generated_text,
    models_response,
    response,
    response_id,
    usage_chunk,
)

__all__ = ["FrontConfig", "Responder", "add_common_routes", "build_app", "error_response", "one_prompt", "refused"]

_FINISH = {
    TerminalStatus.COMPLETED: FinishReason.LENGTH,
    TerminalStatus.CANCELED: FinishReason.ABORT,
    TerminalStatus.FAILED: FinishReason.ERROR,
    TerminalStatus.REJECTED: FinishReason.ERROR,
}
_JSON = "application/json"
#: What a failed request (a failed or timed-out handoff, a crashed worker) gets: vLLM's
#: ``GenerationError`` for a request that finished with an error (``vllm/entrypoints/openai/
#: serving_engine.py``), a 500 "Internal server error"; in a stream, one error event, then ``[DONE]``.
_FAILED = ApiError(ErrorKind.INTERNAL, "Internal server error")


@dataclass(frozen=True)
class FrontConfig:
    """What the front answers with: the model it serves and the ``created`` stamp of its bodies."""

    served: ServedModel
    created: int


class Responder:
    """Answers a request from its stream: streamed (SSE, one event per token) or whole, with
    the metrics fed from the cluster's times.  Shared by dmocker's front and the workers'."""

    def __init__(self, cluster: ServeCluster, config: FrontConfig, metrics: WorkerMetrics | None) -> None:
        self.cluster = cluster
        self.config = config
        self.metrics = metrics
        self.error_style = ErrorStyle.VLLM

    async def answer(self, request: web.Request, req: GenerationRequest, stream: RequestStream,
                     max_tokens: int, metrics: WorkerMetrics | None = None) -> web.StreamResponse:
        """The response to ``req`` from ``stream``; a client that goes away cancels the request.
        ``metrics``: the answering worker's own (default: the front's)."""
        rid = response_id(req.endpoint, stream.request_id)
        m = metrics if metrics is not None else self.metrics
        try:
            if req.stream:
                return await self._stream(request, req, rid, stream, max_tokens, m)
            return await self._whole(req, rid, stream, m)
        except (asyncio.CancelledError, ConnectionResetError):
            self.cluster.cancel(stream)  # the client went away: its handoff is canceled
            raise

    async def models(self, _: web.Request) -> web.StreamResponse:
        return web.Response(body=models_response(self.config.served, self.config.created), content_type=_JSON)

    async def health(self, _: web.Request) -> web.StreamResponse:
        return web.Response(status=200)

    async def metrics_page(self, _: web.Request) -> web.StreamResponse:
        m = self.metrics
        if m is None:
            return web.Response(status=404)
        live = self.cluster.cluster
        waiting = min(live.queued(), live.in_flight)
        m.set_queue(live.in_flight - waiting, waiting)
        m.set_kv_cache_usage(live.kv_usage())
        self._set_stranded(m)
        return web.Response(body=m.exposition(), headers={"Content-Type": "text/plain; version=0.0.4"})


    def worker_metrics(self) -> WorkerMetrics | None:
        """A registry of a worker's own (a worker's server: every vLLM server exposes only its own
        engine); None without the serve extra."""
        if self.metrics is None:
            return None
        return WorkerMetrics(self.config.served.names[0], engine="0")

    def worker_metrics_page(self, stage: int, index: int, m: WorkerMetrics | None) -> web.Response:
        """``GET /metrics`` of one worker: its own queue and KV usage, the cluster's stranded KV."""
        if m is None:
            return web.Response(status=404)
        live = self.cluster.cluster
        running, waiting, usage = live.worker_load(stage, index)
        m.set_queue(running, waiting)
        m.set_kv_cache_usage(usage)
        self._set_stranded(m)
        return web.Response(body=m.exposition(), headers={"Content-Type": "text/plain; version=0.0.4"})

    def _set_stranded(self, m: WorkerMetrics) -> None:
        stranded = self.cluster.cluster.stranded()
        m.set_leaked_blocks(LeakCause.NO_DECODE_LEG, stranded.no_decode_leg)
        m.set_leaked_blocks(LeakCause.STRANDED_DESTINATION, stranded.no_prefill_leg)
        m.set_leaked_blocks(LeakCause.CLIENT_DISCONNECT, stranded.after_cancel)
        m.set_leaked_blocks(LeakCause.NEVER_RELEASED, stranded.retired)

    def prefill_answered(self, m: WorkerMetrics | None, req: GenerationRequest, request_id: int, start_ms: float,
                         held_ms: float) -> None:
        """A prefill worker answered its leg (one token, once the source is held): its metrics."""
        if m is None:
            return
        reused = min(self.cluster.cluster.reused_tokens(request_id), req.prompt_tokens)
        m.prefilled(req.prompt_tokens - reused)
        m.prefix_cache_lookup(req.prompt_tokens, reused)
        m.first_token(max(held_ms - start_ms, 0.0) / 1000.0)
        m.request_finished(FinishReason.LENGTH.value, max(held_ms - start_ms, 0.0) / 1000.0)

    async def _whole(self, req: GenerationRequest, rid: str, stream: RequestStream,
                     m: WorkerMetrics | None) -> web.StreamResponse:
        start = self.cluster.now_ms()
        n = 0
        last = start
        while True:
            item = await stream.queue.get()
            if isinstance(item, End):
                break
            self._token(m, n, item, start, last)
            n += 1
            last = item
        self._finished(m, stream.request_id, req, item, start)
        if item.status is TerminalStatus.REJECTED:
            err = serving_error("The prompt needs more KV cache blocks than a worker has.", "prompt")
            return web.Response(status=err.status, body=err.body(self.error_style), content_type=_JSON)
        if item.status is TerminalStatus.FAILED:
            return web.Response(status=_FAILED.status, body=_FAILED.body(self.error_style), content_type=_JSON)
        choice = Choice(0, generated_text(n), _FINISH[item.status])
        body = response(req.endpoint, rid, self.config.created, req.model, [choice],
                        Usage(req.prompt_tokens, n), None)
        return web.Response(body=body, content_type=_JSON)

    async def _stream(self, request: web.Request, req: GenerationRequest, rid: str,
                      stream: RequestStream, max_tokens: int, m: WorkerMetrics | None) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await out.prepare(request)
        created, model = self.config.created, req.model
        chat = req.endpoint is Endpoint.CHAT
        if chat:
            await out.write(chat_chunk(rid, created, model, Choice(0, ""), first=True))
        start = self.cluster.now_ms()
        n = 0
        last = start
        while True:
            item = await stream.queue.get()
            if isinstance(item, End):
                break
            self._token(m, n, item, start, last)
            n += 1
            last = item
            # the mock has no end-of-sequence token: the last token is the max_tokens-th
            reason = FinishReason.LENGTH if n == max_tokens else None
            usage = Usage(req.prompt_tokens, n) if req.continuous_usage_stats else None
            choice = Choice(0, TOKEN_TEXT, reason)
            await out.write(chat_chunk(rid, created, model, choice, usage=usage) if chat
                            else completion_chunk(rid, created, model, choice, usage))
        self._finished(m, stream.request_id, req, item, start)
        if item.status is TerminalStatus.REJECTED:
            err = serving_error("The prompt needs more KV cache blocks than a worker has.", "prompt")
            await out.write(err.stream_chunk(self.error_style))
        elif item.status is TerminalStatus.FAILED:
            await out.write(_FAILED.stream_chunk(self.error_style))
        elif item.status is not TerminalStatus.COMPLETED:
            choice = Choice(0, "", _FINISH[item.status])
            await out.write(chat_chunk(rid, created, model, choice) if chat
                            else completion_chunk(rid, created, model, choice))
        if req.include_usage:
            await out.write(usage_chunk(req.endpoint, rid, created, model, Usage(req.prompt_tokens, n)))
        await out.write(DONE)
        await out.write_eof()
        return out

    @staticmethod
    def _token(m: WorkerMetrics | None, n: int, t_ms: float, start: float, last: float) -> None:
        if m is None:
            return
        if n == 0:
            m.first_token(max(t_ms - start, 0.0) / 1000.0)
        else:
            m.next_token(max(t_ms - last, 0.0) / 1000.0)

    def _finished(self, m: WorkerMetrics | None, request_id: int, req: GenerationRequest, end: End,
                  start: float) -> None:
        if m is not None:
            m.request_finished(_FINISH[end.status].value, max(end.t_ms - start, 0.0) / 1000.0)
            if end.status is TerminalStatus.COMPLETED:
                reused = min(self.cluster.cluster.reused_tokens(request_id), req.prompt_tokens)
                m.prefix_cache_lookup(req.prompt_tokens, reused)


def one_prompt(req: GenerationRequest) -> tuple[int, ...]:
    """The token ids of a request's one prompt (a batch is refused: one handoff per request)."""
    if len(req.prompts) != 1:
        raise serving_error(f"dmocker serve takes one prompt per request, got {len(req.prompts)}.", "prompt")
    return req.prompts[0].token_ids


def refused(exc: LiveError) -> ApiError:
    """A request the cluster cannot take, as the HTTP error it is."""
    kind = ErrorKind.SERVICE_UNAVAILABLE if "capacity" in str(exc) else ErrorKind.BAD_REQUEST
    return ApiError(kind, str(exc))


def error_response(err: ApiError, style: ErrorStyle = ErrorStyle.VLLM) -> web.Response:
    return web.Response(status=err.status, body=err.body(style), content_type=_JSON)


class _Front:
    """dmocker's own front: the replay's routers choose the workers."""

    def __init__(self, responder: Responder) -> None:
        self.responder = responder
        self.cluster = responder.cluster
        self.config = responder.config
        self.metrics = responder.metrics

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, Endpoint.COMPLETIONS)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, Endpoint.CHAT)

    async def _generate(self, request: web.Request, endpoint: Endpoint) -> web.StreamResponse:
        try:
            req = parse(endpoint, await request.read(), self.config.served)
            try:
                stream = self.cluster.submit(one_prompt(req), req.max_tokens)
            except LiveError as exc:
                raise refused(exc) from None
        except ApiError as err:
            return error_response(err)
        return await self.responder.answer(request, req, stream, req.max_tokens)


def add_common_routes(app: web.Application, responder: Responder, worker: tuple[int, int] | None = None,
                      metrics: WorkerMetrics | None = None) -> None:
    """``/v1/models``, ``/health`` and ``/metrics``, as every vLLM server has them; a worker's
    server (``worker``: its stage and index) exposes its own ``metrics``."""
    app.router.add_get("/v1/models", responder.models)
    app.router.add_get("/health", responder.health)
    if worker is None:
        app.router.add_get("/metrics", responder.metrics_page)
        return
    stage, index = worker

    async def page(_: web.Request) -> web.StreamResponse:
        return responder.worker_metrics_page(stage, index, metrics)

    app.router.add_get("/metrics", page)


def build_app(cluster: ServeCluster, config: FrontConfig, metrics: WorkerMetrics | None) -> web.Application:
    """The aiohttp application of the front."""
    responder = Responder(cluster, config, metrics)
    front = _Front(responder)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post(Endpoint.COMPLETIONS.value, front.completions)
    app.router.add_post(Endpoint.CHAT.value, front.chat)
    add_common_routes(app, responder)
    return app
