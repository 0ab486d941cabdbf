"""Pin the replay's outputs: md5s of reports, per-request records and event logs on fixed workloads.

A structural change (a refactor, a speed change) must move none of them.  Run it before the
change and keep the table, run it after and compare:

    python bench/pin_outputs.py --trace MOONCAKE.jsonl --out pins-before.json
    python bench/pin_outputs.py --trace MOONCAKE.jsonl --check pins-before.json

Every case runs ``python -m dmocker replay ... --out --per-request --events`` as a user would,
in a fresh process.  The report is pinned without its ``config`` section (its shape may change
when the configuration does; the summary, planner and other sections may not).  The cases: the
five workloads of ``bench/replay_bench.py``, round robin and KV-routed; runs with seeded faults
and worker crashes on both engines; planner runs; a time cap; concurrency mode.  Synthetic
workloads are written once as Mooncake traces into ``--work DIR`` (reused when present), so
both sides of a comparison replay the same files.  Exit status 1 when ``--check`` finds a
difference.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Synthetic workloads as in bench/replay_bench.py: ISL 1000-3000, OSL 100-300, Poisson 60 req/s,
# 8 prefix groups sharing half their blocks, 512-token trace blocks.
_SYNTH = ("--rate", "60", "--isl-mean", "2000", "--osl-mean", "200", "--spread", "0.5",
          "--prefix-groups", "8", "--prefix-ratio", "0.5", "--seed", "0")
_SGL64 = ("--engine", "sglang", "--block-size", "64")
_W5 = ("--engine", "sglang", "--block-size", "64", "--kv-transfer-bandwidth", "50",
       "--kv-bytes-per-token", "131072")
_FAULTS = ("--fault-cancel-rate", "0.05", "--fault-fail-rate", "0.03", "--fault-timeout-rate", "0.02",
           "--fault-seed", "7")


def _cases(traces: dict[str, str], mooncake: str | None) -> list[tuple[str, list[str]]]:
    t10, t100 = traces["10k"], traces["100k"]
    out: list[tuple[str, list[str]]] = []
    for router in ("round-robin", "kv"):
        tag = "rr" if router == "round-robin" else "kv"
        r = ["--router", router]
        out.append((f"w1-{tag}", [t10, *r]))
        out.append((f"w2-{tag}", [t10, *_SGL64, *r]))
        out.append((f"w3-{tag}", [t100, *r]))
        if mooncake is not None:
            out.append((f"w4-{tag}", [mooncake, "--prefill-workers", "4", "--decode-workers", "4", *r]))
            out.append((f"w5-{tag}", [mooncake, "--prefill-workers", "4", "--decode-workers", "4", *_W5, *r]))
    small = ["--synthetic", "3000", *_SYNTH]
    out += [
        ("faults-crash-vllm", [*small, *_FAULTS, "--worker-crash", "decode:0@12000",
                               "--worker-crash", "prefill:1@20000", "--worker-restart-s", "5"]),
        ("faults-crash-sglang", [*small, *_SGL64, *_FAULTS, "--worker-crash", "decode:1@9000",
                                 "--worker-restart-s", "3"]),
        ("faults-crash-kv", [*small, *_FAULTS, "--router", "kv", "--worker-crash", "prefill:0@15000"]),
        ("crash-no-restart", [*small, "--worker-crash", "decode:0@10000"]),
        ("planner-load", [*small, "--planner", "load", "--prefill-workers", "1", "--decode-workers", "1",
                          "--load-interval-s", "2", "--sla-ttft-ms", "100", "--sla-itl-ms", "5",
                          "--startup-time-s", "3"]),
        ("planner-load-kv", [*small, "--router", "kv", "--planner", "load", "--load-interval-s", "2",
                             "--sla-ttft-ms", "100", "--sla-itl-ms", "5"]),
        ("planner-throughput-sglang", [*small, *_SGL64, "--planner", "throughput", "--throughput-interval-s", "20",
                                       "--startup-time-s", "5"]),
        ("time-cap", [*small, "--max-sim-time-ms", "20000"]),
        ("concurrency", [*small, *_SGL64, "--max-in-flight", "24"]),
        ("multi-turn", ["--synthetic", "1500", "--turns", "3", "--rate", "20", "--seed", "3"]),
    ]
    return out


def _write_synthetic(n: int, path: str) -> None:
    """The workload as a Mooncake trace, via the CLI's synthetic generator (one replay's
    per-request records give arrival, lengths; the hashes come from the generator)."""
    code = (
        "import json,sys\n"
        "from dmocker.replay.workload import NO_NEXT, SyntheticSpec, SyntheticWorkload\n"
        f"w = SyntheticWorkload(SyntheticSpec(requests={n}, rate=60.0, isl_mean=2000, osl_mean=200, spread=0.5,"
        " prefix_groups=8, prefix_ratio=0.5, turns=1, seed=0, trace_block_size=512))\n"
        "out = open(sys.argv[1], 'w')\n"
        "for s in w.session_starts():\n"
        "    t = w.load(s.request_id)\n"
        "    out.write(json.dumps({'timestamp': int(round(s.arrival_ms)), 'input_length': t.input_length,"
        " 'output_length': t.output_length, 'hash_ids': list(t.hash_ids)}) + '\\n')\n"
        "out.close()\n"
    )
    subprocess.run([sys.executable, "-c", code, path], check=True, env=_env())


def _env() -> dict[str, str]:
    return {**os.environ, "OPENBLAS_NUM_THREADS": "1",
            "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _md5_file(path: str) -> str:
    md5 = hashlib.md5()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            md5.update(chunk)
    return md5.hexdigest()


def _run_case(args: list[str], tmp: str) -> dict[str, str]:
    out, rec, ev = (os.path.join(tmp, n) for n in ("report.json", "records.jsonl", "events.jsonl"))
    cmd = [sys.executable, "-m", "dmocker", "replay", *args, "--out", out, "--per-request", rec,
           "--events", ev, "--quiet"]
    res = subprocess.run(cmd, capture_output=True, text=True, env=_env(), check=False)
    if res.returncode not in (0, 1) or not os.path.exists(out):
        raise SystemExit(f"failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr[-3000:]}")
    with open(out) as fh:
        report = json.load(fh)
    report.pop("config", None)
    digest = {
        "exit": str(res.returncode),
        "report": hashlib.md5(json.dumps(report, sort_keys=True).encode()).hexdigest(),
        "records": _md5_file(rec),
        "events": _md5_file(ev),
    }
    for p in (out, rec, ev):
        os.remove(p)
    return digest


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", metavar="MOONCAKE_JSONL", help="the Mooncake conversation trace (w4, w5)")
    p.add_argument("--work", metavar="DIR", default=os.path.join(tempfile.gettempdir(), "dmocker-pins"),
                   help="where the synthetic traces are written once (default: a folder under the temp dir)")
    p.add_argument("--only", help="comma-separated case names (default: all)")
    p.add_argument("--out", metavar="JSON", help="write the md5s here")
    p.add_argument("--check", metavar="JSON", help="compare with md5s written earlier; exit 1 on a difference")
    args = p.parse_args()
    os.makedirs(args.work, exist_ok=True)
    traces = {}
    for name, n in (("10k", 10_000), ("100k", 100_000)):
        path = os.path.join(args.work, f"synthetic_{name}.jsonl")
        if not os.path.exists(path):
            _write_synthetic(n, path + ".part")
            os.replace(path + ".part", path)
        traces[name] = path
    cases = _cases(traces, args.trace)
    if args.only:
        keep = set(args.only.split(","))
        cases = [c for c in cases if c[0] in keep]
    expected: dict[str, dict[str, str]] = {}
    if args.check:
        with open(args.check) as fh:
            expected = json.load(fh)
    results: dict[str, dict[str, str]] = {}
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, cargs in cases:
            t0 = time.perf_counter()
            d = _run_case(cargs, tmp)
            results[name] = d
            verdict = ""
            if args.check:
                want = expected.get(name)
                verdict = "  (not pinned)" if want is None else ("  same" if want == d else "  DIFFERENT")
                bad += want is not None and want != d
            print(f"{name:28} exit {d['exit']} report {d['report'][:12]} records {d['records'][:12]} "
                  f"events {d['events'][:12]}  {time.perf_counter() - t0:6.1f} s{verdict}", flush=True)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(results, fh, indent=1, sort_keys=True)
            fh.write("\n")
    if bad:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
