"""The workers' own servers, for a real proxy in front (``dmocker serve --front workers``): each
prefill and decode worker of the cluster listens on a port of its own and speaks its engine's
disaggregation protocol, so the proxy chooses the workers and carries the handoff's parameters
between them, as it does with real ones.

vLLM's order (NixlConnector, source-first; ``vllm-project/vllm``
``tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`` is the proxy,
``vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py`` the connector):

1. The prefill leg comes to a prefill worker with ``kv_transfer_params.do_remote_decode: true``
   (and ``max_tokens: 1``).  The worker prefills, holds the KV, and answers with the
   ``kv_transfer_params`` the decode needs: ``do_remote_prefill: true``, ``remote_engine_id``,
   ``remote_block_ids``, ``remote_request_id``, ``remote_host`` and ``remote_port`` (the
   worker's side channel: its own HTTP server here) and ``tp_size``.
2. The decode leg comes to a decode worker with those parameters.  The worker asks the prefill
   worker they name, over that side channel (``GET /dmocker/kv/<remote_request_id>``), whether
   the KV is held there, reserves its blocks, and the cluster moves the KV (the replay's
   transfer timing), releases the source and decodes; the tokens stream to the proxy.
3. A held source whose decode leg never comes is freed after ``--kv-abort-timeout-s`` (vLLM's
   ``VLLM_NIXL_ABORT_REQUEST_TIMEOUT``, 480 s by default).

A request that is not a leg of a disaggregated request (no ``kv_transfer_params``) is refused
with a 400 naming what is missing: a real vLLM worker would serve it alone, which a mock of one
stage of the cluster does not model.
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from dmocker.replay.collector import TerminalStatus
from dmocker.replay.live import LiveError

from .app import Responder, add_common_routes, error_response, one_prompt, refused
from .cluster import End, RequestEnded, RequestStream
from .metrics import WorkerMetrics
from .openai_api import (
    Endpoint,
    GenerationRequest,
    parse,
)
from .openai_errors import (
    ApiError,
    ErrorKind,
    ErrorStyle,
    JsonObject,
    serving_error,
)
from .openai_responses import (
    TOKEN_TEXT,
    Choice,
    FinishReason,
    Usage,
    response,
    response_id,
    stream_tokens,
)

__all__ = ["BOOTSTRAP_PATH", "KV_PATH", "SglangWorkers", "VllmWorkers", "server_info"]

#: The side channel's route on a prefill worker: whether a request's KV is held there.
KV_PATH = "/dmocker/kv/{request_id}"
#: The route of a prefill worker's bootstrap server (SGLang's order): which worker it is.
BOOTSTRAP_PATH = "/dmocker/bootstrap"
_NOT_A_PREFILL_LEG = ("a mock prefill worker serves the prefill leg of a disaggregated request: "
                      "kv_transfer_params.do_remote_decode must be true")
_NOT_A_DECODE_LEG = ("a mock decode worker serves the decode leg of a disaggregated request: kv_transfer_params "
                     "must carry the prefill's do_remote_prefill: true, remote_request_id, remote_host and remote_port")


class VllmWorkers:
    """The prefill and decode workers' applications, vLLM's order (module docstring)."""

    def __init__(self, responder: Responder, tp_size: int) -> None:
        self.responder = responder
        self.cluster = responder.cluster
        self.tp_size = tp_size
        #: each worker's own metrics, by (stage, index)
        self.metrics = _WorkerMetricsTable(responder)
        #: each prefill worker's side channel (host, port), once it listens
        self.side_channels: dict[int, tuple[str, int]] = {}
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    # ------------------------------------------------------------------ prefill workers

    def prefill_app(self, worker: int) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)

        async def completions(request: web.Request) -> web.StreamResponse:
            return await self._prefill(request, Endpoint.COMPLETIONS, worker)

        async def chat(request: web.Request) -> web.StreamResponse:
            return await self._prefill(request, Endpoint.CHAT, worker)

        async def kv(request: web.Request) -> web.StreamResponse:
            return self._side_channel(request)

        app.router.add_post(Endpoint.COMPLETIONS.value, completions)
        app.router.add_post(Endpoint.CHAT.value, chat)
        app.router.add_get(KV_PATH, kv)
        add_common_routes(app, self.responder, (0, worker), self.metrics[(0, worker)])
        return app

    async def _prefill(self, request: web.Request, endpoint: Endpoint, worker: int) -> web.StreamResponse:
        config = self.responder.config
        start = self.cluster.now_ms()
        try:
            req = parse(endpoint, await request.read(), config.served)
            params = req.kv_transfer_params
            if not params or params.get("do_remote_decode") is not True:
                raise serving_error(_NOT_A_PREFILL_LEG, "kv_transfer_params")
            try:
                stream = self.cluster.submit(one_prompt(req), req.max_tokens, prefill_worker=worker)
            except LiveError as exc:
                raise refused(exc) from None
        except ApiError as err:
            return error_response(err)
        try:
            held_ms = await stream.held
        except LookupError:  # it ended first: rejected (too large for a worker), or canceled
            item = await stream.queue.get()
            while not isinstance(item, End):
                item = await stream.queue.get()
            return error_response(_ended(item))
        except (asyncio.CancelledError, ConnectionResetError):
            self.cluster.cancel(stream)
            raise
        host, port = self.side_channels[worker]
        rid = stream.request_id
        blocks = -(-req.prompt_tokens // self.cluster.block_size)
        kv: JsonObject = {
            "do_remote_prefill": True, "do_remote_decode": False,
            "remote_block_ids": list(range(blocks)), "remote_engine_id": f"dmocker-prefill-{worker}",
            "remote_request_id": str(rid), "remote_host": host, "remote_port": port, "tp_size": self.tp_size,
        }
        body = response(endpoint, response_id(endpoint, rid), config.created, req.model,
                        [Choice(0, TOKEN_TEXT, FinishReason.LENGTH)], Usage(req.prompt_tokens, 1), kv)
        self.responder.prefill_answered(self.metrics[(0, worker)], req, rid, start, held_ms)
        return web.Response(body=body, content_type="application/json")

    def _side_channel(self, request: web.Request) -> web.StreamResponse:
        text = request.match_info["request_id"]
        if text.isdigit() and self.cluster.cluster.source_held(int(text)):
            return web.json_response({"request_id": text, "held": True})
        return web.json_response({"request_id": text, "held": False}, status=404)

    # ------------------------------------------------------------------ decode workers

    def decode_app(self, worker: int) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)

        async def completions(request: web.Request) -> web.StreamResponse:
            return await self._decode(request, Endpoint.COMPLETIONS, worker)

        async def chat(request: web.Request) -> web.StreamResponse:
            return await self._decode(request, Endpoint.CHAT, worker)

        app.router.add_post(Endpoint.COMPLETIONS.value, completions)
        app.router.add_post(Endpoint.CHAT.value, chat)
        add_common_routes(app, self.responder, (1, worker), self.metrics[(1, worker)])
        return app

    async def _decode(self, request: web.Request, endpoint: Endpoint, worker: int) -> web.StreamResponse:
        try:
            req = parse(endpoint, await request.read(), self.responder.config.served)
            one_prompt(req)
            rid, host, port = _decode_leg(req)
            if not await self._read_source(host, port, rid):
                raise serving_error(f"no KV of request {rid} is held at {host}:{port} (freed after the abort "
                                    "timeout, never prefilled there, or read already)", "kv_transfer_params")
            stream = self.cluster.stream_of(rid)
            if stream is None or not self.cluster.attach_decode(stream, worker, req.max_tokens):
                raise serving_error(f"request {rid} has a decode leg already, or has ended", "kv_transfer_params")
        except ApiError as err:
            return error_response(err)
        return await self.responder.answer(request, req, stream, req.max_tokens, self.metrics[(1, worker)])

    async def _read_source(self, host: str, port: int, rid: int) -> bool:
        """The side channel: ask the prefill worker the parameters name whether it holds the KV."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        try:
            async with self._session.get(f"http://{host}:{port}" + KV_PATH.format(request_id=rid)) as resp:
                return resp.status == 200
        except aiohttp.ClientError:
            return False


