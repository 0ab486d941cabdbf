"""The dynamo-records adapter: mapping, equal timestamps in spec order, real records clean."""

from __future__ import annotations

import json
from pathlib import Path

from dmocker.conformance.dynamo_records import ConvertedRecord, record_events
from dmocker.conformance.events import LogError
from dmocker.conformance.stream import check_dynamo_records
from dmocker.conformance.validator import ConformanceResult, Validator, ViolationKind
from dmocker.handoff import HandoffOrder

SF = HandoffOrder.SOURCE_FIRST
DF = HandoffOrder.DESTINATION_FIRST
RECORDS = Path(__file__).resolve().parents[2] / "conformance" / "dynamo-records"


def rec(**fields: object) -> dict[str, object]:
    base: dict[str, object] = {
        "uuid": "u1", "prefill_admit_ms": 0.0, "source_held_ms": 10.0, "destination_reserved_ms": 10.0,
        "destination_activated_ms": 20.0, "decode_admit_ms": 20.0, "source_released_ms": 20.0,
        "terminal_status": "completed",
    }
    base.update(fields)
    return base


def check(records: list[dict[str, object]], order: HandoffOrder) -> ConformanceResult:
    v = Validator(order)
    check_dynamo_records([json.dumps(r) + "\n" for r in records], v, order, keep_going=True)
    return v.result()


def test_equal_timestamps_follow_the_spec_order() -> None:
    out = record_events(rec(), 1, SF)
    assert isinstance(out, ConvertedRecord)
    assert [e.symbol for e in out.events] == [
        "prefill_submitted", "source_held", "destination_accepted", "destination_reserved", "transfer_started",
        "transfer_completed", "destination_activated", "source_released", "completed:success"]
    # SGLang: reserved at the admission time reads as reserve-then-prefill.
    df = record_events(rec(destination_reserved_ms=0.0), 1, DF)
    assert isinstance(df, ConvertedRecord)
    assert [e.symbol for e in df.events][:4] == ["destination_accepted", "destination_reserved", "prefill_submitted", "source_held"]
    assert check([rec(destination_reserved_ms=0.0)], DF).exit_code == 0


def test_reserved_before_held_is_a_violation_under_vllm_only() -> None:
    early = rec(destination_reserved_ms=5.0)
    r = check([early], SF)
    assert r.exit_code == 1 and r.violations[0].event == "destination_accepted"
    # destination-first reserves first (the prefill is admitted at or after the reservation)
    assert check([rec(destination_reserved_ms=5.0, prefill_admit_ms=5.0)], DF).exit_code == 0
    assert check([early], DF).violations[0].event == "prefill_submitted"  # admitted at 0, before the reservation


def test_decode_before_activation_and_truncated_records() -> None:
    r = check([rec(decode_admit_ms=19.0)], SF)
    assert [v.kind for v in r.violations] == [ViolationKind.DECODE_BEFORE_ACTIVATION]
    failed = rec(destination_reserved_ms=None, destination_activated_ms=None, decode_admit_ms=None,
                 source_released_ms=None, terminal_status="failed")
    r = check([failed, rec(uuid="u2", terminal_status="rejected", source_held_ms=None, destination_reserved_ms=None,
                             destination_activated_ms=None, decode_admit_ms=None, source_released_ms=None)], SF)
    assert r.exit_code == 0 and r.verdicts["truncated"] == 2 and r.truncated_by_status == {"failed": 1, "rejected": 1}
    # an unfinished record (no terminal status) is a leak
    assert check([rec(terminal_status=None, source_released_ms=None)], SF).verdicts["incomplete"] == 1


def test_bad_records_name_the_field() -> None:
    cases: list[tuple[dict[str, object], str]] = [({"uuid": None}, "uuid"), ({"source_held_ms": "x"}, "source_held_ms"),
                         ({"terminal_status": "done"}, "terminal_status"), ({"prefill_admit_ms": -1}, "prefill_admit_ms")]
    for fields, name in cases:
        out = record_events(rec(**fields), 3, SF)
        assert isinstance(out, LogError) and out.field == name and out.line == 3


def test_repeated_uuid_is_an_event_after_completion() -> None:
    r = check([rec(), rec()], SF)
    assert r.violations[0].kind is ViolationKind.EVENT_AFTER_COMPLETION and r.violations[0].line == 2


def test_real_reference_records_validate_clean() -> None:
    for name, order in (("vllm.jsonl", SF), ("sglang.jsonl", DF)):
        v = Validator(order)
        with open(RECORDS / name, encoding="utf-8") as handle:
            check_dynamo_records(handle, v, order, keep_going=False)
        r = v.result()
        assert r.exit_code == 0 and r.verdicts["conforms"] == r.handoffs >= 16, name
    v = Validator(SF)
    with open(RECORDS / "vllm-reserved-before-held.jsonl", encoding="utf-8") as handle:
        check_dynamo_records(handle, v, SF, keep_going=False)
    r = v.result()
    assert r.exit_code == 1 and r.violations[0].event == "destination_accepted" and r.violations[0].seen == ("prefill_submitted",)
