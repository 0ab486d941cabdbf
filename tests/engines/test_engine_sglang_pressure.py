"""SGLang destinations under decode KV pressure, against the reference (Dynamo 1.6.1 golden numbers).

When an SGLang destination is activated, its prompt pages are inserted into the decode worker's
radix tree; a page whose hash the tree already holds (another request with the same prefix was
activated or finished since this one was reserved) is a duplicate: the request frees its own
copy and locks the tree's page instead (``ai-dynamo/aisimulate``
``crates/core/src/engine/kv_manager/sglang_backend.rs``, ``activate_destination_lease`` ->
``cache_unfinished_hashes`` -> ``canonicalize_unfinished_pages``).  Keeping the duplicates
holds pages the reference has already returned, which delays later reservations and retracts
more under pressure.

Traces (``data/``): ``sgl_dup_prefix`` two identical 2048-token prompts then a third one
(100 pages); ``sgl_conv10`` the first 10 lines of a Mooncake conversation trace (1562 pages).
Both replayed with 1 prefill + 1 decode SGLang worker, round robin, page size 64;
``data/reference_sglang_pressure_1.6.1.json`` holds ``dynamo.replay.run_trace_replay``'s summary.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dmocker.engines.interface import EngineArgs, EngineRequest, WorkerType
from dmocker.engines.sglang import SglangWorker

DATA = Path(__file__).parent / "data"
GOLDEN = json.loads((DATA / "reference_sglang_pressure_1.6.1.json").read_text())


@pytest.mark.parametrize("trace", sorted(GOLDEN))
def test_pressure_replay_matches_reference(trace: str) -> None:
    from dmocker.replay import ReplayConfig, run

    case = GOLDEN[trace]
    summary = run(ReplayConfig.from_values({
        "trace": str(DATA / f"{trace}.jsonl"), "prefill_workers": 1, "decode_workers": 1, "engine": "sglang",
        "block_size": 64, "num_gpu_blocks": case["num_gpu_blocks"],
    })).summary
    for field, value in case["summary"].items():
        assert summary[field] == pytest.approx(value, rel=1e-6, abs=1e-6), field


def test_activation_frees_duplicate_prompt_pages() -> None:
    """Two destinations of the same prompt, both reserved before either is activated: the
    second activation finds every page in the tree and keeps only the tree's copies."""
    args = EngineArgs(engine="sglang", worker_type=WorkerType.DECODE,
                      block_size=4, num_gpu_blocks=16)
    w = SglangWorker(args)
    hashes = (11, 12)

    def req(rid: int) -> EngineRequest:
        return EngineRequest(request_id=rid, input_length=8, max_output_tokens=4, block_hashes=hashes)

    w.reserve_destination("a", req(1))
    w.reserve_destination("b", req(2))
    assert w.pool.free == 12  # two private copies of both pages
    w.activate_destination("a")
    w.check_invariants()
    assert w.pool.free == 12
    gen = w._book.gen
    w.activate_destination("b")
    w.check_invariants()
    assert w._book.gen == gen + 1  # freed pages: the pending reservations may be retried
    # b's copies went back to the pool; both requests lock the tree's two pages
    assert w.pool.free == 14
    assert w.pool.refs_of([11, 12]) == [2, 2]
