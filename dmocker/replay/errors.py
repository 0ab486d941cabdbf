"""The replay's two run-time errors, re-exported by :mod:`dmocker.replay.events`.

Why their own module: :mod:`.events` is compiled by mypyc (``setup.py``), and mypyc cannot
compile a subclass of a built-in exception as a native class; kept here, interpreted, they
stay ordinary exception classes that users catch and tests raise.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["DeadEndError", "ReplayInvariantError"]


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
