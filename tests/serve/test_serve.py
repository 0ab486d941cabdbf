"""``dmocker serve`` as a user meets it: started as a process on 127.0.0.1 (a free port), driven
by a real HTTP client, stopped with SIGTERM; then its outputs are read: the summary's end-of-run
checks, the per-request records, and the event log through ``dmocker conform``.

Bounded: every server stops by itself after 90 s (``--stop-after-s``) if a test fails to stop
it, every client call has a timeout, and all traffic goes to loopback.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

aiohttp = pytest.importorskip("aiohttp")
pytest.importorskip("prometheus_client")

from .servers import ROOT, Server

def _events(body: bytes) -> list[bytes]:
    assert body.endswith(b"\n\n")
    return [e[len(b"data: "):] for e in body[:-2].split(b"\n\n")]


async def _traffic(url: str) -> dict[str, float]:
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as s:
        async def stream(k: int) -> tuple[list[bytes], float]:
            body = {"model": "dmocker-mock", "prompt": "shared system prompt " * 40 + f"question {k}",
                    "max_tokens": 12, "stream": True, "stream_options": {"include_usage": True}}
            sent = time.monotonic()
            first = 0.0
            chunks = []
            async with s.post(url + "/v1/completions", data=orjson.dumps(body)) as resp:
                assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
                async for chunk in resp.content.iter_any():
                    if not first:
                        first = time.monotonic() - sent
                    chunks.append(chunk)
            return _events(b"".join(chunks)), first

        results = await asyncio.gather(*(stream(k) for k in range(24)))
        for events, _ in results:
            assert events[-1] == b"[DONE]"
            chunks = [orjson.loads(e) for e in events[:-1]]
            assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == " the" * 12
            assert chunks[-2]["choices"][0]["finish_reason"] == "length"
            assert chunks[-1]["usage"]["completion_tokens"] == 12

        async with s.post(url + "/v1/chat/completions",
                          json={"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}) as resp:
            out = await resp.json()
            assert out["choices"][0]["message"]["content"] == " the" * 4
            assert out["usage"]["completion_tokens"] == 4

        # bad input: the status and body vLLM's server gives; the server keeps serving
        async with s.post(url + "/v1/completions", data=b'{"prompt": ') as resp:
            assert resp.status == 400 and (await resp.json())["error"]["type"] == "Bad Request"
        async with s.post(url + "/v1/completions", json={"prompt": "p", "model": "other"}) as resp:
            assert resp.status == 404 and (await resp.json())["error"]["param"] == "model"
        async with s.post(url + "/v1/completions", json={"prompt": ["a", "b"]}) as resp:
            assert resp.status == 400

        # a disconnect storm: clients that leave mid-stream cancel their requests
        async def leave(k: int) -> None:
            body = {"prompt": f"long answer {k} " * 30, "max_tokens": 4000, "stream": True}
            async with s.post(url + "/v1/completions", json=body) as resp:
                await resp.content.readline()  # the first token's event
                resp.close()

        await asyncio.gather(*(leave(k) for k in range(30)))
        await asyncio.sleep(0.5)

        async with s.get(url + "/metrics") as resp:
            text = await resp.text()
        from prometheus_client.parser import text_string_to_metric_families

        families = {f.name: f for f in text_string_to_metric_families(text)}
        done = {x.labels["finished_reason"]: x.value for x in families["vllm:request_success"].samples
                if x.name.endswith("_total")}
        assert done["length"] == 24 + 1
        ttft = sorted(first for _, first in results)
        return {"median_client_ttft_s": ttft[len(ttft) // 2]}


def test_one_stream_and_a_clean_stop(tmp_path: Path) -> None:
    """The quick loop's twin of the test below: one streamed request, then SIGTERM."""
    server = Server(tmp_path)

    async def one() -> bytes:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s:
            body = {"prompt": "hello", "max_tokens": 3, "stream": True, "stream_options": {"include_usage": True}}
            async with s.post(server.url + "/v1/completions", json=body) as resp:
                assert resp.status == 200
                return await resp.read()

    events = _events(server.drive(one(), timeout=60))
    assert events[-1] == b"[DONE]" and orjson.loads(events[-2])["usage"]["completion_tokens"] == 3
    summary = server.summary()
    assert summary["completed_requests"] == 1 and summary["leaked_kv_blocks"] == 0
    assert summary["invariants_ok"] is True, summary["invariant_breaks"]


