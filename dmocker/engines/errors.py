"""The engines' command error, re-exported by :mod:`dmocker.engines.interface`.

Why its own module: the engine interface is compiled by mypyc (``setup.py``), and mypyc cannot
compile a subclass of a built-in exception as a native class; kept here, interpreted, it stays
an ordinary ``ValueError`` that the runtime catches and tests raise.
"""

from __future__ import annotations

__all__ = ["EngineCommandError"]


class EngineCommandError(ValueError):
    """A command the engine refuses (e.g. a prompt larger than the destination pool)."""
