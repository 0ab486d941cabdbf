"""Replays for the compiled/pure differential test (``test_compiled.py``), run as a script.

``python twin_runs.py OUT_DIR [--pure PACKAGE_COPY_PARENT]`` replays a fixed, seeded draw of
small workloads and writes each one's summary, per-request records and event log to
``OUT_DIR``.  With ``--pure`` it first drops the editable-install finder and puts a copy of the
package's ``.py`` files first on ``sys.path``, so every module is interpreted; it prints which
file ``dmocker.replay.runtime.loop`` came from, so the caller can check what actually ran.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

CASES = 12  # workloads drawn (seeded): each a few hundred milliseconds of replay


def _cases() -> list[dict[str, object]]:
    """A seeded draw over the replay's paths: both engines, small pools that preempt or retract,
    transfer delay, sessions, KV routing, per-pass (run_pass_by_pass) and bulk decoding, faults."""
    rng = random.Random(20261203)
    cases: list[dict[str, object]] = []
    for i in range(CASES):
        engine = ("vllm", "sglang")[i % 2]
        turns = rng.choice([1, 1, 3])
        kw: dict[str, object] = dict(
            synthetic=turns * rng.randint(15, 40), seed=rng.randint(0, 10**6), engine=engine,
            rate=rng.choice([20.0, 60.0, 200.0]), isl_mean=rng.choice([300, 1200]),
            osl_mean=rng.choice([20, 80, 200]), turns=turns,
            prefill_workers=rng.randint(1, 3), decode_workers=rng.randint(1, 3),
            block_size=rng.choice([16, 64]), router=rng.choice(["round-robin", "kv"]),
            bulk=rng.random() < 0.75,
        )
        if rng.random() < 0.6:  # a small pool: preemption (vLLM) or retraction (SGLang)
            kw["num_gpu_blocks"] = rng.choice([6000, 16000]) // int(kw["block_size"])  # type: ignore[call-overload]
        if rng.random() < 0.5:
            kw["kv_transfer_bandwidth"] = rng.choice([5.0, 50.0])
            kw["kv_bytes_per_token"] = 131072
        if rng.random() < 0.3:
            kw["faults"] = ("faults", rng.randint(0, 99))
        cases.append(kw)
    return cases


def main(argv: list[str]) -> None:
    out = Path(argv[0])
    if len(argv) == 3 and argv[1] == "--pure":
        sys.meta_path[:] = [f for f in sys.meta_path if "__editable__" not in getattr(f, "__module__", "")
                            and "__editable__" not in getattr(f, "__name__", "")]
        sys.path.insert(0, argv[2])
    import dmocker.replay.runtime.loop
    from dmocker.replay import ReplayConfig, run, run_pass_by_pass
    from dmocker.replay.events import DeadEndError
    from dmocker.replay.faults import FaultPlan

    print(dmocker.replay.runtime.loop.__file__)
    out.mkdir(parents=True, exist_ok=True)
    for i, kw in enumerate(_cases()):
        args = dict(kw)
        fault = args.pop("faults", None)
        if isinstance(fault, tuple):
            args["faults"] = FaultPlan(cancel_rate=0.05, fail_rate=0.05, timeout_rate=0.02, seed=int(fault[1]))
        records, events = out / f"{i}-records.jsonl", out / f"{i}-events.jsonl"
        try:
            replay = run if args.pop("bulk") else run_pass_by_pass
            report = replay(ReplayConfig.from_values({"per_request": records, "events": events, **args}))
            outcome = repr(sorted(report.summary.items()))
        except DeadEndError as exc:  # tiny pools can leave prompts that never fit: compare that too
            outcome = f"{type(exc).__name__}: {exc}"
            for path in (records, events):
                path.write_bytes(b"")  # an error writes no output file
        (out / f"{i}-summary.txt").write_text(outcome, encoding="utf-8")


if __name__ == "__main__":
    main(sys.argv[1:])
