"""Replay speed and memory on a seeded synthetic workload (and an optional fidelity check).

Default workload: 100k requests, ISL uniform 1000-3000, OSL uniform 100-300, Poisson 60 req/s,
8 prefix groups sharing half their blocks, trace_block_size 512, vLLM 2 prefill + 2 decode,
round robin.

    python bench/replay_bench.py                      # dmocker: wall s, req/s, peak RSS
    python bench/replay_bench.py --requests 10000
    python bench/replay_bench.py --reference REFVENV/bin/python --requests 10000
        # also runs Dynamo's mocker (installed ONLY in that separate venv) on the very same
        # requests, written as a Mooncake trace, and prints the fidelity table and the speed
        # ratio.  Like for like: the reference runs with per-request capture
        # (capture_per_request=True), and dmocker writes its per-request records (--records).
        # REFVENV is a venv of its own: python3 -m venv REFVENV &&
        # REFVENV/bin/pip install ai-dynamo==1.6.1 ai-dynamo-runtime==1.6.1

Each measurement runs in a fresh subprocess so peak RSS is that run's own.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

FIDELITY_KEYS = (
    "mean_ttft_ms",
    "p99_ttft_ms",
    "mean_itl_ms",
    "mean_e2e_latency_ms",
    "output_throughput_tok_s",
    "completed_requests",
)


def _spec_kwargs(args: argparse.Namespace) -> dict[str, object]:
    return dict(
        requests=args.requests, rate=60.0, isl_mean=2000, osl_mean=200, spread=0.5,
        prefix_groups=8, prefix_ratio=args.prefix_ratio, turns=1, seed=args.seed, trace_block_size=512,
    )


def _engine_kwargs(args: argparse.Namespace) -> dict[str, object]:
    kw: dict[str, object] = {"engine": args.engine}
    if args.block_size is not None:
        kw["block_size"] = args.block_size
    return kw


# ---------------------------------------------------------------------------------- children


def child_dmocker(args: argparse.Namespace) -> None:
    sys.path.insert(0, ROOT)
    from dmocker.replay import SyntheticSpec, accelerated, run

    records = os.path.join(tempfile.mkdtemp(), "records.jsonl") if args.records else None
    t0 = time.perf_counter()
    c0 = time.process_time()
    if args.trace:
        report = run(args.trace, prefill_workers=2, decode_workers=2, per_request=records,  # type: ignore[arg-type]
                     **_engine_kwargs(args))  # type: ignore[arg-type]
    else:
        report = run(synthetic=SyntheticSpec(**_spec_kwargs(args)), per_request=records,  # type: ignore[arg-type]
                     prefill_workers=2, decode_workers=2, **_engine_kwargs(args))  # type: ignore[arg-type]
    wall = time.perf_counter() - t0
    if records is not None:
        os.remove(records)
    cpu = time.process_time() - c0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "rss_mb": rss_mb, "summary": report.summary,
                      "compiled": accelerated()}))


def child_reference(args: argparse.Namespace) -> None:
    os.environ.setdefault("DYN_LOG", "error")
    from dynamo.replay import run_trace_replay  # type: ignore[import-not-found]

    engine: dict[str, object] = {"backend": args.engine}
    if args.block_size is not None:
        engine["block_size"] = args.block_size
    t0 = time.perf_counter()
    report = run_trace_replay(
        args.trace,
        prefill_engine_args={"engine": {**engine, "worker_type": "prefill"}},
        decode_engine_args={"engine": {**engine, "worker_type": "decode"}},
        num_prefill_workers=2,
        num_decode_workers=2,
        router_mode="round_robin",
        capture_per_request=True,  # per-request records, as dmocker keeps them (like for like)
    )
    wall = time.perf_counter() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    summary = report if isinstance(report, dict) else getattr(report, "summary", report)
    if not isinstance(summary, dict):
        summary = json.loads(json.dumps(summary, default=lambda o: getattr(o, "__dict__", str(o))))
    print(json.dumps({"wall_s": wall, "rss_mb": rss_mb, "summary": summary}, default=str))


# ---------------------------------------------------------------------------------- parent


def write_trace(args: argparse.Namespace, path: str) -> None:
    """The synthetic workload as a Mooncake trace (integer-ms timestamps) for both replays."""
    sys.path.insert(0, ROOT)
    from dmocker._atomic import AtomicFile
    from dmocker.replay.workload import NO_NEXT, SyntheticSpec, SyntheticWorkload

    w = SyntheticWorkload(SyntheticSpec(**_spec_kwargs(args)))  # type: ignore[arg-type]
    with AtomicFile(path) as fh:
        for start in w.session_starts():
            rid = start.request_id
            turn = w.load(rid)
            assert turn.next_request_id == NO_NEXT
            fh.write(json.dumps({"timestamp": int(round(start.arrival_ms)), "input_length": turn.input_length,
                                 "output_length": turn.output_length, "hash_ids": list(turn.hash_ids)}) + "\n")


def _run_child(python: str, role: str, args: argparse.Namespace, trace: str | None) -> dict[str, object]:
    cmd = [python, os.path.abspath(__file__), "--child", role, "--requests", str(args.requests),
           "--seed", str(args.seed), "--engine", args.engine, "--prefix-ratio", str(args.prefix_ratio)]
    if args.block_size is not None:
        cmd += ["--block-size", str(args.block_size)]
    if trace:
        cmd += ["--trace", trace]
    if args.records:
        cmd += ["--records"]
    env = {**os.environ, "DYN_LOG": "error"}
    if role == "dmocker":
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if res.returncode != 0:
        raise SystemExit(f"{role} run failed:\n{res.stderr[-4000:]}")
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("{")][-1]
    out: dict[str, object] = json.loads(line)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--engine", default="vllm")
    p.add_argument("--block-size", type=int, default=None)
    p.add_argument("--prefix-ratio", type=float, default=0.5, help="share of blocks in the group prefix (0.5)")
    p.add_argument("--reference", metavar="PYTHON", help="python of a venv with ai-dynamo 1.6.1 (side-by-side)")
    p.add_argument("--records", action="store_true",
                   help="dmocker also writes its per-request records (JSONL, to a temp file); "
                        "always on side by side, where the reference captures per-request records "
                        "(capture_per_request=True)")
    p.add_argument("--child", choices=["dmocker", "reference"], help=argparse.SUPPRESS)
    p.add_argument("--trace", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child == "dmocker":
        child_dmocker(args)
        return
    if args.child == "reference":
        child_reference(args)
        return

    label = f"{args.engine}{'' if args.block_size is None else f' block {args.block_size}'} 2P+2D round robin"
    if args.reference is None:
        res = _run_child(sys.executable, "dmocker", args, None)
        wall = float(res["wall_s"])  # type: ignore[arg-type]
        print(f"workload: {args.requests} synthetic requests (seed {args.seed}), {label}")
        print(f"wall seconds:        {wall:.2f}")
        print(f"simulated req/s:     {args.requests / wall:,.0f}")
        cpu = float(res["cpu_s"])  # type: ignore[arg-type]
        print(f"cpu seconds:         {cpu:.2f}  ({args.requests / cpu:,.0f} req per cpu-second;"
              f" differs from wall when the machine is shared)")
        print(f"peak RSS (MB):       {float(res['rss_mb']):.0f}")  # type: ignore[arg-type]
        print(f"hot path:            {'compiled (mypyc)' if res['compiled'] else 'pure Python'}"
              f" (DMOCKER_PURE_PYTHON=1 forces pure)")
        s = res["summary"]
        assert isinstance(s, dict)
        print(f"completed_requests:  {s['completed_requests']}")
        return

    args.records = True  # like for like: the reference captures per-request records too
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "bench_trace.jsonl")
        write_trace(args, trace)
        ours = _run_child(sys.executable, "dmocker", args, trace)
        ref = _run_child(args.reference, "reference", args, trace)
    so, sr = ours["summary"], ref["summary"]
    assert isinstance(so, dict) and isinstance(sr, dict)
    print(f"workload: {args.requests} requests (seed {args.seed}) as a Mooncake trace, {label}")
    print(f"{'metric':28} {'dmocker':>14} {'reference':>14} {'diff':>8}")
    for key in FIDELITY_KEYS:
        a, b = float(so.get(key, float("nan"))), float(sr.get(key, float("nan")))
        diff = (a - b) / b * 100 if b else float("nan")
        print(f"{key:28} {a:14.3f} {b:14.3f} {diff:7.2f}%")
    for name, res in (("dmocker", ours), ("reference", ref)):
        wall = float(res["wall_s"])  # type: ignore[arg-type]
        print(f"{name:10} wall {wall:7.2f} s  {args.requests / wall:8,.0f} req/s  peak RSS {float(res['rss_mb']):6.0f} MB")  # type: ignore[arg-type]
    ratio = float(ref["wall_s"]) / float(ours["wall_s"])  # type: ignore[arg-type]
    print(f"dmocker / reference requests per second: {ratio:.2f}x "
          f"(both keep per-request records; dmocker hot path "
          f"{'compiled' if ours['compiled'] else 'pure Python'})")


if __name__ == "__main__":
    main()
