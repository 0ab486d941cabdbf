"""The replay's native event log passes the conformance validator (both orders)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dmocker.cli.conform import main as conform_main
from dmocker.handoff import Canceled

from dmocker.replay import ReplayConfig, run

from .helpers import fake_run


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_replay_event_log_conforms(tmp_path: Path, engine: str, capsys: pytest.CaptureFixture[str]) -> None:
    ev = tmp_path / "events.jsonl"
    run(ReplayConfig.from_values({
        "synthetic": 30, "rate": 30.0, "isl_mean": 900, "osl_mean": 8, "engine": engine, "block_size": 64,
        "events": ev, "kv_transfer_bandwidth": 10.0, "kv_bytes_per_token": 131072,
    }))
    assert conform_main([str(ev)]) == 0
    assert "CONFORMS" in capsys.readouterr().out


def test_canceled_and_rejected_handoffs_log_conforming_cleanups(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dmocker.replay.workload import SyntheticSpec, SyntheticWorkload

    wl = SyntheticWorkload(SyntheticSpec(requests=3, rate=100.0, isl_mean=600, osl_mean=3, spread=0.0))
    r = fake_run(wl, bandwidth=1.0, kv_bytes=1_000_000, inject=[(100.0, 0, Canceled), (15.0, 1, Canceled)])
    ev = tmp_path / "events.jsonl"
    import json

    ev.write_text('{"dmocker_event_log":"1.0"}\n' + "".join(json.dumps(e) + "\n" for e in r.events))
    assert conform_main([str(ev)]) == 0, capsys.readouterr().out
