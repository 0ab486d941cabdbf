"""Replay speed and memory: dmocker alone, or side by side with the reference (Dynamo's mocker).

Side by side (the table to quote), five workloads, each run as two whole processes back to back
(the reference without per-request capture, then dmocker without records; dmocker's bytecode
compiled first, as an installed wheel has it), CPU and wall seconds and their ratios
reference / dmocker, ``--reps`` times:

    python bench/replay_bench.py --reference REF_PYTHON --trace MOONCAKE.jsonl [--reps 2] [--only 4,5] [--router kv] [--cli]

(``--router kv``: both route KV-aware, the reference in its ``kv_router`` mode.  ``--cli``: time
dmocker as a user runs it, ``python -m dmocker replay TRACE ... --out REPORT --quiet``, against a
reference process that calls its replay and writes its report likewise; without it both sides
are a small script calling the Python API.)

``REF_PYTHON`` is the python of a venv where the reference is installed (only there:
``python3 -m venv REFVENV && REFVENV/bin/pip install ai-dynamo-runtime==1.6.1 &&
REFVENV/bin/pip install --no-deps ai-dynamo==1.6.1``; ``ai-dynamo``'s dependency ``aisimulate``
is a stub that downloads from pypi.nvidia.com, which the replay does not need);
``MOONCAKE.jsonl`` is the Mooncake conversation trace (workloads 4 and 5; skipped without it).
The workloads: (1) 10k synthetic requests (ISL uniform 1000-3000, OSL 100-300, Poisson 60
req/s, 8 prefix groups sharing half their blocks, written as a Mooncake trace with 512-token
blocks) on vLLM 2 prefill + 2 decode; (2) the same on SGLang, block 64; (3) 100k such requests
on vLLM; (4) the Mooncake trace on vLLM 4P+4D; (5) the same on SGLang block 64 with a 50 GB/s
KV link at 131072 bytes per token.

Outputs of the five workloads (summary and per-request records, with md5s; they must not move
when only speed work changes):

    python bench/replay_bench.py --outputs DIR --trace MOONCAKE.jsonl

Alone / the fidelity table of one synthetic workload:

    python bench/replay_bench.py [--requests 10000] [--engine sglang --block-size 64]
    python bench/replay_bench.py --fidelity --reference REF_PYTHON --requests 10000

Each measurement runs in a fresh subprocess so peak RSS is that run's own.
"""

from __future__ import annotations

import argparse
import compileall
import hashlib
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
    from dmocker.replay import ReplayConfig, SyntheticSpec, run

    records = os.path.join(tempfile.mkdtemp(), "records.jsonl") if args.records else None
    t0 = time.perf_counter()
    c0 = time.process_time()
    if args.trace:
        report = run(ReplayConfig.from_values({
            "trace": args.trace, "prefill_workers": 2, "decode_workers": 2, "per_request": records,
            "router": args.router, **_engine_kwargs(args),
        }))
    else:
        report = run(ReplayConfig.from_values({
            "workload.synthetic": SyntheticSpec(**_spec_kwargs(args)), "per_request": records, "prefill_workers": 2,
            "decode_workers": 2, "router": args.router, **_engine_kwargs(args),
        }))
    wall = time.perf_counter() - t0
    if records is not None:
        os.remove(records)
    cpu = time.process_time() - c0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({"wall_s": wall, "cpu_s": cpu, "rss_mb": rss_mb, "summary": report.summary}))


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
        router_mode="kv_router" if args.router == "kv" else "round_robin",
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


def _child_env(role: str) -> dict[str, str]:
    """A child's environment.  Both children start as a ``dmocker`` process does
    (dmocker/cli/__init__.py): no OpenBLAS thread pool, which neither replay uses."""
    env = {"OPENBLAS_NUM_THREADS": "1", **os.environ, "DYN_LOG": "error"}
    if role == "dmocker":
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _run_child(python: str, role: str, args: argparse.Namespace, trace: str | None) -> dict[str, object]:
    cmd = [python, os.path.abspath(__file__), "--child", role, "--requests", str(args.requests),
           "--seed", str(args.seed), "--engine", args.engine, "--prefix-ratio", str(args.prefix_ratio)]
    if args.block_size is not None:
        cmd += ["--block-size", str(args.block_size)]
    if trace:
        cmd += ["--trace", trace]
    cmd += ["--router", args.router]
    if args.records:
        cmd += ["--records"]
    env = _child_env(role)
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if res.returncode != 0:
        raise SystemExit(f"{role} run failed:\n{res.stderr[-4000:]}")
    line = [ln for ln in res.stdout.splitlines() if ln.startswith("{")][-1]
    out: dict[str, object] = json.loads(line)
    return out


