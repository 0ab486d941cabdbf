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
from .cluster import End
from .openai_api import (
    TOKEN_TEXT,
    ApiError,
    Choice,
    Endpoint,
    FinishReason,
    GenerationRequest,
    JsonObject,
    Usage,
    parse,
    response,
    response_id,
    serving_error,
)

__all__ = ["KV_PATH", "VllmWorkers"]

#: The side channel's route on a prefill worker: whether a request's KV is held there.
KV_PATH = "/dmocker/kv/{request_id}"
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
        add_common_routes(app, self.responder)
        return app

    async def _prefill(self, request: web.Request, endpoint: Endpoint, worker: int) -> web.StreamResponse:
        config = self.responder.config
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
            await stream.held
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
        add_common_routes(app, self.responder)
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
        return await self.responder.answer(request, req, stream, req.max_tokens)

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


def _ended(end: End) -> ApiError:
    if end.status is TerminalStatus.REJECTED:
        return serving_error("The prompt needs more KV cache blocks than a worker has.", "prompt")
    return serving_error(f"the request ended ({end.status.label}) before its prefill finished")
