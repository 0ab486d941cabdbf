"""Worked example: the ``throughput`` planner vs the smallest static cluster meeting its TTFT target.

On the Mooncake conversation trace (vLLM mock, round robin), it runs

1. the built-in ``throughput`` policy (reference defaults: 180 s adjustment interval, GPU
   budget 8, min_endpoint 1) with ``--sla-ttft-ms TARGET``, starting from 2 prefill + 2 decode
   workers, new workers ready after ``--startup-time-s`` (default 30 s);
2. static clusters in order of GPU count (then prefill-heavier first) until one meets the
   same target, judged as the policy judges itself: mean TTFT <= target;

and prints GPU-hours, mean and p99 TTFT side by side.  Each replay runs in its own process
(two at a time).

    python bench/planner_example.py                       # TARGET 1000 ms; the trace is
                                                          # $DMOCKER_MOONCAKE_TRACES/conversation_trace.jsonl
    python bench/planner_example.py --sla-ttft-ms 800 --startup-time-s 60
"""

from __future__ import annotations

import argparse
import os
import sys
from concurrent.futures import ProcessPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# The Mooncake conversation trace, in the folder DMOCKER_MOONCAKE_TRACES names (default ./traces).
TRACE = os.path.join(os.environ.get("DMOCKER_MOONCAKE_TRACES", "traces"), "conversation_trace.jsonl")
KEYS = ("gpu_hours", "mean_ttft_ms", "p99_ttft_ms", "completed_requests", "prefill_worker_seconds",
        "decode_worker_seconds")


def replay(trace: str, p: int, d: int, planner: str | None, target: float, startup: float) -> dict[str, object]:
    sys.path.insert(0, ROOT)
    from dmocker.replay import ReplayConfig, run

    rep = run(ReplayConfig.from_values({
        "trace": trace, "prefill_workers": p, "decode_workers": d, "planner": planner, "sla_ttft_ms": target,
        "startup_time_s": startup if planner else 0.0,
    }))
    out: dict[str, object] = {k: rep.summary[k] for k in KEYS}
    if rep.planner is not None:
        pw, dw = rep.planner["prefill_workers"], rep.planner["decode_workers"]
        assert isinstance(pw, list) and isinstance(dw, list)
        out["workers_used"] = f"{len(pw)}P/{len(dw)}D"
        counts = rep.planner["prefill_counts"]
        assert isinstance(counts, list)
        out["max_prefill"] = max(c["active"] + c["starting"] + c["draining"] for c in counts)  # type: ignore[index, operator]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default=TRACE)
    ap.add_argument("--sla-ttft-ms", type=float, default=1000.0)
    ap.add_argument("--startup-time-s", type=float, default=30.0)
    ap.add_argument("--max-gpus", type=int, default=8)
    args = ap.parse_args()
    target = args.sla_ttft_ms
    rows: list[tuple[str, dict[str, object]]] = []
    with ProcessPoolExecutor(max_workers=2) as pool:
        planned = pool.submit(replay, args.trace, 2, 2, "throughput", target, args.startup_time_s)
        static: tuple[str, dict[str, object]] | None = None
        for n in range(2, args.max_gpus + 1):
            shapes = [(p, n - p) for p in range(n - 1, 0, -1)]
            futures = [(f"static {p}P+{d}D", pool.submit(replay, args.trace, p, d, None, target, 0.0))
                       for p, d in shapes]
            results = [(label, f.result()) for label, f in futures]
            rows.extend(results)
            ok = [r for r in results if float(r[1]["mean_ttft_ms"]) <= target]  # type: ignore[arg-type]
            if ok:
                static = ok[0]
                break
        tp = planned.result()
    print(f"trace: {os.path.basename(args.trace)}; TTFT target {target:g} ms (mean); throughput planner from 2P+2D, "
          f"startup {args.startup_time_s:g} s")
    print(f"{'cluster':<28}{'GPU-h':>8}{'mean TTFT':>11}{'p99 TTFT':>11}{'done':>7}")
    for label, r in [*rows, ("throughput planner", tp)]:
        mark = "  <- smallest static meeting the target" if static is not None and label == static[0] else ""
        print(f"{label:<28}{float(r['gpu_hours']):>8.3f}{float(r['mean_ttft_ms']):>11.1f}"  # type: ignore[arg-type]
              f"{float(r['p99_ttft_ms']):>11.1f}{r['completed_requests']:>7}{mark}")  # type: ignore[arg-type]
    if static is None:
        print(f"no static cluster up to {args.max_gpus} GPUs meets the target")
    else:
        s = static[1]
        print(f"\nthroughput planner: {float(tp['gpu_hours']):.3f} GPU-h, p99 TTFT {float(tp['p99_ttft_ms']):.1f} ms"  # type: ignore[arg-type]
              f" (peak {tp['max_prefill']} prefill workers)")
        print(f"{static[0]}: {float(s['gpu_hours']):.3f} GPU-h, p99 TTFT {float(s['p99_ttft_ms']):.1f} ms")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