WORKLOADS: tuple[dict[str, object], ...] = (
    # name, workload ("synthetic N" or the Mooncake trace), engine, block size, P, D, transfer
    {"name": "synthetic 10k, vLLM 2P+2D", "requests": 10_000, "engine": "vllm", "block_size": None,
     "prefill": 2, "decode": 2},
    {"name": "synthetic 10k, SGLang block 64 2P+2D", "requests": 10_000, "engine": "sglang", "block_size": 64,
     "prefill": 2, "decode": 2},
    {"name": "synthetic 100k, vLLM 2P+2D", "requests": 100_000, "engine": "vllm", "block_size": None,
     "prefill": 2, "decode": 2},
    {"name": "Mooncake trace, vLLM 4P+4D", "trace": True, "engine": "vllm", "block_size": None,
     "prefill": 4, "decode": 4},
    {"name": "Mooncake trace, SGLang block 64 4P+4D, 50 GB/s x 131072 B/token", "trace": True,
     "engine": "sglang", "block_size": 64, "prefill": 4, "decode": 4,
     "kv_transfer_bandwidth": 50.0, "kv_bytes_per_token": 131072},
)


def _workload_traces(args: argparse.Namespace, tmp: str) -> list[tuple[dict[str, object], str]]:
    """(workload, trace path) for the selected workloads; synthetic ones are written once."""
    chosen = [WORKLOADS[i - 1] for i in args.only] if args.only else list(WORKLOADS)
    out: list[tuple[dict[str, object], str]] = []
    written: dict[int, str] = {}
    for w in chosen:
        if w.get("trace"):
            if args.trace is None:
                print(f"skipped (give --trace MOONCAKE.jsonl): {w['name']}", file=sys.stderr)
                continue
            out.append((w, args.trace))
            continue
        n = int(w["requests"])  # type: ignore[arg-type]
        if n not in written:
            path = os.path.join(tmp, f"synthetic_{n}.jsonl")
            write_trace(argparse.Namespace(**{**vars(args), "requests": n}), path)
            written[n] = path
        out.append((w, written[n]))
    return out


def child_workload(spec: dict[str, object]) -> None:
    """One workload in this process: dmocker (``spec['role'] == 'dmocker'``) or the reference."""
    engine = str(spec["engine"])
    bs = spec.get("block_size")
    bw, bpt = spec.get("kv_transfer_bandwidth"), spec.get("kv_bytes_per_token")
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    if spec["role"] == "dmocker":
        sys.path.insert(0, ROOT)
        from dmocker.replay import ReplayConfig, run

        kw: dict[str, object] = {"engine": engine, "block_size": bs, "kv_transfer_bandwidth": bw,
                                 "kv_bytes_per_token": bpt, "router": spec.get("router", "round-robin")}
        report = run(ReplayConfig.from_values({
            "trace": str(spec["trace"]), "prefill_workers": int(spec["prefill"]),
            "decode_workers": int(spec["decode"]), "per_request": spec.get("records"), **kw,
        }))
        summary: object = report.summary
    else:
        os.environ.setdefault("DYN_LOG", "error")
        from dynamo.replay import run_trace_replay  # type: ignore[import-not-found,unused-ignore]

        eng: dict[str, object] = {"backend": engine}
        if bs is not None:
            eng["block_size"] = bs
        if bw is not None:
            eng["kv_transfer_bandwidth"] = bw
            eng["kv_transfer_bytes_per_token"] = bpt
        report = run_trace_replay(
            str(spec["trace"]),
            prefill_engine_args={"engine": {**eng, "worker_type": "prefill"}},
            decode_engine_args={"engine": {**eng, "worker_type": "decode"}},
            num_prefill_workers=int(spec["prefill"]),  # type: ignore[call-overload]
            num_decode_workers=int(spec["decode"]),  # type: ignore[call-overload]
            router_mode="kv_router" if spec.get("router") == "kv" else "round_robin",
            capture_per_request=False,
        )
        summary = report if isinstance(report, dict) else getattr(report, "summary", report)
        if not isinstance(summary, dict):
            summary = json.loads(json.dumps(summary, default=lambda o: getattr(o, "__dict__", str(o))))
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    print(json.dumps({"wall_s": wall, "run_cpu_s": cpu, "rss_mb": r1.ru_maxrss / 1024.0, "summary": summary},
                     default=str))
    if spec.get("report"):  # written like ``dmocker replay --out``
        with open(str(spec["report"]), "w") as fh:
            fh.write(json.dumps({"summary": summary}, default=str))


