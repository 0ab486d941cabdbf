"""Sweep speed: 16 configurations of the 10k synthetic workload, one after another vs. in parallel.

Workload: 10k requests, ISL uniform 1000-3000, OSL uniform 100-300, Poisson 60 req/s, 8 prefix
groups (the replay bench's workload, 10k requests); vLLM; prefill 2..5 x decode 2..5 workers.

    python bench/sweep_bench.py                 # --jobs 1 vs --jobs 2 (the local process pool)
    python bench/sweep_bench.py --ray           # also --backend ray (a local Ray cluster)
    python bench/sweep_bench.py --requests 2000 # quicker

Each sweep runs as ``dmocker sweep`` in a fresh subprocess; the script prints wall and CPU
seconds of each, the parallel/serial wall-time ratio, and checks that every ``sweep.json`` is
byte-identical.  On a machine shared with other work the ratio measures what it got, not what
the pool can do: the CPU column shows the work done.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _sweep_args(requests: int) -> list[str]:
    return [
        "--synthetic", str(requests), "--rate", "60", "--isl-mean", "2000", "--osl-mean", "200",
        "--spread", "0.5", "--prefix-groups", "8", "--engine", "vllm",
        "--prefill-workers", "2..5", "--decode-workers", "2..5", "--sla-ttft-ms", "2000", "--quiet",
    ]


def _run(label: str, args: list[str], out: str) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dmocker", "sweep", *args, "--out", out], check=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(f"{label:<28} wall {wall:8.1f} s   cpu {cpu:8.1f} s", flush=True)
    return wall, cpu


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=10_000)
    p.add_argument("--ray", action="store_true", help="also time --backend ray (needs dmocker[ray])")
    args = p.parse_args()
    base = _sweep_args(args.requests)
    print(f"dmocker sweep: 16 configurations x {args.requests} requests, {os.cpu_count()} cores", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        outs = {}
        serial_wall, _ = _run("one after another (--jobs 1)", [*base, "--jobs", "1"], outs.setdefault("j1", f"{tmp}/j1.json"))
        pool_wall, _ = _run("process pool (--jobs 2)", [*base, "--jobs", "2"], outs.setdefault("j2", f"{tmp}/j2.json"))
        if args.ray:
            # Ray's worker processes are not children of this script: its CPU column is the driver's.
            _run("ray (--backend ray --jobs 2)", [*base, "--backend", "ray", "--jobs", "2"], outs.setdefault("ray", f"{tmp}/ray.json"))
        data = {k: open(v, "rb").read() for k, v in outs.items()}
        same = len(set(data.values())) == 1
        print(f"parallel / serial wall time: {pool_wall / serial_wall:.2f}x  (goal < 0.6x)")
        print(f"sweep.json byte-identical across runs: {same}")
        return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
