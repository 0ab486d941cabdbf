"""KV-router fidelity: dmocker's ``--router kv`` against the reference's ``kv_router`` replay.

    python bench/router_fidelity.py --reference REFVENV/bin/python \
        --trace conversation_trace.jsonl [--requests 3000] [--runs 3] \
        [--engines vllm,sglang] [--clusters 2x2,4x2] [--bandwidths 0,10]

For every case (engine x cluster size x transfer delay) it replays the same trace once with
dmocker (seeded: deterministic) and ``--runs`` times with the reference (random tie-breaks: its
results vary run to run), then prints mean/p99 TTFT, mean ITL, mean E2E, output throughput and
``prefix_cache_reused_ratio`` with the reference's mean and min..max and dmocker's deviation
from the mean.  ``ok`` = within 5% of the reference's mean or inside its [min, max] range
widened by 5%.  SGLang runs with block size 64 (its default block 1 makes the pools tiny).
With ``--bandwidths`` a value > 0 adds a KV transfer delay (GB/s, 131072 bytes per token).
``--synthetic N`` replays replay_bench.py's seeded synthetic workload (as a Mooncake trace) instead.
Each replay runs in a fresh subprocess; the reference is imported only in its own child.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
METRICS = (
    "mean_ttft_ms",
    "p99_ttft_ms",
    "mean_itl_ms",
    "mean_e2e_latency_ms",
    "output_throughput_tok_s",
    "prefix_cache_reused_ratio",
)
BYTES_PER_TOKEN = 131072


def _case_engine(case: dict[str, object]) -> dict[str, object]:
    eng: dict[str, object] = {"backend": case["engine"]}
    if case["engine"] == "sglang":
        eng["block_size"] = 64
    bw = float(case["bandwidth"])  # type: ignore[arg-type]
    if bw > 0:
        eng["kv_transfer_bandwidth"] = bw
        eng["kv_bytes_per_token"] = BYTES_PER_TOKEN
    return eng


def child_reference(case: dict[str, object]) -> None:
    os.environ.setdefault("DYN_LOG", "error")
    from dynamo._core import KvRouterConfig  # type: ignore[import-not-found]
    from dynamo.replay import run_trace_replay  # type: ignore[import-not-found]

    eng = _case_engine(case)
    out = []
    for _ in range(int(case["runs"])):  # type: ignore[call-overload]
        t0 = time.perf_counter()
        report = run_trace_replay(
            case["trace"],
            prefill_engine_args={"engine": {**eng, "worker_type": "prefill"}},
            decode_engine_args={"engine": {**eng, "worker_type": "decode"}},
            num_prefill_workers=case["prefill"],
            num_decode_workers=case["decode"],
            router_mode="kv_router",
            router_config=KvRouterConfig(),
        )
        wall = time.perf_counter() - t0
        summary = report if isinstance(report, dict) else report.summary
        out.append({"wall_s": wall, "summary": {k: summary.get(k) for k in METRICS}})
    print(json.dumps(out))


def child_dmocker(case: dict[str, object]) -> None:
    sys.path.insert(0, ROOT)
    from dmocker.replay import ReplayConfig, run

    eng = _case_engine(case)
    t0 = time.perf_counter()
    report = run(ReplayConfig.from_values({
        "trace": case["trace"], "engine": str(eng["backend"]), "block_size": eng.get("block_size"),
        "kv_transfer_bandwidth": eng.get("kv_transfer_bandwidth"),
        "kv_bytes_per_token": eng.get("kv_bytes_per_token"), "prefill_workers": int(case["prefill"]),
        "decode_workers": int(case["decode"]), "router": "kv", "seed": int(case.get("seed", 0)),
    }))
    wall = time.perf_counter() - t0
    print(json.dumps([{"wall_s": wall, "summary": {k: report.summary.get(k) for k in METRICS}}]))


def _run(python: str, role: str, case: dict[str, object]) -> list[dict[str, object]]:
    env = {**os.environ, "DYN_LOG": "error"}
    if role == "dmocker":
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    res = subprocess.run([python, os.path.abspath(__file__), "--child", role, "--case", json.dumps(case)],
                         capture_output=True, text=True, env=env, check=False)
    if res.returncode != 0:
        raise SystemExit(f"{role} run failed:\n{res.stderr[-4000:]}")
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("[")][-1]
    out: list[dict[str, object]] = json.loads(line)
    return out


def _head(src: str, n: int | None, dst: str) -> str:
    if n is None:
        return src
    with open(src) as fi, open(dst, "w") as fo:
        for i, line in enumerate(fi):
            if i >= n:
                break
            fo.write(line)
    return dst


def _synthetic_trace(n: int, seed: int, path: str) -> str:
    sys.path.insert(0, ROOT)
    sys.path.insert(0, HERE)
    import replay_bench  # its synthetic workload, written as a Mooncake trace

    ns = argparse.Namespace(requests=n, seed=seed, prefix_ratio=0.5)
    replay_bench.write_trace(ns, path)
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reference", metavar="PYTHON", help="python of a venv with ai-dynamo 1.6.1")
    p.add_argument("--trace", help="Mooncake JSONL trace")
    p.add_argument("--synthetic", type=int, metavar="N", help="replay N requests of the seeded synthetic workload")
    p.add_argument("--requests", type=int, help="replay only the first N lines of the trace")
    p.add_argument("--runs", type=int, default=3, help="reference runs per case (default 3)")
    p.add_argument("--engines", default="vllm,sglang")
    p.add_argument("--clusters", default="2x2,4x2", help="PREFILLxDECODE list (default 2x2,4x2)")
    p.add_argument("--bandwidths", default="0,10", help="KV transfer GB/s list, 0 = no delay (default 0,10)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--child", choices=["dmocker", "reference"], help=argparse.SUPPRESS)
    p.add_argument("--case", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        case = json.loads(args.case)
        (child_dmocker if args.child == "dmocker" else child_reference)(case)
        return
    if args.reference is None or (args.trace is None) == (args.synthetic is None):
        p.error("give --reference and exactly one of --trace / --synthetic")
    tmp = tempfile.mkdtemp()
    if args.synthetic is not None:
        trace = _synthetic_trace(args.synthetic, args.seed, os.path.join(tmp, "synthetic.jsonl"))
        label = f"synthetic {args.synthetic} requests (seed {args.seed})"
    else:
        trace = _head(args.trace, args.requests, os.path.join(tmp, "head.jsonl"))
        label = f"{args.trace}" + (f" (first {args.requests} lines)" if args.requests else "")
    worst = 0.0
    failures = 0
    ours_wall = ref_wall = 0.0
    print(f"KV router fidelity on {label}; reference runs per case: {args.runs}")
    for engine in args.engines.split(","):
        for cluster in args.clusters.split(","):
            n_p, n_d = (int(x) for x in cluster.split("x"))
            for bw in (float(b) for b in args.bandwidths.split(",")):
                case: dict[str, object] = {"engine": engine, "prefill": n_p, "decode": n_d, "bandwidth": bw,
                                           "trace": trace, "runs": args.runs, "seed": args.seed}
                ours = _run(sys.executable, "dmocker", case)[0]
                refs = _run(args.reference, "reference", case)
                ours_wall += float(ours["wall_s"])  # type: ignore[arg-type]
                ref_wall += sum(float(r["wall_s"]) for r in refs) / len(refs)  # type: ignore[arg-type]
                head = (f"{engine}{' block 64' if engine == 'sglang' else ''} {n_p}P+{n_d}D, "
                        f"{'no transfer delay' if bw <= 0 else f'{bw:g} GB/s transfer'}")
                print(f"\n{head}")
                print(f"  {'metric':27} {'dmocker':>11} {'ref mean':>11} {'ref min..max':>23} {'diff':>8}")
                for key in METRICS:
                    a = float(ours["summary"][key])  # type: ignore[index]
                    vals = [float(r["summary"][key]) for r in refs]  # type: ignore[index]
                    mean = sum(vals) / len(vals)
                    lo, hi = min(vals), max(vals)
                    diff = (a - mean) / mean * 100 if mean else 0.0
                    ok = abs(diff) <= 5.0 or (lo * 0.95 <= a <= hi * 1.05)
                    worst = max(worst, abs(diff))
                    failures += 0 if ok else 1
                    print(f"  {key:27} {a:11.3f} {mean:11.3f} {lo:11.3f}..{hi:<11.3f} {diff:7.2f}%"
                          f"{'' if ok else '  OUT'}")
    print(f"\nlargest deviation from the reference mean: {worst:.2f}%; metrics outside 5%/range: {failures}")
    print(f"wall: dmocker {ours_wall:.1f} s, reference (mean run) {ref_wall:.1f} s, "
          f"speed ratio {ref_wall / ours_wall:.2f}x")


if __name__ == "__main__":
    main()