def _cli_command(python: str, w: dict[str, object], trace: str, router: str, out: str) -> list[str]:
    """``dmocker replay`` as a user types it for workload ``w``."""
    cmd = [python, "-m", "dmocker", "replay", trace, "--engine", str(w["engine"]),
           "--prefill-workers", str(w["prefill"]), "--decode-workers", str(w["decode"]), "--router", router]
    for flag, key in (("--block-size", "block_size"), ("--kv-transfer-bandwidth", "kv_transfer_bandwidth"),
                      ("--kv-bytes-per-token", "kv_bytes_per_token")):
        if w.get(key) is not None:
            cmd += [flag, str(w[key])]
    return [*cmd, "--out", out, "--quiet"]


def _run_workload(python: str, role: str, w: dict[str, object], trace: str,
                  records: str | None = None, router: str = "round-robin", cli: bool = False) -> dict[str, object]:
    """Run one workload in a fresh process; adds its whole-process CPU seconds (user + sys)."""
    spec = {**w, "role": role, "trace": trace, "records": records, "router": router}
    env = _child_env(role)
    report = tempfile.NamedTemporaryFile(suffix=".json", delete=False)
    report.close()
    if cli and role == "dmocker" and records is None:
        cmd = _cli_command(python, w, trace, router, report.name)
    else:
        cmd = [python, os.path.abspath(__file__), "--child-workload", json.dumps({**spec, "report": report.name})]
    # The child's own resource usage (wait4), not the running total of all children.
    with tempfile.TemporaryFile("w+") as stdout, tempfile.TemporaryFile("w+") as stderr:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=stdout, stderr=stderr, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        stdout.seek(0)
        stderr.seek(0)
        printed, errors = stdout.read(), stderr.read()
    try:
        if proc.returncode != 0:
            raise SystemExit(f"{role} run of {w['name']} failed:\n{errors[-4000:]}")
        with open(report.name) as fh:
            written = json.load(fh)
    finally:
        os.remove(report.name)
    lines = [ln for ln in printed.splitlines() if ln.startswith("{")]
    out: dict[str, object] = json.loads(lines[-1]) if lines else {}
    out["summary"] = written.get("summary", written)
    out["rss_mb"] = usage.ru_maxrss / 1024.0
    out["process_cpu_s"] = usage.ru_utime + usage.ru_stime
    out["process_wall_s"] = wall
    return out


