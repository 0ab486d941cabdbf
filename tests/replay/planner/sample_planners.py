"""Planners loaded by MODULE:CLASS in the CLI tests (well-behaved and broken ones)."""

from __future__ import annotations

from dmocker.replay import PlannerMetrics, ScalingDecision


class Stepper:
    """Every 200 ms alternates the pools between 1 and 3 workers (exercises both directions)."""

    def initial_tick_ms(self) -> float:
        return 200.0

    def on_tick(self, metrics: PlannerMetrics) -> ScalingDecision:
        n = 3 if metrics.tick % 2 == 0 else 1
        return ScalingDecision(n, 4 - n, metrics.now_ms + 200.0)


class RaisesOnSecondTick:
    def initial_tick_ms(self) -> float:
        return 100.0

    def on_tick(self, metrics: PlannerMetrics) -> ScalingDecision:
        if metrics.tick == 1:
            raise RuntimeError("boom")
        return ScalingDecision(next_tick_ms=metrics.now_ms + 100.0)


class NegativeCount:
    def initial_tick_ms(self) -> float:
        return 100.0

    def on_tick(self, metrics: PlannerMetrics) -> ScalingDecision:
        return ScalingDecision(prefill_workers=-1)


class HugeCount:
    def initial_tick_ms(self) -> float:
        return 100.0

    def on_tick(self, metrics: PlannerMetrics) -> ScalingDecision:
        return ScalingDecision(decode_workers=10**9)


class FloatCount:
    def initial_tick_ms(self) -> float:
        return 100.0

    def on_tick(self, metrics: PlannerMetrics) -> ScalingDecision:
        return ScalingDecision(decode_workers=2.0)  # type: ignore[arg-type]


class NanNextTick:
    def initial_tick_ms(self) -> float:
        return 100.0

    def on_tick(self, metrics: PlannerMetrics) -> ScalingDecision:
        return ScalingDecision(next_tick_ms=float("nan"))


class BadInitialTick:
    def initial_tick_ms(self) -> str:
        return "soon"

    def on_tick(self, metrics: PlannerMetrics) -> ScalingDecision:
        return ScalingDecision()


class NeedsArgs:
    def __init__(self, x: int) -> None:
        self.x = x
