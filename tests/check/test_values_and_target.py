"""The value set holds the adversarial values it promises; targets load or fail by name."""

from __future__ import annotations

import math

import pytest

from dmocker.check import DEFAULT_VALUES, TargetError, load_target, target_from_factory
from dmocker.check.values import HUGE_TOKENS, TINY_BANDWIDTH_DM
from dmocker.handoff import HandoffCoordinator, HandoffOrder, TransferTimingMode


def test_tiny_bandwidth_overflows_only_the_scheduled_delay() -> None:
    assert TINY_BANDWIDTH_DM.mode is TransferTimingMode.DESTINATION_MISSING
    full = TINY_BANDWIDTH_DM.full_prompt_delay_ms()
    assert full is not None and math.isfinite(full) and full == 0.0
    assert TINY_BANDWIDTH_DM.delay_ms(HUGE_TOKENS) == math.inf
    assert TINY_BANDWIDTH_DM.delay_ms(0) == 0.0


def test_value_set_covers_the_issue_list() -> None:
    timings = [t for c in DEFAULT_VALUES.configs for t in c.timings]
    bandwidths = [t.bandwidth_gb_s for t in timings]
    assert None in bandwidths and 0.0 in bandwidths and 1e-300 in bandwidths
    assert any(b is not None and math.isnan(b) for b in bandwidths)
    assert any(b is not None and b < 0 for b in bandwidths)
    assert any(t.kv_bytes_per_token is None for t in timings)  # no model
    tokens = {n for c in DEFAULT_VALUES.configs for n in c.tokens}
    assert {0, 8, 2**60} <= tokens
    fallbacks = {c.effective_fallback for c in DEFAULT_VALUES.configs}
    assert {0.0, 1.0, math.inf} <= fallbacks
    # the non-finite fallback is assigned after construction (the constructor rejects it)
    assert any(c.after_construction == math.inf and c.fallback_transfer_delay_ms == 0.0 for c in DEFAULT_VALUES.configs)
    with pytest.raises(ValueError):
        HandoffCoordinator("h", HandoffOrder.SOURCE_FIRST, fallback_transfer_delay_ms=math.inf)


def test_default_target_uses_snapshot_hook() -> None:
    t = load_target(None)
    assert t.snapshot_mode == "snapshot()"
    obj = t.make("h", HandoffOrder.SOURCE_FIRST, DEFAULT_VALUES.configs[0])
    copy = t.clone(obj)
    copy.start()
    assert t.snapshot(obj) != t.snapshot(copy)  # the clone is independent
    assert obj._c is copy._c  # type: ignore[attr-defined]  # shared compiled table not copied


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("no_such_module_xyz:Coordinator", "cannot import module 'no_such_module_xyz'"),
        ("dmocker.handoff:NoSuchClass", "has no attribute 'NoSuchClass'"),
        ("dmocker.handoff", "expected package.module:Class"),
        ("dmocker.handoff:TransferTiming", "missing method start()"),
    ],
)
def test_bad_targets_are_named(text: str, needle: str) -> None:
    with pytest.raises(TargetError) as info:
        load_target(text)
    assert needle in str(info.value)


class _NoOutcomes:
    def __init__(self, handoff_id: object, order: HandoffOrder, *, fallback_transfer_delay_ms: float = 0.0) -> None:
        self.fallback_transfer_delay_ms = fallback_transfer_delay_ms

    def start(self) -> list[object]:
        return []

    def on_fact(self, fact: object) -> list[object]:
        return []

    is_complete = False
    completion = None


def test_missing_method_is_named() -> None:
    with pytest.raises(TargetError) as info:
        target_from_factory(_NoOutcomes)
    assert "on_action_outcome" in str(info.value)


class _Broken:
    def __init__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    def start(self) -> None: ...

    def on_fact(self, fact: object) -> None: ...

    def on_action_outcome(self, action_id: int, outcome: object) -> None: ...


def test_constructor_failure_is_reported() -> None:
    with pytest.raises(TargetError) as info:
        target_from_factory(_Broken)
    assert "RuntimeError: boom" in str(info.value)
