"""The fact payload values tests use, including the adversarial ones (shared by several tests)."""

from dmocker.handoff import TransferTiming, TransferTimingMode

FULL = TransferTimingMode.FULL_PROMPT
MISSING = TransferTimingMode.DESTINATION_MISSING

TIMINGS = (
    TransferTiming(FULL, 100),  # no model: fallback
    TransferTiming(FULL, 128, 1_000_000, 1.0),  # 128 ms
    TransferTiming(MISSING, 100, 1000, 1.0),
    TransferTiming(FULL, 100, 1024, 0.0),  # zero bandwidth: fallback
    TransferTiming(FULL, 100, 1024, float("nan")),
    TransferTiming(FULL, 100, 1024, -1.0),
    TransferTiming(FULL, 100, 1024, float("inf")),
    TransferTiming(MISSING, 0, 1 << 60, 1e-300),  # full-prompt finite, scheduled overflows
    TransferTiming(FULL, 1 << 60, 1 << 60, 1e-300),  # full-prompt delay infinite
    TransferTiming(MISSING, 10, 1000, 2.0, state_bytes=4096),
)
TOKENS = (0, 3, 100, 1 << 60)
FALLBACKS = (0.0, 1.0, float("inf"), float("nan"))