def side_by_side(args: argparse.Namespace) -> None:
    """The ratio table: each workload, reference then dmocker, whole processes back to back."""
    # dmocker's bytecode is compiled once first, as an installed wheel has it (pip compiles at
    # install): without it, an editable checkout run under PYTHONDONTWRITEBYTECODE recompiles
    # every module in every process (~0.15 CPU s), which is packaging, not replay speed.
    compileall.compile_dir(os.path.join(ROOT, "dmocker"), quiet=1)
    with tempfile.TemporaryDirectory() as tmp:
        jobs = _workload_traces(args, tmp)
        rows: list[tuple[str, int, dict[str, object], dict[str, object]]] = []
        for rep in range(1, args.reps + 1):
            for w, trace in jobs:
                ref = _run_workload(args.reference, "reference", w, trace, router=args.router, cli=args.cli)
                ours = _run_workload(sys.executable, "dmocker", w, trace, router=args.router, cli=args.cli)
                rows.append((str(w["name"]), rep, ref, ours))
                print(f"  rep {rep}: {w['name']}: reference {float(ref['process_cpu_s']):.2f} cpu-s, "  # type: ignore[arg-type]
                      f"dmocker {float(ours['process_cpu_s']):.2f} cpu-s", file=sys.stderr, flush=True)  # type: ignore[arg-type]
    print(f"router: {args.router} (reference: {'kv_router' if args.router == 'kv' else 'round_robin'})")
    how = "`python -m dmocker replay TRACE ... --out REPORT`" if args.cli else "a script calling dmocker.replay.run"
    print("CPU seconds (user + sys) and wall seconds of whole processes, reference (Dynamo mocker, no per-request")
    print(f"capture) then dmocker ({how}, no records), back to back; ratios = reference / dmocker (> 1: dmocker faster)")
    print(f"| workload | rep | reference cpu s | dmocker cpu s | cpu ratio | reference wall s | dmocker wall s "
          f"| wall ratio | reference RSS MB | dmocker RSS MB | completed (ref/dmocker) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, rep, ref, ours in rows:
        rc, oc = float(ref["process_cpu_s"]), float(ours["process_cpu_s"])  # type: ignore[arg-type]
        sr, so = ref["summary"], ours["summary"]
        assert isinstance(sr, dict) and isinstance(so, dict)
        rw, ow = float(ref["process_wall_s"]), float(ours["process_wall_s"])  # type: ignore[arg-type]
        print(f"| {name} | {rep} | {rc:.2f} | {oc:.2f} | {rc / oc:.2f}x "
              f"| {rw:.2f} | {ow:.2f} | {rw / ow:.2f}x "
              f"| {float(ref['rss_mb']):.0f} | {float(ours['rss_mb']):.0f} "  # type: ignore[arg-type]
              f"| {sr.get('completed_requests')}/{so.get('completed_requests')} |")


def outputs(args: argparse.Namespace) -> None:
    """dmocker's report summary and per-request records of each workload, with their md5s
    (compare before and after a change: they must not move)."""
    os.makedirs(args.outputs, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for i, (w, trace) in enumerate(_workload_traces(args, tmp), 1):
            records = os.path.join(args.outputs, f"w{i}_records.jsonl")
            res = _run_workload(sys.executable, "dmocker", w, trace, records, router=args.router)
            summary_path = os.path.join(args.outputs, f"w{i}_summary.json")
            with open(summary_path, "w") as fh:
                fh.write(json.dumps(res["summary"], sort_keys=True, indent=1) + "\n")
            digests = []
            for path in (summary_path, records):
                # in chunks: reading a 100k-request records file whole would raise this process's
                # RSS, and a child forked afterwards reports the parent's peak as its own
                md5 = hashlib.md5()
                with open(path, "rb") as fh:
                    for chunk in iter(lambda: fh.read(1 << 20), b""):
                        md5.update(chunk)
                digests.append(md5.hexdigest())
            print(f"{w['name']}: summary {digests[0]} records {digests[1]} "
                  f"({float(res['process_cpu_s']):.2f} cpu-s, {float(res['rss_mb']):.0f} MB)", flush=True)  # type: ignore[arg-type]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--engine", default="vllm")
    p.add_argument("--block-size", type=int, default=None)
    p.add_argument("--prefix-ratio", type=float, default=0.5, help="share of blocks in the group prefix (0.5)")
    p.add_argument("--reference", metavar="PYTHON", help="python of a venv with ai-dynamo 1.6.1: print the "
                   "side-by-side ratio table of the five workloads")
    p.add_argument("--trace", metavar="MOONCAKE_JSONL", help="the Mooncake conversation trace (workloads 4, 5)")
    p.add_argument("--reps", type=int, default=2, help="repetitions of the side-by-side table (2)")
    p.add_argument("--only", type=lambda s: [int(x) for x in s.split(",")], default=None,
                   help="comma-separated workload numbers 1-5 (default: all)")
    p.add_argument("--fidelity", action="store_true",
                   help="with --reference: the old fidelity table on --requests synthetic requests instead")
    p.add_argument("--outputs", metavar="DIR", help="write dmocker's summaries and records of the workloads "
                   "to DIR and print their md5s")
    p.add_argument("--records", action="store_true",
                   help="dmocker also writes its per-request records (JSONL, to a temp file)")
    p.add_argument("--router", choices=["round-robin", "kv"], default="round-robin",
                   help="both replays route round robin (default) or KV-aware (reference: kv_router)")
    p.add_argument("--cli", action="store_true",
                   help="side by side: time dmocker as `python -m dmocker replay ... --out REPORT` (a user's command)")
    p.add_argument("--child", choices=["dmocker", "reference"], help=argparse.SUPPRESS)
    p.add_argument("--child-workload", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child_workload:
        child_workload(json.loads(args.child_workload))
        return
    if args.child == "dmocker":
        child_dmocker(args)
        return
    if args.child == "reference":
        child_reference(args)
        return
    if args.outputs:
        outputs(args)
        return
    if args.reference is not None and not args.fidelity:
        side_by_side(args)
        return

    label = f"{args.engine}{'' if args.block_size is None else f' block {args.block_size}'} 2P+2D {args.router}"
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
    print(f"dmocker / reference requests per second: {ratio:.2f}x (both keep per-request records)")


if __name__ == "__main__":
    main()
