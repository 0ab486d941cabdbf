"""The aggregated baseline against the reference: the probe traces (``data/``, and the first 300
lines of the public Mooncake conversation trace) replayed by Dynamo 1.6.1's aggregated replay,
4 workers, round robin, block size 64 (``data/reference_dynamo_1.6.1_agg.json``, written by
``bench/agg_fidelity.py --write``); dmocker must reproduce them to float rounding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
GOLDEN = json.loads((DATA / "reference_dynamo_1.6.1_agg.json").read_text())


@pytest.mark.parametrize("key", sorted(GOLDEN))
def test_aggregated_replay_matches_reference(key: str) -> None:
    from dmocker.replay import ReplayConfig, run

    engine, trace = key.split("/")
    summary = run(ReplayConfig.from_values({
        "trace": str(DATA / f"{trace}.jsonl"), "engine": engine, "block_size": 64, "mode": "agg", "workers": 4,
    })).summary
    for field, value in GOLDEN[key].items():
        assert summary[field] == pytest.approx(value, rel=1e-6, abs=1e-6), field
