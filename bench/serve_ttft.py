"""What a client of ``dmocker serve`` measures against what the cluster records: requests sent
one at a time to a local server, each client's time to its first streamed token minus the TTFT
of the request's record (the loop's scheduling delay plus loopback).

    python bench/serve_ttft.py [--requests 30]

Loopback only; the server stops by itself (SIGTERM when done, --stop-after-s 60 at worst).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import aiohttp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=30)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        records = os.path.join(tmp, "records.jsonl")
        env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
        server = subprocess.Popen([sys.executable, "-m", "dmocker", "serve", "--port", "0", "--stop-after-s", "60",
                                   "--per-request", records], stdout=subprocess.PIPE, text=True, env=env)
        assert server.stdout is not None
        url = server.stdout.readline().split("listening on")[1].strip()

        async def one_by_one() -> list[float]:
            seen = []
            async with aiohttp.ClientSession() as s:
                for k in range(args.requests):
                    sent = time.monotonic()
                    async with s.post(url + "/v1/completions",
                                      json={"prompt": f"request {k} " * 200, "max_tokens": 2, "stream": True}) as r:
                        await r.content.readline()
                        seen.append((time.monotonic() - sent) * 1000.0)
                        await r.read()
            return seen

        try:
            seen = asyncio.run(one_by_one())
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=60)
        with open(records, encoding="utf-8") as fh:
            recs = sorted((json.loads(line) for line in fh), key=lambda r: r["request_id"])
    gaps = sorted(c - r["ttft_ms"] for c, r in zip(seen, recs))
    n = len(gaps)
    print(f"client TTFT - recorded TTFT over {n} requests (ms): min {gaps[0]:.2f} median {gaps[n // 2]:.2f} "
          f"p90 {gaps[int(n * 0.9)]:.2f} max {gaps[-1]:.2f}; recorded TTFT {recs[0]['ttft_ms']:.1f} ms")


if __name__ == "__main__":
    main()
