"""The replay's run-time errors.

Why their own module: the compiled core raises them, and mypyc cannot compile a subclass of a
built-in exception as a native class; kept here, interpreted, they stay ordinary exception
classes that users catch and tests raise, and the CLI can catch them without importing the
parts that raise them (the planner's modules, for one).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["DeadEndError", "PlannerError", "ReplayInvariantError"]


class ReplayInvariantError(RuntimeError):
    """The runtime reached a state its own rules forbid (a bug, never bad user input)."""


class DeadEndError(RuntimeError):
    """Work is left but no future event can ever make progress.

    The reference reports only a count; we name the stuck requests and what they wait for,
    because a dead end is almost always a configuration the engines cannot serve (for example
    a prompt that never fits), and the user needs to know which one.
    """

    def __init__(self, now_ms: float, stuck: Sequence[str], why: str = "") -> None:
        self.now_ms = now_ms
        self.stuck = tuple(stuck)
        shown = ", ".join(self.stuck[:10])
        more = f" (+{len(self.stuck) - 10} more)" if len(self.stuck) > 10 else ""
        super().__init__(
            f"replay reached a dead end at t={now_ms:.3f} ms with {len(self.stuck)} "
            f"request(s) unable to progress{why}: {shown}{more}"
        )


class PlannerError(RuntimeError):
    """A planner raised or answered something invalid during the run (exit 1).

    ``tick`` is the tick index and ``now_ms`` its simulated time.
    """

    def __init__(self, message: str, *, tick: int, now_ms: float) -> None:
        self.tick = tick
        self.now_ms = now_ms
        super().__init__(f"planner tick {tick} at t={now_ms:.3f} ms: {message}")
