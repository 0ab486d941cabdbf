"""The one-request conformance fixture (the reference's ``run_handoff_conformance``)."""

from __future__ import annotations

import dataclasses

import pytest

from dmocker.conformance import fixture
from dmocker.handoff import HandoffOrder, TransferTimingMode


def _run(engine: str, mode: TransferTimingMode) -> fixture.FixtureVerdict:
    return fixture.run_fixture(engine, mode)


@pytest.mark.parametrize("mode", list(TransferTimingMode), ids=[m.value for m in TransferTimingMode])
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_fixture_passes_like_the_reference(engine: str, mode: TransferTimingMode) -> None:
    verdict = _run(engine, mode)
    c = verdict.capture
    assert verdict.ok, verdict.failures
    assert c.order is (HandoffOrder.SOURCE_FIRST if engine == "vllm" else HandoffOrder.DESTINATION_FIRST)
    assert (c.source_output_tokens, c.destination_output_tokens, c.completed_requests) == (1, 2, 1)
    assert c.stored_before_activation == 0 < c.stored_on_activation
    assert verdict.log.verdicts["conforms"] == 1


def test_validate_applies_every_rule() -> None:
    verdict = _run("vllm", TransferTimingMode.FULL_PROMPT)
    good = verdict.capture
    broken = {
        "order": HandoffOrder.DESTINATION_FIRST,
        "lifecycle": good.lifecycle[1:],
        "source_output_tokens": 2,
        "destination_output_tokens": 1,
        "completed_requests": 0,
        "stored_before_activation": 1,
        "stored_on_activation": 0,
        "repeated_activation_hashes_after_activation": 1,
        "source_drained": False,
        "destination_drained": False,
        "driver_drained": False,
    }
    for name, value in broken.items():
        failures = fixture.validate(dataclasses.replace(good, **{name: value}), verdict.log)
        assert failures, name


def test_trtllm_is_refused() -> None:
    with pytest.raises(ValueError, match="vllm and sglang"):
        fixture.run_fixture("trtllm")