def _decode_leg(req: GenerationRequest) -> tuple[int, str, int]:
    """(remote request id, side channel host, port) of a decode leg's ``kv_transfer_params``."""
    params = req.kv_transfer_params
    if not params or params.get("do_remote_prefill") is not True:
        raise serving_error(_NOT_A_DECODE_LEG, "kv_transfer_params")
    rid, host, port = params.get("remote_request_id"), params.get("remote_host"), params.get("remote_port")
    if not isinstance(rid, str) or not rid.isdigit() or not isinstance(host, str) \
            or isinstance(port, bool) or not isinstance(port, int):
        raise serving_error(_NOT_A_DECODE_LEG, "kv_transfer_params")
    return int(rid), host, port


class _WorkerMetricsTable:
    """Each worker's own metrics registry, made when its server is built (None without the extra)."""

    def __init__(self, responder: Responder) -> None:
        self._responder = responder
        self._by_worker: dict[tuple[int, int], WorkerMetrics | None] = {}

    def __getitem__(self, key: tuple[int, int]) -> WorkerMetrics | None:
        if key not in self._by_worker:
            self._by_worker[key] = self._responder.worker_metrics()
        return self._by_worker[key]


def _ended(end: End) -> ApiError:
    if end.status is TerminalStatus.REJECTED:
        return serving_error("The prompt needs more KV cache blocks than a worker has.", "prompt")
    if end.status is TerminalStatus.FAILED:  # a failed or timed-out handoff: the server's error, a 500
        return ApiError(ErrorKind.INTERNAL, "Internal server error")
    return serving_error(f"the request ended ({end.status.label}) before its prefill finished")


