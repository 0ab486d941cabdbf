"""Any coordinator in the replay's loop: the reference semantics give a byte-identical report;
a coordinator that raises, breaks the protocol or never completes is reported (request, step)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
from pathlib import Path

import pytest

from dmocker.handoff import IssuedAction, SubmitPrefill
from dmocker.replay import ReplayConfig, run
from dmocker.replay.coordinators import CoordinatorFault
from dmocker.replay.faults import FaultPlan, Pool, WorkerCrash
from dmocker.check.mutant_catalogue import WrappedCoordinator

from .reference_coordinator import ReferenceCoordinator


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def _outputs(tmp: Path, tag: str, **kw: object) -> tuple[str, str, str]:
    """md5s of the report (its config without the coordinator, which is what differs), the
    per-request records and the event log."""
    report = run(ReplayConfig.from_values({
        "per_request": tmp / f"{tag}.jsonl", "events": tmp / f"{tag}-e.jsonl", **kw,
    }))
    config = {k: v for k, v in report.config.items() if k != "coordinator"}
    dataclasses.replace(report, config=config).write(tmp / f"{tag}.json")
    assert report.summary["invariants_ok"] is True, report.summary["invariant_breaks"]
    return _md5(tmp / f"{tag}.json"), _md5(tmp / f"{tag}.jsonl"), _md5(tmp / f"{tag}-e.jsonl")


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_reference_semantics_give_a_byte_identical_report(tmp_path: Path, engine: str) -> None:
    kw: dict[str, object] = dict(
        synthetic=80, engine=engine, block_size=64, kv_transfer_bandwidth=20.0, kv_bytes_per_token=200_000,
        faults=FaultPlan(cancel_rate=0.05, fail_rate=0.05, timeout_rate=0.05, seed=3,
                         crashes=(WorkerCrash(Pool.DECODE, 0, 3000.0),), restart_s=1.0),
    )
    ours = _outputs(tmp_path, "ours", **kw)
    theirs = _outputs(tmp_path, "ref", coordinator=ReferenceCoordinator, **kw)
    assert ours == theirs


def test_reference_by_module_path_matches_without_faults(tmp_path: Path) -> None:
    ours = _outputs(tmp_path, "ours", synthetic=40)
    theirs = _outputs(tmp_path, "ref", synthetic=40, coordinator="tests.replay.reference_coordinator:ReferenceCoordinator")
    assert ours == theirs


class Raises(WrappedCoordinator):
    def on_fact(self, fact: object) -> list[IssuedAction]:  # type: ignore[override]
        raise RuntimeError("boom")


class SubmitsTwice(WrappedCoordinator):
    def _translate(self, ia: IssuedAction) -> list[IssuedAction]:
        out = super()._translate(ia)
        if isinstance(ia.action, SubmitPrefill):
            out.append(self._invent(SubmitPrefill(self._hid)))
        return out


def test_a_raising_coordinator_is_reported_with_request_and_step() -> None:
    with pytest.raises(CoordinatorFault) as info:
        run(ReplayConfig.from_values({"synthetic": 5, "coordinator": Raises}))
    assert info.value.request_id == 0
    assert info.value.step == 3  # start, Submitted, then the first fact (SourceHeld)
    assert "raised RuntimeError: boom" in str(info.value)


def test_a_protocol_violation_is_caught_by_the_monitor() -> None:
    with pytest.raises(CoordinatorFault) as info:
        run(ReplayConfig.from_values({"synthetic": 5, "coordinator": SubmitsTwice}))
    assert info.value.invariant is not None
    assert info.value.request_id == 0 and info.value.step == 1


def test_a_coordinator_that_never_completes_fails_the_run(tmp_path: Path) -> None:
    from dmocker.check.mutant_catalogue.plausible import IgnoresTransferCompleted

    out = tmp_path / "r.json"
    report = run(ReplayConfig.from_values({"synthetic": 3, "coordinator": IgnoresTransferCompleted}))
    assert report.summary["invariants_ok"] is False
    breaks = report.summary["invariant_breaks"]
    assert isinstance(breaks, list) and breaks[0]["invariant"] == "coordinators_complete"  # type: ignore[index]
    report.write(out)
    assert out.exists()


def test_cli_exit_codes_for_coordinators(tmp_path: Path) -> None:
    from dmocker.cli.main import main

    out = tmp_path / "r.json"
    assert main(["replay", "--synthetic", "3", "--quiet", "--coordinator", "nope.nothing:X", "--out", str(out)]) == 2
    assert not out.exists()
    assert main(["replay", "--synthetic", "3", "--quiet", "--out", str(out),
                 "--coordinator", "dmocker.check.mutant_catalogue.plausible:IgnoresTransferCompleted"]) == 1
    assert out.exists()  # the report is written, marked failed
    assert '"invariants_ok": false' in out.read_text()
    assert os.path.getsize(out) > 0
