"""Engines against the reference: small probe traces replayed by Dynamo 1.6.1 (golden numbers).

Each trace isolates one behaviour of the mocks (``data/``): ``same`` fully shared prompts,
``diff`` none shared, ``half`` half shared (aligned), ``unalhalf`` half shared (unaligned),
``pairs`` two requests with a fresh shared prefix arriving together on one worker, ``fast`` an
overloaded prefill pool.  ``data/reference_dynamo_1.6.1.json`` holds the reference's summary for
each (2 prefill + 2 decode workers, round robin, block size 64; keys with a third part also set
a 1 GB/s link, 131072 bytes per token and that transfer timing mode on the prefill workers),
produced with ``dynamo.replay.run_trace_replay``; dmocker must reproduce it to float rounding.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
GOLDEN = json.loads((DATA / "reference_dynamo_1.6.1.json").read_text())


@pytest.mark.parametrize("key", sorted(GOLDEN))
def test_replay_matches_reference(key: str) -> None:
    from dmocker.replay import ReplayConfig, run

    backend, trace, *mode = key.split("/")
    kv: dict[str, object] = {}
    if mode:
        kv = dict(kv_transfer_bandwidth=1.0, kv_bytes_per_token=131072,
                  kv_transfer_timing_mode=mode[0])
    summary = run(ReplayConfig.from_values({
        "trace": str(DATA / f"{trace}.jsonl"), "prefill_workers": 2, "decode_workers": 2, "engine": backend,
        "block_size": 64, **kv,
    })).summary
    expected = GOLDEN[key]
    for field, value in expected.items():
        assert summary[field] == pytest.approx(value, rel=1e-6, abs=1e-6), field