def server_info(role: str, responder: Responder) -> JsonObject:
    """What ``GET /server_info`` (and ``/model_info``) tell a router: SGLang's field names for
    the served model and the worker's disaggregation role (``sgl-project/sglang``
    ``python/sglang/srt/entrypoints/http_server.py``; ``sglang-router`` reads both at start)."""
    name = responder.config.served.names[0]
    return {"model_path": name, "served_model_name": name, "tokenizer_path": name, "is_generation": True,
            "disaggregation_mode": role, "max_total_num_tokens": responder.config.served.max_model_len,
            "version": "dmocker"}


def add_sglang_routes(app: web.Application, role: str, responder: Responder) -> None:
    info = server_info(role, responder)

    async def info_page(_: web.Request) -> web.StreamResponse:
        return web.json_response(info)

    for path in ("/server_info", "/get_server_info", "/model_info", "/get_model_info"):
        app.router.add_get(path, info_page)


class SglangWorkers:
    """SGLang's order (destination-first): a router sends the same request, with
    ``bootstrap_host``, ``bootstrap_port`` and ``bootstrap_room``, to a prefill worker and a
    decode worker at once; the two legs meet by the room.  Each prefill worker has a bootstrap
    server of its own (the port a router is given with it, ``--prefill URL PORT``), which the
    decode leg asks which worker it is (SGLang's ``python/sglang/srt/disaggregation/``: the
    decode side registers with the prefill's bootstrap server before the KV is sent).

    The cluster's coordinator orders the handoff: the decode worker reserves first, the prefill
    worker prefills once the destination is reserved and its own leg has come, the KV moves,
    the decode streams.  The prefill leg is answered with its one token once the source is
    held; the decode leg streams the request's tokens.
    """

    def __init__(self, responder: Responder) -> None:
        # SGLang's server writes the flat error body (python/sglang/srt/entrypoints/openai/protocol.py)
        responder.error_style = ErrorStyle.FLAT
        self.responder = responder
        self.cluster = responder.cluster
        #: each worker's own metrics, by (stage, index)
        self.metrics = _WorkerMetricsTable(responder)
        self.rooms: dict[int, RequestStream] = {}
        self._room_of: dict[int, int] = {}
        self.cluster.end_listeners.append(self._ended)
        #: each prefill worker's bootstrap (host, port), once it listens
        self.bootstrap: dict[int, tuple[str, int]] = {}
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def bootstrap_app(self, worker: int) -> web.Application:
        app = web.Application()

        async def who(_: web.Request) -> web.StreamResponse:
            return web.json_response({"prefill_worker": worker})

        app.router.add_get(BOOTSTRAP_PATH, who)
        return app

    def worker_app(self, role: str, worker: int) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)

        async def completions(request: web.Request) -> web.StreamResponse:
            return await self._leg(request, Endpoint.COMPLETIONS, role, worker)

        async def chat(request: web.Request) -> web.StreamResponse:
            return await self._leg(request, Endpoint.CHAT, role, worker)

        app.router.add_post(Endpoint.COMPLETIONS.value, completions)
        app.router.add_post(Endpoint.CHAT.value, chat)
        stage = 0 if role == "prefill" else 1
        add_common_routes(app, self.responder, (stage, worker), self.metrics[(stage, worker)])
        add_sglang_routes(app, role, self.responder)
        return app

    async def _leg(self, request: web.Request, endpoint: Endpoint, role: str, worker: int) -> web.StreamResponse:
        prefill = role == "prefill"
        start = self.cluster.now_ms()
        metrics = self.metrics[(0 if prefill else 1, worker)]
        try:
            req = parse(endpoint, await request.read(), self.responder.config.served)
            tokens = one_prompt(req)
            if len(req.bootstrap) != 1 or req.bootstrap[0].room is None or req.bootstrap[0].port is None \
                    or req.bootstrap[0].host is None:
                raise serving_error(f"a mock {role} worker serves one leg of a disaggregated request: it needs "
                                    "bootstrap_host, bootstrap_port and bootstrap_room", "bootstrap_room")
            boot = req.bootstrap[0]
            assert boot.room is not None and boot.port is not None and boot.host is not None
            if not prefill and await self._bootstrap_worker(boot.host, boot.port) is None:
                raise serving_error(f"no prefill bootstrap server at {boot.host}:{boot.port}", "bootstrap_port")
            stream = self.rooms.get(boot.room)
            if stream is None:
                try:
                    stream = self.cluster.submit(tokens, req.max_tokens)
                except LiveError as exc:
                    raise refused(exc) from None
                self.rooms[boot.room] = stream
                self._room_of[stream.request_id] = boot.room
            attached = (self.cluster.attach_prefill(stream, worker) if prefill
                        else self.cluster.attach_decode(stream, worker, req.max_tokens))
            if not attached:
                raise serving_error(f"bootstrap room {boot.room} has a {role} leg already, or has ended",
                                    "bootstrap_room")
        except ApiError as err:
            return error_response(err, self.responder.error_style)
        if not prefill:
            return await self.responder.answer(request, req, stream, req.max_tokens, metrics)
        try:
            held_ms = await stream.held
        except RequestEnded as ended:  # first: timed out waiting for its decode leg, rejected, canceled
            # (the End itself stays on the stream: the decode leg reads it)
            return error_response(_ended(ended.end), self.responder.error_style)
        except (asyncio.CancelledError, ConnectionResetError):
            self.cluster.cancel(stream)
            raise
        config = self.responder.config
        rid = response_id(endpoint, stream.request_id)
        body = response(endpoint, rid, config.created, req.model, [Choice(0, TOKEN_TEXT, FinishReason.LENGTH)],
                        Usage(req.prompt_tokens, 1), None)
        self.responder.prefill_answered(metrics, req, stream.request_id, start, held_ms)
        if not req.stream:
            return web.Response(body=body, content_type="application/json")
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        for chunk in stream_tokens(req, rid, config.created, 1, FinishReason.LENGTH):
            await out.write(chunk)
        await out.write_eof()
        return out

    def _ended(self, request_id: int) -> None:
        """A request left the cluster: its room is free again."""
        room = self._room_of.pop(request_id, None)
        if room is not None:
            self.rooms.pop(room, None)

    async def _bootstrap_worker(self, host: str, port: int) -> int | None:
        """The side channel: which prefill worker the bootstrap server at host:port is."""
        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        try:
            async with self._session.get(f"http://{host}:{port}{BOOTSTRAP_PATH}") as resp:
                if resp.status != 200:
                    return None
                worker = (await resp.json()).get("prefill_worker")
                return worker if isinstance(worker, int) else None
        except (aiohttp.ClientError, ValueError):
            return None
