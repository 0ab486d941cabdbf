"""The time every part of the runtime reads.

Why an object of its own: the parts (coordinator boundary, executor, pass scheduler, ...) need
"now" but must not own time: the replay's event loop moves this clock from event to event
(virtual time); a live cluster would move it with the wall clock.
"""

from __future__ import annotations

__all__ = ["Clock"]


class Clock:
    """The current time in milliseconds; only the driver of a run sets it."""

    __slots__ = ("now_ms",)

    def __init__(self, now_ms: float = 0.0) -> None:
        self.now_ms = now_ms
