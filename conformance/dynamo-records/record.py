"""Record real per-request records from the reference (Dynamo 1.6.1) for the conformance suite.

Run with the SEPARATE reference venv (never a dmocker dependency):

    python3 -m venv refvenv
    refvenv/bin/pip install --no-deps ai-dynamo-runtime==1.6.1 ai-dynamo==1.6.1 msgspec tqdm typing-extensions
    DYN_LOG=error refvenv/bin/python conformance/dynamo-records/record.py TRACE [--requests 16]

It replays the first REQUESTS lines of a Mooncake trace on 2 prefill + 2 decode workers, round
robin, block size 64, with a KV transfer model on the prefill side (10 GB/s, 131072 B/token), for
vLLM (source-first) and SGLang (destination-first), and writes ``vllm.jsonl`` and
``sglang.jsonl`` next to this script, plus real failure records (``vllm-failed.jsonl``,
``vllm-rejected.jsonl``, ``sglang-failed.jsonl``: 1P+1D with a 30-block pool on one side) (the records the reference writes with
``capture_per_request=True``).  The doctored files (``vllm-reserved-before-held.jsonl`` …) are
derived from ``vllm.jsonl`` by ``--doctor``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def record(trace: str, requests: int) -> None:
    import dynamo.replay as replay  # the reference; only importable in the reference venv

    with tempfile.TemporaryDirectory() as tmp:
        small = os.path.join(tmp, "trace.jsonl")
        with open(trace, encoding="utf-8") as src, open(small, "w", encoding="utf-8") as dst:
            for i, line in enumerate(src):
                if i >= requests:
                    break
                dst.write(line)
        for backend in ("vllm", "sglang"):
            prefill = {"engine": {"backend": backend, "worker_type": "prefill", "block_size": 64,
                                  "kv_transfer_bandwidth": 10.0, "kv_transfer_bytes_per_token": 131072}}
            decode = {"engine": {"backend": backend, "worker_type": "decode", "block_size": 64}}
            out = os.path.join(tmp, f"{backend}.jsonl")
            replay.run_trace_replay(
                small, prefill_engine_args=prefill, decode_engine_args=decode,
                num_prefill_workers=2, num_decode_workers=2, router_mode="round_robin",
                capture_per_request=True, report_jsonl_path=out,
            )
            with open(out, encoding="utf-8") as handle:
                lines = [line for line in handle if line.strip()]
            with open(os.path.join(HERE, f"{backend}.jsonl"), "w", encoding="utf-8") as handle:
                handle.writelines(lines)
            print(f"{backend}: {len(lines)} records")
        # Failures: a pool of 30 blocks of 64 tokens is too small for most prompts of the trace.
        # Decode pool too small -> "failed" (vLLM after the source is held, SGLang before
        # anything); prefill pool too small -> "rejected" (no timestamps at all).
        for backend, small_side, name in (("vllm", "decode", "vllm-failed"), ("vllm", "prefill", "vllm-rejected"),
                                          ("sglang", "decode", "sglang-failed")):
            sides = {}
            for side in ("prefill", "decode"):
                engine: dict[str, object] = {"backend": backend, "worker_type": side, "block_size": 64}
                if side == "prefill":
                    engine.update({"kv_transfer_bandwidth": 10.0, "kv_transfer_bytes_per_token": 131072})
                if side == small_side:
                    engine["num_gpu_blocks"] = 30
                sides[side] = {"engine": engine}
            out = os.path.join(tmp, f"{name}.jsonl")
            replay.run_trace_replay(
                small, prefill_engine_args=sides["prefill"], decode_engine_args=sides["decode"],
                num_prefill_workers=1, num_decode_workers=1, router_mode="round_robin",
                capture_per_request=True, report_jsonl_path=out,
            )
            with open(out, encoding="utf-8") as handle:
                lines = [line for line in handle if line.strip()][:8]
            with open(os.path.join(HERE, f"{name}.jsonl"), "w", encoding="utf-8") as handle:
                handle.writelines(lines)
            print(f"{name}: {len(lines)} records")


def doctor() -> None:
    """Derive the invalid record files from the real vLLM records (one change each)."""
    with open(os.path.join(HERE, "vllm.jsonl"), encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle]
    first = dict(records[0])
    # vLLM is source-first: a reservation strictly before the source is held is a violation.
    first["destination_reserved_ms"] = round(first["source_held_ms"] - 5.0, 6)
    _write("vllm-reserved-before-held.jsonl", [first, *records[1:4]])
    second = dict(records[1])
    second["decode_admit_ms"] = round(second["destination_activated_ms"] - 1.0, 6)
    _write("vllm-decode-before-activation.jsonl", [records[0], second, *records[2:4]])
    failed = dict(records[2])
    for name in ("destination_reserved_ms", "destination_activated_ms", "decode_admit_ms", "source_released_ms"):
        failed[name] = None
    failed["terminal_status"] = "failed"
    _write("vllm-failed-truncated.jsonl", [records[0], records[1], failed, records[3]])


def _write(name: str, records: list[dict[str, object]]) -> None:
    with open(os.path.join(HERE, name), "w", encoding="utf-8") as handle:
        for rec in records:
            handle.write(json.dumps(rec, separators=(",", ":")) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", nargs="?")
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--doctor", action="store_true", help="only (re)derive the doctored files")
    args = parser.parse_args()
    if not args.doctor:
        if not args.trace:
            parser.error("give a TRACE (or --doctor)")
        record(args.trace, args.requests)
    doctor()
    return 0


if __name__ == "__main__":
    sys.exit(main())
