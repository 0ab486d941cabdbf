"""Cost of the fault machinery: the same replay with no plan, an all-zero plan, and faults on.

With no plan (or an all-zero one) the replay runs exactly the code it ran before faults existed
(no driver, no step counting, no event-log re-validation), so the first two columns must agree
within noise; the third shows what seeded faults, a crash and the end-of-run log check cost.

    python bench/fault_bench.py                 # 2000 requests, vLLM and SGLang, best of 3 (CPU s)
    python bench/fault_bench.py --requests 10000 --repeat 5
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from dmocker.replay import ReplayConfig, run  # noqa: E402
from dmocker.replay.faults import FaultPlan, Pool, WorkerCrash  # noqa: E402


def _best(repeat: int, **kw: object) -> float:
    best = float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeat):
            t0 = time.process_time()
            run(ReplayConfig.from_values({
                "per_request": os.path.join(tmp, "r.jsonl"), "events": os.path.join(tmp, "e.jsonl"), **kw,
            }))
            best = min(best, time.process_time() - t0)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    faulty = FaultPlan(cancel_rate=0.03, fail_rate=0.03, timeout_rate=0.03, seed=1,
                       crashes=(WorkerCrash(Pool.DECODE, 1, 5000.0),), restart_s=2.0)
    print(f"{'engine':8} {'no plan':>9} {'zero plan':>10} {'faults on':>10}   (best CPU s of {a.repeat}, "
          f"{a.requests} requests, --per-request and --events written)")
    for engine, extra in (("vllm", {}), ("sglang", {"block_size": 64})):
        kw: dict[str, object] = dict(synthetic=a.requests, engine=engine, **extra)
        cols = [_best(a.repeat, **kw), _best(a.repeat, faults=FaultPlan(), **kw), _best(a.repeat, faults=faulty, **kw)]
        print(f"{engine:8} {cols[0]:9.3f} {cols[1]:10.3f} {cols[2]:10.3f}")


if __name__ == "__main__":
    main()
