"""``dmocker.engines.common.kv_events`` (chunk merging) against a plain per-element twin."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from hypothesis import given, settings
from hypothesis import strategies as st

from dmocker.engines.common import BatchIds, kv_events
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


def _chunks(changes: list[tuple[bool, int]], cuts: list[bool]) -> list[tuple[bool, tuple[int, ...]]]:
    """The changes as a pool records them: consecutive changes of one kind in one chunk, cut
    before change i where ``cuts[i]`` (several calls of one kind in a row)."""
    out: list[tuple[bool, tuple[int, ...]]] = []
    for i, (stored, h) in enumerate(changes):
        if out and out[-1][0] == stored and not (i < len(cuts) and cuts[i]):
            out[-1] = (stored, out[-1][1] + (h,))
        else:
            out.append((stored, (h,)))
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), _HASH), max_size=60), st.lists(st.booleans(), max_size=60))
def test_grouping_matches_the_plain_loop(changes: list[tuple[bool, int]], cuts: list[bool]) -> None:
    encoded = [h if stored else ~h for stored, h in changes]
    assert kv_events(_chunks(changes, cuts)) == _plain(encoded)


def test_neighbouring_chunks_of_one_kind_are_one_event() -> None:
    assert kv_events([(True, (3, 1)), (True, (2,))]) == (KvStored((3, 1, 2)),)
    assert kv_events([(False, (3, 0))]) == (KvRemoved((3, 0)),)
    assert kv_events([]) == ()
    assert kv_events([(True, (5,)), (False, (5,)), (True, (5,))]) == (
        KvStored((5,)), KvRemoved((5,)), KvStored((5,)))
    assert kv_events([(False, (1, 2)), (False, (3,)), (True, (4,))]) == (KvRemoved((1, 2, 3)), KvStored((4,)))


@given(st.lists(st.tuples(st.sampled_from(["add", "extend", "remove"]), st.integers(0, 40)), max_size=60))
def test_batch_ids_follow_a_plain_list(ops: list[tuple[str, int]]) -> None:
    """BatchIds keeps its ids in batch order like a list, hands out the same array while its
    ids are unchanged and a new one after any change, and every array it hands out keeps the
    ids it had (later changes never write into it)."""
    ids, model = BatchIds([7, 8]), [7, 8]
    handed: list[tuple[list[int], npt.NDArray[np.int64]]] = []
    next_id = 100
    for op, k in ops:
        if op == "add":
            ids.append(next_id)
            model.append(next_id)
            next_id += 1
        elif op == "extend":
            new = list(range(next_id, next_id + k % 4))
            ids.extend(new)
            model.extend(new)
            next_id += k % 4
        elif model:
            rid = model[k % len(model)]
            ids.remove(rid)
            model.remove(rid)
        arr = ids.to_numpy()
        assert arr.dtype == np.int64 and arr.tolist() == model == ids.tolist() and len(ids) == len(model)
        assert ids.to_numpy() is arr  # unchanged: the same array
        if handed and (op != "remove" or handed[-1][0] != model) and (op != "extend" or k % 4):
            assert arr is not handed[-1][1]  # changed: a new array
        handed.append((list(model), arr))
    for snapshot, arr in handed:
        assert arr.tolist() == snapshot
