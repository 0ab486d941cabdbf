"""Destination-first runtime properties on the SGLang mock (block size 64, as the bench)."""

from __future__ import annotations

import json
from pathlib import Path

from dmocker.replay import ReplayConfig, run


def test_sglang_destination_first_causality(tmp_path: Path) -> None:
    rec, ev = tmp_path / "r.jsonl", tmp_path / "e.jsonl"
    report = run(ReplayConfig.from_values({
        "synthetic": 40, "rate": 20.0, "isl_mean": 1200, "osl_mean": 20, "engine": "sglang", "block_size": 64,
        "per_request": rec, "events": ev,
    }))
    assert report.summary["handoff_order"] == "destination-first"
    assert report.summary["completed_requests"] == 40
    for line in rec.read_text().splitlines():
        r = json.loads(line)
        assert r["destination_reserved_ms"] <= r["prefill_admit_ms"] < r["source_held_ms"]
        assert r["source_held_ms"] <= r["destination_activated_ms"] <= r["source_released_ms"]
        assert r["destination_activated_ms"] <= r["decode_admit_ms"] < r["first_token_ms"]
    first = [json.loads(x)["event"] for x in ev.read_text().splitlines()[1:] if json.loads(x)["handoff"] == 0]
    assert first == [
        "destination_accepted", "destination_reserved", "prefill_submitted", "source_held",
        "transfer_started", "transfer_completed", "destination_activated", "source_released", "completed",
    ]
