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
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

aiohttp = pytest.importorskip("aiohttp")
pytest.importorskip("prometheus_client")

from .servers import ROOT, Server  # noqa: E402

_PREFILL_PARAMS = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
                   "remote_block_ids": None, "remote_host": None, "remote_port": None}


def _samples(text: str) -> dict[str, float]:
    """A metrics page by sample: the name, with its labels other than vLLM's two when it has more."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for x in family.samples:
            extra = {k: v for k, v in x.labels.items() if k not in ("model_name", "engine")}
            key = x.name + ("{" + ",".join(f'{k}="{v}"' for k, v in sorted(extra.items())) + "}" if extra else "")
            out[key] = x.value
    return out


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


def test_one_request_through_both_legs(tmp_path: Path) -> None:
    """The quick loop's twin of the test below: one request, prefill leg then decode leg."""
    server = Server(tmp_path, "--front", "workers")

    async def one() -> tuple[bytes, list[dict[str, float]]]:
        prefill, decode = _urls(server.where)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s:
            out = await ToyProxyClient(s, prefill, decode).request({"prompt": "hello world!", "max_tokens": 2}, 0)
            pages = []
            for url in prefill + decode:  # each worker exposes its own metrics, as a vLLM server does
                async with s.get(url + "/metrics") as r:
                    pages.append(_samples(await r.text()))
            return out, pages

    raw, pages = server.drive(one(), timeout=60)
    out = json.loads(raw)
    assert out["choices"][0]["text"] == " the" * 2
    p0, p1, d0, d1 = pages
    assert p0["vllm:prompt_tokens_total"] == 3 and p0["vllm:generation_tokens_total"] == 1
    assert p0['vllm:request_success_total{finished_reason="length"}'] == 1
    assert d0["vllm:prompt_tokens_total"] == 0 and d0["vllm:generation_tokens_total"] == 2
    assert d0['vllm:request_success_total{finished_reason="length"}'] == 1
    assert p1['vllm:request_success_total{finished_reason="length"}'] == 0 == d1["vllm:generation_tokens_total"]
    assert all(p["vllm:num_requests_running"] == 0 and p["vllm:kv_cache_usage_perc"] == 0 for p in pages)
    summary = server.summary()
    assert summary["completed_requests"] == 1 and summary["leaked_kv_blocks"] == 0


@pytest.mark.slow  # starts servers
def test_workers_serve_vllms_proxy_sequence_and_free_what_nobody_reads(tmp_path: Path) -> None:
    server = Server(tmp_path, "--front", "workers", "--kv-abort-timeout-s", "1")
    server.drive(_drive(server.where), timeout=120)
    summary = server.summary()
    assert summary["invariants_ok"] is True, summary["invariant_breaks"]
    assert summary["leaked_kv_blocks"] == 0
    assert summary["completed_requests"] == 17
    assert summary["failed_requests"] == 3  # freed by the abort timeout (TimedOut)
    conform = subprocess.run([sys.executable, "-m", "dmocker", "conform", str(server.events)],
                             capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert conform.returncode == 0, conform.stdout + conform.stderr


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _through_sglang_router(where: str, router_port: int) -> None:
    prefill, rest = where.split("; decode workers ")
    decode, boot = rest.split("; bootstrap ports ")
    prefill_urls, decode_urls, boot_ports = prefill.removeprefix("prefill workers ").split(), decode.split(), boot.split()
    args = [sys.executable, "-m", "sglang_router.launch_router", "--pd-disaggregation", "--host", "127.0.0.1",
            "--port", str(router_port)]
    for url, port in zip(prefill_urls, boot_ports):
        args += ["--prefill", url, port]
    for url in decode_urls:
        args += ["--decode", url]
    router = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{router_port}"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s:
            for _ in range(120):  # the router starts, checks the workers' health and info
                try:
                    async with s.post(base + "/v1/completions", json={"model": "dmocker-mock", "prompt": "ready?", "max_tokens": 1}) as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.25)
            else:
                raise AssertionError("sglang-router did not come up")

            async def one(k: int, stream: bool) -> None:
                body = {"model": "dmocker-mock", "prompt": "shared context " * 20 + f"q{k}", "max_tokens": 6, "stream": stream}
                async with s.post(base + "/v1/completions", json=body) as r:
                    assert r.status == 200, await r.text()
                    raw = await r.read()
                if stream:
                    assert raw.count(b'" the"') == 6 and raw.rstrip().endswith(b"[DONE]")
                else:
                    assert json.loads(raw)["choices"][0]["text"] == " the" * 6

            await asyncio.gather(*(one(k, k % 2 == 0) for k in range(12)))
    finally:
        router.terminate()
        router.wait(timeout=30)


