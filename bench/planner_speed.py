"""Replay speed with a planner in the loop vs the same replay without one.

The planner ticks every 5 s of simulated time and changes nothing (so both runs simulate the
very same cluster and requests); a second variant runs the built-in ``load`` policy (5 s
interval, scales).  Each run is a fresh subprocess; the number reported is its CPU time
(user + system), which a machine shared with other jobs disturbs far less than wall time.

    python bench/planner_speed.py                          # Mooncake conversation trace
                                                           # (in $DMOCKER_MOONCAKE_TRACES)
    python bench/planner_speed.py --synthetic 20000        # seeded synthetic workload
    python bench/planner_speed.py --repeat 3               # best of 3 per variant
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# The Mooncake conversation trace, in the folder DMOCKER_MOONCAKE_TRACES names (default ./traces).
TRACE = os.path.join(os.environ.get("DMOCKER_MOONCAKE_TRACES", "traces"), "conversation_trace.jsonl")


class Every5s:
    """Ticks every 5 s of simulated time; never scales."""

    def initial_tick_ms(self) -> float:
        return 5000.0

    def on_tick(self, metrics: object) -> object:
        from dmocker.replay import ScalingDecision

        return ScalingDecision(next_tick_ms=metrics.now_ms + 5000.0)  # type: ignore[attr-defined]


def child(args: argparse.Namespace) -> None:
    sys.path.insert(0, ROOT)
    from dmocker.replay import ReplayConfig, run

    planner: object | None = {"none": None, "noop5s": Every5s(), "load": "load"}[args.variant]
    kw: dict[str, object] = {"engine": args.engine, "planner": planner}
    if args.synthetic:
        kw.update(synthetic=args.synthetic, rate=60.0, isl_mean=2000, osl_mean=200, spread=0.5, prefix_groups=8)
    else:
        kw["trace"] = args.trace
    t0 = os.times()
    rep = run(ReplayConfig.from_values(kw))
    t1 = os.times()
    cpu = (t1.user - t0.user) + (t1.system - t0.system)
    ticks = rep.planner["ticks"] if rep.planner is not None else 0
    print(json.dumps({"cpu_s": cpu, "ticks": ticks, "completed": rep.summary["completed_requests"],
                      "p99_ttft_ms": rep.summary["p99_ttft_ms"]}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default=TRACE)
    ap.add_argument("--synthetic", type=int, default=0)
    ap.add_argument("--engine", default="vllm")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.variant:
        child(args)
        return
    results: dict[str, dict[str, object]] = {}
    for _ in range(args.repeat):
        for variant in ("none", "noop5s", "load"):
            cmd = [sys.executable, os.path.abspath(__file__), "--variant", variant, "--engine", args.engine,
                   "--trace", args.trace, "--synthetic", str(args.synthetic)]
            out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            best = results.get(variant)
            if best is None or out["cpu_s"] < best["cpu_s"]:  # type: ignore[operator]
                results[variant] = out
    base = float(results["none"]["cpu_s"])  # type: ignore[arg-type]
    workload = f"synthetic {args.synthetic}" if args.synthetic else os.path.basename(args.trace)
    print(f"workload: {workload}, engine {args.engine}, "
          f"best of {args.repeat}")
    print(f"{'variant':<28}{'cpu s':>9}{'ratio':>8}{'ticks':>8}{'completed':>11}")
    for variant, label in (("none", "no planner"), ("noop5s", "planner, tick every 5 s"),
                           ("load", "load policy (5 s)")):
        r = results[variant]
        cpu = float(r["cpu_s"])  # type: ignore[arg-type]
        print(f"{label:<28}{cpu:>9.2f}{cpu / base:>8.3f}{r['ticks']:>8}{r['completed']:>11}")


if __name__ == "__main__":
    main()
