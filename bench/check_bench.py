"""Speed of `dmocker check` on our coordinator (and optionally the mutant catalogue).

    python bench/check_bench.py [--repeat 3] [--mutants]

Prints, per order, states, transitions, seconds (best of --repeat) and states/s; the
target is both orders explored and checked in under 2 s.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from dmocker.check import check, kill_table, load_catalogue, load_target, run_mutant
from dmocker.handoff import HandoffOrder, load_spec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--mutants", action="store_true", help="also time the mutant catalogue")
    args = ap.parse_args()
    spec = load_spec()
    target = load_target(None)
    best: dict[HandoffOrder, tuple[float, int, int]] = {}
    walls: list[float] = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        report = check(target, spec=spec)
        walls.append(time.perf_counter() - t0)
        assert report.exit_code == 0, report.first_failure()
        for o in report.orders:
            if o.order not in best or o.seconds < best[o.order][0]:
                best[o.order] = (o.seconds, o.states, o.transitions)
    total = 0.0
    for order, (secs, states, transitions) in best.items():
        total += secs
        print(f"{order.value:<18} {states:>6} states {transitions:>8} transitions {secs:7.3f} s "
              f"{states / secs:>9,.0f} states/s {transitions / secs:>10,.0f} transitions/s")
    print(f"both orders: exploration {total:.3f} s (best of {args.repeat}); "
          f"whole check incl. liveness and reports {min(walls):.3f} s; target < 2 s")
    if args.mutants:
        t0 = time.perf_counter()
        catalogue = load_catalogue(Path(__file__).resolve().parents[1] / "tests" / "mutants")
        results = [run_mutant(m, spec=spec) for m in catalogue]
        print()
        print(kill_table(results), end="")
        print(f"mutant catalogue: {time.perf_counter() - t0:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