@pytest.mark.slow  # two servers, 55 requests each
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_serve_streams_checks_and_stops_cleanly(tmp_path: Path, engine: str) -> None:
    server = Server(tmp_path, "--engine", engine)
    server.drive(_traffic(server.url), timeout=120)
    summary = server.summary()
    assert summary["invariants_ok"] is True, summary["invariant_breaks"]
    assert summary["leaked_kv_blocks"] == 0
    assert summary["completed_requests"] == 25 and summary["canceled_requests"] == 30
    records = [json.loads(line) for line in server.records.read_text().splitlines()]
    assert len(records) == 55
    conform = subprocess.run([sys.executable, "-m", "dmocker", "conform", str(server.events)],
                             capture_output=True, text=True, timeout=120,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert conform.returncode == 0, conform.stdout + conform.stderr


@pytest.mark.slow  # requests one at a time, timed
def test_what_a_client_measures_is_what_the_cluster_records(tmp_path: Path) -> None:
    """Requests one at a time: a client's TTFT is the cluster's (its record) plus the loopback
    and scheduling delay, a few ms."""
    server = Server(tmp_path)

    async def one_by_one() -> list[float]:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s:
            seen = []
            for k in range(8):
                sent = time.monotonic()
                async with s.post(server.url + "/v1/completions",
                                  json={"prompt": f"request {k} " * 200, "max_tokens": 2, "stream": True}) as resp:
                    await resp.content.readline()
                    seen.append((time.monotonic() - sent) * 1000.0)
                    await resp.read()
            return seen

    client_ttft = server.drive(one_by_one(), timeout=60)
    records = sorted((json.loads(line) for line in server.records.read_text().splitlines()),
                     key=lambda r: r["request_id"])
    gaps = sorted(c - r["ttft_ms"] for c, r in zip(client_ttft, records))
    assert all(g > -1.0 for g in gaps), gaps  # a client never sees a token before the cluster makes it
    assert gaps[len(gaps) // 2] < 25.0, gaps  # and sees it within the loop's scheduling delay


async def _faulty_traffic(url: str) -> dict[str, int]:
    """Requests into a cluster with faults: each ends as the real server ends it."""
    seen = {"ok": 0, "error": 0, "abort": 0}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as s:
        async def one(k: int) -> None:
            body = {"prompt": f"question {k} " * 40, "max_tokens": 20, "stream": k % 2 == 0}
            async with s.post(url + "/v1/completions", json=body) as resp:
                raw = await resp.read()
            if k % 2:  # whole: a failed handoff is vLLM's 500 "Internal server error"
                if resp.status == 500:
                    assert orjson.loads(raw) == {"error": {"message": "Internal server error", "type": "InternalServerError",
                                                           "param": None, "code": 500}}
                    seen["error"] += 1
                    return
                assert resp.status == 200, raw
                reason = orjson.loads(raw)["choices"][0]["finish_reason"]
            else:  # streamed: an error event, then [DONE]
                assert resp.status == 200
                events = _events(raw)
                assert events[-1] == b"[DONE]"
                last = orjson.loads(events[-2])
                if "error" in last:
                    assert last["error"]["code"] == 500
                    seen["error"] += 1
                    return
                reason = last["choices"][0]["finish_reason"]
            seen["ok" if reason == "length" else "abort"] += 1

        await asyncio.gather(*(one(k) for k in range(40)))
        async with s.get(url + "/metrics") as resp:
            text = await resp.text()
    from prometheus_client.parser import text_string_to_metric_families

    families = {f.name: f for f in text_string_to_metric_families(text)}
    done = {x.labels["finished_reason"]: x.value for x in families["vllm:request_success"].samples
            if x.name.endswith("_total")}
    assert done["error"] == seen["error"] and done["length"] == seen["ok"]
    assert {x.labels["cause"] for x in families["dmocker_leaked_kv_blocks"].samples} == {
        "no_decode_leg", "client_disconnect", "never_released", "stranded_destination"}
    assert 0.0 <= families["vllm:kv_cache_usage_perc"].samples[0].value <= 1.0
    return seen


@pytest.mark.slow  # a server with faults, 40 requests
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_faults_apply_live_and_reach_clients_as_real_errors(tmp_path: Path, engine: str) -> None:
    server = Server(tmp_path, "--engine", engine, "--fault-fail-rate", "0.2", "--fault-cancel-rate", "0.1",
                    "--fault-timeout-rate", "0.1", "--fault-seed", "7")
    seen = server.drive(_faulty_traffic(server.url), timeout=120)
    summary = server.summary()
    injected = summary["faults_injected"]
    assert isinstance(injected, dict) and injected["fail"] and injected["timeout"]
    assert seen["error"] == summary["failed_requests"] and seen["ok"] == summary["completed_requests"]
    assert summary["leaked_kv_blocks"] == 0 and summary["invariants_ok"] is True, summary["invariant_breaks"]
    live = summary["live_check"]
    assert isinstance(live, dict) and live["violations"] == 0 and live["events_checked"] > 40 * 5


async def _stalled_traffic(url: str, n: int) -> tuple[list[int], dict[str, float]]:
    """Whole requests into a cluster whose every transfer stalls; then the worker-event counters."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as s:
        async def one(k: int) -> int:
            async with s.post(url + "/v1/completions", json={"prompt": f"q{k} " * 40, "max_tokens": 8}) as resp:
                await resp.read()
                return resp.status

        statuses = list(await asyncio.gather(*(one(k) for k in range(n))))
        async with s.get(url + "/metrics") as resp:
            text = await resp.text()
    from prometheus_client.parser import text_string_to_metric_families

    families = {f.name: f for f in text_string_to_metric_families(text)}
    counts = {x.labels["kind"]: x.value for x in families["dmocker_worker_events"].samples if x.name.endswith("_total")}
    return statuses, counts


@pytest.mark.slow  # a server whose timers fire, a few seconds of wall clock
@pytest.mark.parametrize("engine, flags, kinds", [
    ("vllm", ["--kv-abort-timeout-s", "1"], {"transfer_stalled", "source_expired"}),
    ("sglang", ["--disaggregation-waiting-timeout-s", "1"], {"transfer_stalled", "destination_timed_out"}),
])
def test_the_workers_clocks_fire_live_and_show_on_metrics(tmp_path: Path, engine: str, flags: list[str],
                                                           kinds: set[str]) -> None:
    """Every transfer stalls for 3 s and the worker's 1 s timer catches each one: the client gets
    the real server's 500, ``/metrics`` counts the events, the log (timer lines included) conforms."""
    n = 4
    server = Server(tmp_path, "--engine", engine, "--fault-stall-rate", "1", "--fault-stall-s", "3", *flags)
    statuses, counts = server.drive(_stalled_traffic(server.url, n), timeout=60)
    assert statuses == [500] * n
    assert {k for k, v in counts.items() if v} == kinds and all(counts[k] == n for k in kinds)
    summary = server.summary()
    assert summary["failed_requests"] == n and summary["leaked_kv_blocks"] == 0
    assert summary["invariants_ok"] is True, summary["invariant_breaks"]
    conform = subprocess.run([sys.executable, "-m", "dmocker", "conform", str(server.events)], capture_output=True,
                             text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert conform.returncode == 0, conform.stdout + conform.stderr


@pytest.mark.parametrize("flags, says", [
    (["--worker-crash", "decode:5@100"], "the decode pool has 2 worker(s)"),
    (["--front", "workers", "--worker-crash", "decode:0@100"], "--worker-crash: with --front workers"),
    (["--fault-fail-rate", "1.5"], "--fault-fail-rate: field 'faults.fail_rate'"),
])
def test_bad_fault_flags_exit_2_and_start_nothing(tmp_path: Path, flags: list[str], says: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from dmocker.cli.serve import main

    assert main(["--port", "0", "--out", str(tmp_path / "s.json"), *flags]) == 2
    out = capsys.readouterr()
    assert says in out.err and "listening" not in out.out
    assert not (tmp_path / "s.json").exists()
