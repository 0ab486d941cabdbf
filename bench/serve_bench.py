"""How much live traffic ``dmocker serve`` holds on this machine: a 2 prefill + 2 decode vLLM
cluster behind dmocker's front, the event log on, driven by closed-loop streaming clients.

For each ``--speedup-ratio`` and each concurrency C, a fresh server runs for ``--seconds``
while C clients each send streamed completions one after another (a ~200-token prompt,
``--max-tokens`` tokens).  Reported per level:

* streamed tokens per second (what the clients received) and requests completed;
* errors (bad status, streams cut short);
* the server's CPU per streamed token (user + system of its process, ``/proc/<pid>/stat``);
* lateness: for each request, the time a client saw its first token minus the time the
  cluster's record says it was made (arrival-relative TTFT), median and p90 -- how far behind
  its own clock the server runs.  A level is *held* when nothing failed and the lateness
  stays under 20 ms at the median and 50 ms at p90 (every stream at pace, not most).

Loopback only; every server stops by itself (SIGTERM after each level, ``--stop-after-s`` at
worst).  Run:

    python bench/serve_bench.py                        # speedup 1 and 10; C = 16 64 256 512
    python bench/serve_bench.py --speedups 10 --levels 64 1024 --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import aiohttp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def drive(url: str, clients: int, seconds: float, max_tokens: int) -> tuple[int, int, int, list[float]]:
    """(tokens, completed, errors, first-token times seen, by request order) of closed-loop clients."""
    tokens = completed = errors = 0
    firsts: list[float] = []
    stop_at = time.monotonic() + seconds
    timeout = aiohttp.ClientTimeout(total=seconds + 60)
    async with aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0)) as s:
        async def client(k: int) -> None:
            nonlocal tokens, completed, errors
            n = 0
            while time.monotonic() < stop_at:
                body = {"prompt": f"client {k} turn {n} " + "context " * 180, "max_tokens": max_tokens,
                        "stream": True}
                n += 1
                try:
                    async with s.post(url + "/v1/completions", json=body) as resp:
                        if resp.status != 200:
                            errors += 1
                            continue
                        got = 0
                        async for line in resp.content:
                            if line.startswith(b"data: {"):
                                if got == 0:
                                    firsts.append(time.monotonic())
                                got += 1
                        tokens += got
                        if got == max_tokens:
                            completed += 1
                        else:
                            errors += 1
                except aiohttp.ClientError:
                    errors += 1

        await asyncio.gather(*(client(k) for k in range(clients)))
    return tokens, completed, errors, firsts


def level(speedup: float, clients: int, seconds: float, max_tokens: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        records, events = os.path.join(tmp, "records.jsonl"), os.path.join(tmp, "events.jsonl")
        env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
        server = subprocess.Popen(
            [sys.executable, "-m", "dmocker", "serve", "--port", "0", "--speedup-ratio", str(speedup),
             "--stop-after-s", str(seconds + 120), "--per-request", records, "--events", events],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        assert server.stdout is not None
        url = server.stdout.readline().split("listening on")[1].strip()
        cpu0, t0 = cpu_seconds(server.pid), time.monotonic()
        tokens, completed, errors, _ = asyncio.run(drive(url, clients, seconds, max_tokens))
        wall = time.monotonic() - t0
        cpu = cpu_seconds(server.pid) - cpu0
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)
        with open(records, encoding="utf-8") as fh:
            recs = [json.loads(line) for line in fh]
    # lateness: the records' first-token times are cluster ms from the server's start; the
    # clients' are wall times: align on the earliest of each (the first request's token is
    # seen within a few ms of its making when the server is idle)
    done = [r for r in recs if r["first_token_ms"] is not None]
    return {"speedup": speedup, "clients": clients, "tokens_per_s": tokens / wall, "completed": completed,
            "errors": errors, "cpu_us_per_token": 1e6 * cpu / max(tokens, 1),
            "records": len(done), "mean_itl_ms": statistics.fmean(r["itl_ms"] for r in done if r["itl_ms"])
            if done else 0.0}


def lateness(url_speedup: float, clients: int, seconds: float, max_tokens: int) -> tuple[float, float]:
    """Median and p90 of (client's first token - recorded first token) over requests sent one
    at a time beside ``clients`` closed-loop clients (ms)."""
    with tempfile.TemporaryDirectory() as tmp:
        records = os.path.join(tmp, "records.jsonl")
        env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
        server = subprocess.Popen(
            [sys.executable, "-m", "dmocker", "serve", "--port", "0", "--speedup-ratio", str(url_speedup),
             "--stop-after-s", str(seconds + 120), "--per-request", records, "--events", os.path.join(tmp, "e")],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        assert server.stdout is not None
        url = server.stdout.readline().split("listening on")[1].strip()

        async def probe() -> list[tuple[str, float, float]]:
            seen: list[tuple[str, float, float]] = []
            load = asyncio.ensure_future(drive(url, clients, seconds, max_tokens))
            async with aiohttp.ClientSession() as s:
                await asyncio.sleep(seconds / 4)
                for k in range(20):
                    prompt = f"probe {k} " + "x " * 50
                    sent = time.monotonic()
                    async with s.post(url + "/v1/completions", json={"prompt": prompt, "max_tokens": 2,
                                                                    "stream": True}) as r:
                        await r.content.readline()
                        seen.append((prompt, sent, time.monotonic()))
                        await r.read()
                    await asyncio.sleep(seconds / 60)
            await load
            return seen

        seen = asyncio.run(probe())
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)
        with open(records, encoding="utf-8") as fh:
            recs = [json.loads(line) for line in fh]
    probes = sorted((r for r in recs if r["input_length"] < 40 and r["requested_output_length"] == 2),
                    key=lambda r: r["arrival_time_ms"])
    gaps = sorted((got - sent) * 1000.0 - r["ttft_ms"] for (_, sent, got), r in zip(seen, probes) if r["ttft_ms"])
    if not gaps:
        return float("nan"), float("nan")
    return statistics.median(gaps), gaps[int(0.9 * (len(gaps) - 1))]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--speedups", type=float, nargs="+", default=[1.0, 10.0])
    p.add_argument("--levels", type=int, nargs="+", default=[16, 64, 256, 512])
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--max-tokens", type=int, default=64)
    args = p.parse_args()
    print("| speedup | streams | tokens/s | completed | errors | server CPU per token | lateness median / p90 | held |")
    print("|---|---|---|---|---|---|---|---|")
    for speedup in args.speedups:
        for clients in args.levels:
            r = level(speedup, clients, args.seconds, args.max_tokens)
            med, p90 = lateness(speedup, clients, args.seconds, args.max_tokens)
            held = r["errors"] == 0 and med < 20.0 and p90 < 50.0
            print(f"| {speedup:g} | {clients} | {r['tokens_per_s']:,.0f} | {r['completed']:.0f} | {r['errors']:.0f} | "
                  f"{r['cpu_us_per_token']:.0f} µs | {med:.1f} / {p90:.1f} ms | {'yes' if held else 'no'} |",
                  flush=True)


if __name__ == "__main__":
    main()
