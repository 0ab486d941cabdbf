"""Speed of `dmocker conform` on a 1M-event log (target: >= 100k events/s, standard json).

Generates a seeded, legal, interleaved log of both orders (engine field on every line) into a
temporary file, then validates it through the same streaming path as the CLI and prints the
events per second, the peak RSS and the verdict counts.

    python bench/conform_bench.py [--events 1000000] [--open 1000] [--keep FILE]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time

from dmocker._atomic import AtomicFile
from dmocker.conformance.generate import interleaved_log
from dmocker.conformance.stream import check_native
from dmocker.conformance.validator import Validator


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--open", type=int, default=1000, help="handoffs in flight at a time")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", metavar="FILE", help="write the log here and keep it")
    args = parser.parse_args()
    path = args.keep or os.path.join(tempfile.mkdtemp(prefix="conform-bench-"), "events.jsonl")
    t0 = time.perf_counter()
    with AtomicFile(path) as handle:
        for line in interleaved_log(args.events, seed=args.seed, open_handoffs=args.open):
            handle.write(line + "\n")
    gen_s = time.perf_counter() - t0
    size = os.path.getsize(path)
    validator = Validator(None)
    t0 = time.perf_counter()
    c0 = time.process_time()
    with open(path, encoding="utf-8") as handle:
        check_native(handle, validator, keep_going=False)
    result = validator.result()
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"log: {result.events} events, {result.handoffs} handoffs, {size / 1e6:.1f} MB (generated in {gen_s:.1f} s)")
    print(f"validate: {wall:.2f} s wall  ->  {result.events / wall:,.0f} events/s   peak RSS {rss_mb:.0f} MB")
    # On a shared machine the wall rate depends on the neighbours; CPU time does not.
    print(f"          {cpu:.2f} s CPU   ->  {result.events / cpu:,.0f} events/s of CPU")
    print(f"verdicts: {result.verdicts}  exit {result.exit_code}")
    if not args.keep:
        os.unlink(path)
        os.rmdir(os.path.dirname(path))
    return 0 if result.exit_code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
