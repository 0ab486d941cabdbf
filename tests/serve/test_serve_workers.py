"""``dmocker serve --front workers``: each worker on a port of its own, driven the way vLLM's
disaggregated proxy for the NIXL connector drives real workers.

The client below sends the request sequence of ``vllm-project/vllm``
``tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`` (written from its description in
docs/real-proxies.md, not copied): the prefill leg with ``kv_transfer_params.do_remote_decode``,
``stream: false`` and ``max_tokens: 1``; then the decode leg, the original body with the
prefill's returned ``kv_transfer_params``, streamed back.  Then a proxy that loses decode legs
(the abort timeout frees the sources), and decode legs with wrong parameters.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

aiohttp = pytest.importorskip("aiohttp")
pytest.importorskip("prometheus_client")

from .servers import ROOT, Server  # noqa: E402

pytestmark = pytest.mark.slow  # starts servers

_PREFILL_PARAMS = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                   "remote_block_ids": None, "remote_host": None, "remote_port": None}


def _urls(where: str) -> tuple[list[str], list[str]]:
    prefill, decode = where.split("; decode workers ")
    return prefill.removeprefix("prefill workers ").split(), decode.split()


class ToyProxyClient:
    """The two legs of vLLM's NIXL test proxy, round robin over the workers."""

    def __init__(self, session: Any, prefill: list[str], decode: list[str]) -> None:
        self.session, self.prefill, self.decode = session, prefill, decode
        self.n = 0

    async def prefill_leg(self, body: dict[str, Any], k: int) -> dict[str, Any]:
        leg = {key: v for key, v in body.items() if key not in ("stream_options", "min_tokens")}
        leg.update(kv_transfer_params=dict(_PREFILL_PARAMS), stream=False, max_tokens=1)
        async with self.session.post(self.prefill[k % len(self.prefill)] + "/v1/completions", json=leg,
                                     headers={"X-Request-Id": f"req-{k}"}) as resp:
            assert resp.status == 200, await resp.text()
            out = await resp.json()
        assert out["usage"]["completion_tokens"] == 1
        params: dict[str, Any] = out["kv_transfer_params"]
        return params

    async def decode_leg(self, body: dict[str, Any], params: dict[str, Any], k: int) -> tuple[int, bytes]:
        async with self.session.post(self.decode[k % len(self.decode)] + "/v1/completions",
                                     json={**body, "kv_transfer_params": params},
                                     headers={"X-Request-Id": f"req-{k}"}) as resp:
            return resp.status, await resp.read()

    async def request(self, body: dict[str, Any], k: int) -> bytes:
        params = await self.prefill_leg(body, k)
        status, out = await self.decode_leg(body, params, k)
        assert status == 200, out
        return out


async def _drive(where: str) -> None:
    prefill, decode = _urls(where)
    assert len(prefill) == 2 and len(decode) == 2
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as s:
        proxy = ToyProxyClient(s, prefill, decode)
        bodies = [{"model": "dmocker-mock", "prompt": "a shared prefix " * 30 + f"question {k}", "max_tokens": 10,
                   "stream": True, "stream_options": {"include_usage": True}} for k in range(16)]
        outs = await asyncio.gather(*(proxy.request(b, k) for k, b in enumerate(bodies)))
        for out in outs:
            events = [e[len(b"data: "):] for e in out[:-2].split(b"\n\n")]
            assert events[-1] == b"[DONE]"
            assert json.loads(events[-2])["usage"]["completion_tokens"] == 10
            assert b"".join(e for e in events[:-2]).count(b'" the"') == 10

        # the prefill's answer names its side channel; a decode leg reads the source once
        body = {"prompt": "one more", "max_tokens": 3}
        params = await proxy.prefill_leg(body, 0)
        assert params["do_remote_prefill"] is True and params["remote_port"] == int(prefill[0].rsplit(":", 1)[1])
        assert params["remote_engine_id"] == "dmocker-prefill-0" and params["tp_size"] == 1
        status, _ = await proxy.decode_leg(body, params, 1)
        assert status == 200
        status, again = await proxy.decode_leg(body, params, 0)  # read already: the source is released
        assert status == 400 and b"kv_transfer_params" in again

        # bad decode legs: no parameters, a request no prefill worker holds
        async with s.post(decode[0] + "/v1/completions", json={"prompt": "x", "max_tokens": 2}) as resp:
            assert resp.status == 400
            assert (await resp.json())["error"]["param"] == "kv_transfer_params"
        status, _ = await proxy.decode_leg({"prompt": "x"}, {**params, "remote_request_id": "999999"}, 0)
        assert status == 400
        # a prefill leg without do_remote_decode
        async with s.post(prefill[0] + "/v1/completions", json={"prompt": "x", "max_tokens": 2}) as resp:
            assert resp.status == 400

        # a proxy that loses its decode legs: the abort timeout (1 s here) frees the sources
        for k in range(3):
            await proxy.prefill_leg({"prompt": f"lost {k} " * 20, "max_tokens": 5}, k)
        await asyncio.sleep(2.0)


def test_workers_serve_vllms_proxy_sequence_and_free_what_nobody_reads(tmp_path: Path) -> None:
    server = Server(tmp_path, "--front", "workers", "--kv-abort-timeout-s", "1")
    try:
        asyncio.run(asyncio.wait_for(_drive(server.where), timeout=120))
    finally:
        code, output = server.stop()
    assert code == 0, output
    summary = server.summary()
    assert summary["invariants_ok"] is True, summary["invariant_breaks"]
    assert summary["leaked_kv_blocks"] == 0
    assert summary["completed_requests"] == 17
    assert summary["failed_requests"] == 3  # freed by the abort timeout (TimedOut)
    conform = subprocess.run([sys.executable, "-m", "dmocker", "conform", str(server.events)],
                             capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert conform.returncode == 0, conform.stdout + conform.stderr


def test_workers_front_refuses_what_it_does_not_speak_yet(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "dmocker", "serve", "--front", "workers", "--engine", "sglang",
                          "--port", "0", "--stop-after-s", "5"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=tmp_path)
    assert out.returncode == 2 and "source-first" in out.stderr