@pytest.mark.slow  # starts servers
def test_workers_serve_sglang_router_in_prefill_decode_mode(tmp_path: Path) -> None:
    pytest.importorskip("sglang_router")
    server = Server(tmp_path, "--front", "workers", "--engine", "sglang")
    server.drive(_through_sglang_router(server.where, _free_port()), timeout=150)
    summary = server.summary()
    assert summary["invariants_ok"] is True, summary["invariant_breaks"]
    assert summary["leaked_kv_blocks"] == 0 and summary["completed_requests"] >= 13


async def _legs_by_hand(where: str) -> None:
    prefill, rest = where.split("; decode workers ")
    decode, boot = rest.split("; bootstrap ports ")
    p_url, d_url, b_port = prefill.removeprefix("prefill workers ").split()[0], decode.split()[0], int(boot.split()[0])
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s:
        body = {"prompt": "by hand", "max_tokens": 4, "bootstrap_host": "127.0.0.1", "bootstrap_port": b_port,
                "bootstrap_room": 42}

        async def leg(url: str, delay: float) -> tuple[int, Any]:
            await asyncio.sleep(delay)
            async with s.post(url + "/v1/completions", json=body) as r:
                return r.status, await r.json()

        # the decode leg first, the prefill leg later: they meet by the room
        (d_status, d_out), (p_status, p_out) = await asyncio.gather(leg(d_url, 0.0), leg(p_url, 0.2))
        assert (d_status, p_status) == (200, 200)
        assert d_out["choices"][0]["text"] == " the" * 4 and p_out["usage"]["completion_tokens"] == 1
        async with s.post(d_url + "/v1/completions", json={"prompt": "x"}) as r:  # no bootstrap fields
            error = await r.json()  # SGLang's flat error body
            assert r.status == 400 and error["object"] == "error" and error["param"] == "bootstrap_room"
        async with s.post(d_url + "/v1/completions", json={**body, "bootstrap_port": _free_port(),
                                                            "bootstrap_room": 7}) as r:
            assert r.status == 400 and (await r.json())["param"] == "bootstrap_port"


@pytest.mark.slow  # starts servers
def test_sglang_legs_meet_by_their_room_in_either_order(tmp_path: Path) -> None:
    server = Server(tmp_path, "--front", "workers", "--engine", "sglang", "--prefill-workers", "1",
                    "--decode-workers", "1")
    server.drive(_legs_by_hand(server.where), timeout=60)
    summary = server.summary()
    assert summary["invariants_ok"] is True and summary["completed_requests"] == 1


async def _lonely_legs(where: str) -> None:
    """A decode leg whose prefill leg never comes, and a prefill leg whose decode leg never comes."""
    prefill, rest = where.split("; decode workers ")
    decode, boot = rest.split("; bootstrap ports ")
    p_url, d_url, b_port = prefill.removeprefix("prefill workers ").split()[0], decode.split()[0], int(boot.split()[0])
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s:
        def body(room: int) -> dict[str, Any]:
            return {"prompt": "lonely " * 40, "max_tokens": 4, "bootstrap_host": "127.0.0.1", "bootstrap_port": b_port,
                    "bootstrap_room": room}

        async def leg(url: str, room: int) -> tuple[int, Any]:
            async with s.post(url + "/v1/completions", json=body(room)) as r:
                return r.status, await r.json()

        async def stranded_while_waiting() -> float:
            await asyncio.sleep(0.4)  # the decode leg has reserved and waits for its KV
            async with s.get(d_url + "/metrics") as r:
                text = await r.text()
            from prometheus_client.parser import text_string_to_metric_families

            fam = {f.name: f for f in text_string_to_metric_families(text)}["dmocker_leaked_kv_blocks"]
            return next(x.value for x in fam.samples if x.labels["cause"] == "stranded_destination")

        (d_status, d_out), (p_status, p_out), stranded = await asyncio.gather(
            leg(d_url, 1001), leg(p_url, 1002), stranded_while_waiting())
        # SGLang ends a transfer that timed out with a 500, in its flat error body
        assert (d_status, p_status) == (500, 500)
        assert d_out["object"] == "error" and d_out["code"] == 500 and p_out["code"] == 500
        assert stranded > 0
        # and keeps serving: a pair that meets
        (d_status, _), (p_status, _) = await asyncio.gather(leg(d_url, 1003), leg(p_url, 1003))
        assert (d_status, p_status) == (200, 200)


@pytest.mark.slow  # starts servers, waits for two timeouts
def test_sglang_legs_whose_partner_never_comes_time_out(tmp_path: Path) -> None:
    server = Server(tmp_path, "--front", "workers", "--engine", "sglang", "--prefill-workers", "1",
                    "--decode-workers", "1", "--disaggregation-bootstrap-timeout-s", "1", "--disaggregation-waiting-timeout-s", "1")
    server.drive(_lonely_legs(server.where), timeout=60)
    summary = server.summary()
    assert summary["invariants_ok"] is True, summary["invariant_breaks"]
    assert summary["failed_requests"] == 2 and summary["completed_requests"] == 1 and summary["leaked_kv_blocks"] == 0
