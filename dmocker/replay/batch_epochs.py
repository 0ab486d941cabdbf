"""Token counts and last-token times of decode batches kept per batch, not per request.

Why: a decode pass emits one token for every member of a worker's batch, and a batch of ~85
requests changes by a join or a leave about every other pass.  Updating each member's count
and last-token time in the collector's arrays at every pass (a gather, a compare, a scatter and
an add over the batch) was the single largest cost of a synthetic replay.  Here a batch in an
*epoch* keeps one pass counter and one last-pass time; a member's count is its count when it
joined plus the passes since, and its last token time the batch's last pass time.  A pass
costs O(1) plus O(joins + leaves): engines say which ids joined and left
(:class:`~dmocker.engines.interface.BatchDelta`), and only those are written back (a leaver's
final values) or read (a joiner's previous token time, for its gap).

The arrays stay the truth for everyone else: members are written back when they leave, when
their batch falls back to a full pass (no delta), and before the arrays are read whole
(:meth:`BatchEpochs.settle_all`); single readers peek (:meth:`BatchEpochs.tokens_of`).  The
gap samples are those of the per-member path, sample for sample: continuing members all last
emitted at the batch's previous pass, so they are one weighted sample, and the same rule
decides whether joiners join that sample or every gap goes in one by one
(``tests/replay/test_batch_epochs.py`` runs both paths on random batches and compares).
"""

from __future__ import annotations

import array
from typing import SupportsIndex, cast

import numpy as np
import numpy.typing as npt

from dmocker.engines.interface import BatchDelta

from .sketch import GapSketches

__all__ = ["BatchEpochs"]

# Request ids are keys and indexes here as the int objects the callers hold (``object``; an
# array index through a ``SupportsIndex`` cast), so they are not converted again at every use.


class _Epoch:
    """One worker's batch: members -> the pass count when their array values were current."""

    __slots__ = ("passes", "last_t", "mark")

    def __init__(self, last_t: float) -> None:
        self.passes = 0
        self.last_t = last_t
        self.mark: dict[object, int] = {}


class BatchEpochs:
    """The epochs of every decode worker, over the collector's per-request arrays."""

    __slots__ = ("_tokens_a", "_last_a", "_gaps", "_epochs", "_member", "applied")

    def __init__(self, tokens_a: array.array[int], last_a: array.array[float], gaps: GapSketches) -> None:
        self._tokens_a = tokens_a
        self._last_a = last_a
        self._gaps = gaps
        self._epochs: dict[int, _Epoch] = {}  # source -> its open epoch
        self._member: dict[object, _Epoch] = {}  # request -> the epoch it is a member of
        self.applied = 0  # passes applied here (tests, telemetry)

    def active(self) -> bool:
        return bool(self._member)

    # --- readers -------------------------------------------------------------------------------

    def tokens_of(self, rid: object) -> int:
        ep = self._member.get(rid)
        if ep is None:
            return self._tokens_a[cast(SupportsIndex, rid)]
        return self._tokens_a[cast(SupportsIndex, rid)] + ep.passes - ep.mark[rid]

    def last_of(self, rid: object) -> float:
        ep = self._member.get(rid)
        if ep is None or ep.passes == ep.mark[rid]:
            return self._last_a[cast(SupportsIndex, rid)]
        return ep.last_t

    def settle_all(self) -> None:
        """Write every member's values into the arrays (members stay members)."""
        tokens_a, last_a = self._tokens_a, self._last_a
        for ep in self._epochs.values():
            p, t = ep.passes, ep.last_t
            mark = ep.mark
            for rid, m in mark.items():
                if m != p:
                    at = cast(SupportsIndex, rid)
                    tokens_a[at] += p - m
                    last_a[at] = t
                    mark[rid] = p

    def settle(self, rids: list[int]) -> None:
        """Write back and release those of ``rids`` that are members (before a full pass reads
        them from the arrays)."""
        member = self._member
        for rid in cast("list[object]", rids):
            if rid in member:
                self._leave(rid)

    # --- passes --------------------------------------------------------------------------------

    def close(self, source: int) -> None:
        """``source``'s next pass is a full one: write its members back and end its epoch."""
        ep = self._epochs.pop(source, None)
        if ep is not None:
            for rid in list(ep.mark):
                self._leave(rid)

    def on_pass(self, source: int, ids: npt.NDArray[np.int64], seen: tuple[npt.NDArray[np.int64], float],
                delta: BatchDelta | None, first: float, end: float, more: int) -> bool:
        """A pass of ``source`` emitting ``ids`` (at ``first``, its run ending at ``end`` after
        ``more`` further passes), ``seen`` the array and time of its previous pass.  Applied
        here (True) when ``ids`` is that array or ``delta`` leads from it to ``ids``; else the
        epoch is closed (False) and the caller runs the full pass."""
        unchanged = ids is seen[0]
        if not unchanged and (delta is None or delta.ids is not ids or delta.base is not seen[0]):
            self.close(source)
            return False
        ep = self._epochs.get(source)
        if ep is None:
            if unchanged:
                return False  # no epoch to keep cheap: the caller's same-array path is O(1)-ish
            ep = self._open(source, seen)
        t0 = ep.last_t
        if unchanged:
            self._gaps.add_same(first - t0, len(ids))
        else:
            assert delta is not None
            self._changed(ep, delta, first, t0)
        ep.passes += more + 1
        ep.last_t = end
        self.applied += 1
        return True

    def _open(self, source: int, seen: tuple[npt.NDArray[np.int64], float]) -> _Epoch:
        """An epoch for the batch that emitted ``seen``: its members' array values are current
        (a full pass wrote them)."""
        ep = _Epoch(seen[1])
        mark = ep.mark
        member = self._member
        for rid in seen[0].tolist():
            if rid in member:
                self._leave(rid)
            mark[rid] = 0
            member[rid] = ep
        self._epochs[source] = ep
        return ep

    def _changed(self, ep: _Epoch, delta: BatchDelta, first: float, t0: float) -> None:
        member = self._member
        left = cast("list[object]", delta.left)
        joined = cast("list[object]", delta.joined)
        for rid in left:
            if member.get(rid) is ep:
                self._leave(rid)
        last_a = self._last_a
        c = len(ep.mark)  # continuing members: all last emitted at t0
        prev: list[float] = []
        for rid in joined:
            if rid in member:
                self._leave(rid)
            p = last_a[cast(SupportsIndex, rid)]
            if p == p:  # not NaN: the joiner has a previous token
                prev.append(p)
        # The per-member rule: one weighted sample if every previous token time is the same,
        # else one sample per member.
        n = c + len(prev)
        if n:
            v = t0 if c else prev[0]
            same = True
            for p in prev:
                if p != v:
                    same = False
                    break
            if same:
                self._gaps.add_same(first - v, n)
            else:
                self._gaps.add_split(first, t0, c, prev)
        mark = ep.mark
        p0 = ep.passes
        for rid in joined:
            mark[rid] = p0
            member[rid] = ep

    def _leave(self, rid: object) -> None:
        ep = self._member.pop(rid)
        m = ep.mark.pop(rid)
        d = ep.passes - m
        if d:
            at = cast(SupportsIndex, rid)
            self._tokens_a[at] += d
            self._last_a[at] = ep.last_t
