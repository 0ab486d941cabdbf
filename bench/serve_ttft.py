"""What a client of ``dmocker serve`` measures against what the cluster records: requests sent
one at a time to a local server, each client's time to its first streamed token minus the TTFT
of the request's record, and its mean gap between tokens minus the record's ITL (the loop's
scheduling delay plus loopback).  The records are the replay's for the same arrivals
(tests/replay/test_live.py), so these are the client's distances from the replay's prediction.

    python bench/serve_ttft.py [--requests 30] [--max-tokens 16]

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
    p.add_argument("--max-tokens", type=int, default=16)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        records = os.path.join(tmp, "records.jsonl")
        env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
        server = subprocess.Popen([sys.executable, "-m", "dmocker", "serve", "--port", "0", "--stop-after-s", "60",
                                   "--per-request", records], stdout=subprocess.PIPE, text=True, env=env)
        assert server.stdout is not None
        url = server.stdout.readline().split("listening on")[1].strip()

        async def one_by_one() -> list[tuple[float, float]]:
            seen = []
            async with aiohttp.ClientSession() as s:
                for k in range(args.requests):
                    sent = time.monotonic()
                    times = []
                    body = {"prompt": f"request {k} " * 200, "max_tokens": args.max_tokens, "stream": True}
                    async with s.post(url + "/v1/completions", json=body) as r:
                        async for line in r.content:
                            if line.startswith(b"data: {") and b'"text"' in line:
                                times.append((time.monotonic() - sent) * 1000.0)
                    itl = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else 0.0
                    seen.append((times[0], itl))
            return seen

        try:
            seen = asyncio.run(one_by_one())
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=60)
        with open(records, encoding="utf-8") as fh:
            recs = sorted((json.loads(line) for line in fh), key=lambda r: r["request_id"])
    gaps = sorted(c[0] - r["ttft_ms"] for c, r in zip(seen, recs))
    n = len(gaps)
    print(f"client TTFT - recorded TTFT over {n} requests (ms): min {gaps[0]:.2f} median {gaps[n // 2]:.2f} "
          f"p90 {gaps[int(n * 0.9)]:.2f} max {gaps[-1]:.2f}; recorded TTFT {recs[0]['ttft_ms']:.1f} ms")
    if args.max_tokens > 1:
        itl = sorted(c[1] - r["itl_ms"] for c, r in zip(seen, recs))
        print(f"client ITL - recorded ITL (ms): min {itl[0]:.3f} median {itl[n // 2]:.3f} p90 {itl[int(n * 0.9)]:.3f} "
              f"max {itl[-1]:.3f}; recorded ITL {recs[0]['itl_ms']:.2f} ms")


if __name__ == "__main__":
    main()
