"""The aggregated baseline against the reference: Dynamo 1.6.1's aggregated replay of the probe
traces (``tests/engines/data/``), round robin and KV-routed, side by side with dmocker's.

    python bench/agg_fidelity.py --reference /path/to/venv-with-ai-dynamo-1.6.1/bin/python
    python bench/agg_fidelity.py --reference REF --write tests/engines/data/reference_dynamo_1.6.1_agg.json

The reference runs ``dynamo.replay.run_trace_replay(trace, extra_engine_args=..., num_workers=4)``
(no prefill/decode engine args: the aggregated mode).  ``--write`` stores its round-robin
summaries as the golden numbers ``tests/engines/test_agg_fidelity.py`` checks.  KV-routed runs
are printed, not stored: the reference breaks cost ties with an unseeded generator, so its own
reruns differ (dmocker's seeded ones do not).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "engines", "data")
TRACES = ("diff", "fast", "half", "pairs", "same", "unalhalf", "mooncake300")
ENGINES = ("vllm", "sglang")
WORKERS = 4
FIELDS = ("completed_requests", "total_output_tokens", "mean_ttft_ms", "p99_ttft_ms", "mean_itl_ms",
          "mean_e2e_latency_ms", "duration_ms", "prefix_cache_reused_ratio")

_REFERENCE = """
import json, os, sys
os.environ.setdefault("DYN_LOG", "error")
from dynamo.replay import run_trace_replay
trace, engine, workers, router = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
report = run_trace_replay(trace, extra_engine_args={"engine": {"backend": engine, "block_size": 64}},
                          num_workers=workers, router_mode=router)
summary = report if isinstance(report, dict) else report.summary
print(json.dumps({k: summary[k] for k in %r}))
""" % (FIELDS,)


def reference(python: str, trace: str, engine: str, router: str) -> dict[str, float]:
    out = subprocess.run([python, "-c", _REFERENCE, trace, engine, str(WORKERS), router],
                         check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def ours(trace: str, engine: str, router: str) -> dict[str, float]:
    sys.path.insert(0, ROOT)
    from dmocker.replay import ReplayConfig, run

    summary = run(ReplayConfig.from_values({
        "trace": trace, "engine": engine, "block_size": 64, "mode": "agg", "workers": WORKERS,
        "router": "kv" if router == "kv_router" else "round-robin",
    })).summary
    return {k: float(summary[k]) for k in FIELDS}  # type: ignore[arg-type]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reference", required=True, metavar="PYTHON", help="python of a venv with ai-dynamo 1.6.1")
    p.add_argument("--write", metavar="JSON", help="store the round-robin reference summaries here")
    args = p.parse_args()
    golden: dict[str, dict[str, float]] = {}
    print(f"{'case':32s} {'field':28s} {'reference':>18s} {'dmocker':>18s} {'rel':>9s}")
    for router in ("round_robin", "kv_router"):
        for engine in ENGINES:
            for name in TRACES:
                trace = os.path.join(DATA, f"{name}.jsonl")
                ref = reference(args.reference, trace, engine, router)
                mine = ours(trace, engine, router)
                key = f"{engine}/{name}" + ("" if router == "round_robin" else "/kv")
                if router == "round_robin":
                    golden[key] = ref
                for f in FIELDS:
                    a, b = ref[f], mine[f]
                    rel = abs(a - b) / abs(a) if a else abs(b)
                    print(f"{key:32s} {f:28s} {a:18.6f} {b:18.6f} {rel:9.2e}")
    if args.write:
        from dmocker._atomic import write_atomic

        write_atomic(args.write, json.dumps(golden, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
