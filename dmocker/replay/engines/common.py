"""Small helpers shared by the vLLM and SGLang mocks."""

from __future__ import annotations

from typing import Sequence

from dmocker.replay.engines.interface import KvEvent, KvRemoved, KvStored

__all__ = ["kv_events", "ceil_div"]


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def kv_events(encoded: Sequence[int]) -> tuple[KvEvent, ...]:
    """Group an ordered list of encoded cache changes (``h`` stored, ``~h`` removed) into runs of
    KvStored / KvRemoved, keeping their order (a hash evicted then re-stored stays present)."""
    out: list[KvEvent] = []
    run: list[int] = []
    stored = True
    for e in encoded:
        is_stored = e >= 0
        if run and is_stored != stored:
            out.append(KvStored(tuple(run)) if stored else KvRemoved(tuple(run)))
            run = []
        stored = is_stored
        run.append(e if is_stored else ~e)
    if run:
        out.append(KvStored(tuple(run)) if stored else KvRemoved(tuple(run)))
    return tuple(out)
