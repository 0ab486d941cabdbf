"""``dmocker.engines.common.kv_events`` (C-level grouping) against a plain per-element twin."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dmocker.engines.common import kv_events
from dmocker.engines.hashing import HASH_BITS
from dmocker.engines.interface import KvEvent, KvRemoved, KvStored


def _plain(encoded: list[int]) -> tuple[KvEvent, ...]:
    """One element at a time: close the run when the sign changes."""
    out: list[KvEvent] = []
    run: list[int] = []
    stored = True
    for e in encoded:
        if run and (e >= 0) != stored:
            out.append(KvStored(tuple(run)) if stored else KvRemoved(tuple(run)))
            run = []
        stored = e >= 0
        run.append(e if stored else ~e)
    if run:
        out.append(KvStored(tuple(run)) if stored else KvRemoved(tuple(run)))
    return tuple(out)


_HASH = st.integers(0, (1 << HASH_BITS) - 1)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), _HASH), max_size=60))
def test_grouping_matches_the_plain_loop(changes: list[tuple[bool, int]]) -> None:
    encoded = [h if stored else ~h for stored, h in changes]
    assert kv_events(encoded) == _plain(encoded)


def test_single_kind_lists_are_one_event() -> None:
    assert kv_events([3, 1, 2]) == (KvStored((3, 1, 2)),)
    assert kv_events([~3, ~0]) == (KvRemoved((3, 0)),)
    assert kv_events([]) == ()
    assert kv_events([5, ~5, 5]) == (KvStored((5,)), KvRemoved((5,)), KvStored((5,)))
