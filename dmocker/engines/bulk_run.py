"""A bulk decode run's course, the same in both engine mocks: started, cut, finished.

When a decode worker's batch is determined until it next changes, the worker computes many
passes at once: a *bulk run* (:meth:`~dmocker.engines.interface.EngineWorker.start_pass` with
``bulk``), whose completion carries every pass's end time.  What becomes of a run is the same
in both engines, and :class:`BulkRuns` does it once: it takes the run's blocks from the pool so
that they can be given back, hands out the run's completion, cuts the run where the per-pass
simulation would be when something reaches the worker mid-run
(:meth:`~dmocker.engines.interface.EngineWorker.split_run`: the blocks of the dropped passes go
back, the completion ends with the last kept pass), completes the requests the run's last pass
finishes once that pass is known to have started, and tells the KV probe how many blocks the
run holds ahead of the per-pass simulation.

What a run is, and how an engine's state moves back to a cut, is the engine's
:class:`RunModel`: the vLLM lockstep batch (:mod:`dmocker.engines.vllm_bulk`) or the SGLang
lazy batch (:mod:`dmocker.engines.sglang_bulk`).  Differential tests replay random workloads
pass by pass and in bulk and demand identical output.
"""

from __future__ import annotations

from abc import abstractmethod

import numpy as np
import numpy.typing as npt
from mypy_extensions import trait

from dmocker.engines.block_pool import BlockPool
from dmocker.engines.common import cut_completion, cut_point
from dmocker.engines.interface import Admission, BatchDelta, IdArray, PassCompletion, PassPlan
from dmocker.engines.outbox import Outbox

__all__ = ["BulkRuns", "RunModel", "RunStart"]


class RunStart:
    """A run an engine has started (:meth:`RunModel.begin`)."""

    __slots__ = ("times", "need", "admissions", "emitted", "delta", "finished", "joined", "tail")

    def __init__(self, times: npt.NDArray[np.float64], need: int, admissions: tuple[Admission, ...],
                 emitted: IdArray, delta: BatchDelta | None, finished: tuple[int, ...], joined: bool,
                 tail: bool) -> None:
        self.times = times  # the end time of each pass (at least two)
        self.need = need  # blocks its passes take
        self.admissions = admissions  # requests its first pass admits
        self.emitted = emitted  # the batch: one token each per pass
        self.delta = delta  # the batch's change since the array handed out before
        self.finished = finished  # requests its last pass finishes (``tail``)
        self.joined = joined  # its first pass admits activated requests
        self.tail = tail  # its last pass finishes requests


@trait
class RunModel:
    """An engine's bulk runs: whether one can start, its passes, and its cut.  A trait rather
    than a ``typing.Protocol``: compiled, its methods are called directly."""

    @abstractmethod
    def begin(self, now_ms: float) -> RunStart | None:
        """Start a run at ``now_ms`` if the batch allows one of two passes or more, as far as the
        pool surely covers their blocks (None: no run, nothing changed).  The engine's state
        moves past the run's passes, but for the requests its last pass finishes
        (:meth:`end_tail`); the blocks are taken by the caller."""

    @abstractmethod
    def rewind(self, keep: int, total: int) -> int:
        """The run of ``total`` passes is cut after its first ``keep``: the engine's state moves
        back to after them.  Returns the blocks the kept passes take."""

    @abstractmethod
    def blocks_kept(self, keep: int) -> int:
        """The blocks the run's first ``keep`` passes take (changes nothing)."""

    @abstractmethod
    def end_tail(self) -> None:
        """The run's last pass has started: the requests it finishes complete."""

    @abstractmethod
    def tail_blocks(self) -> int:
        """The blocks :meth:`end_tail` will free: a held source keeps its blocks; a cached block
        stays in use while someone else still references it."""


class BulkRuns:
    """The bulk run in flight on a worker, if any (module docstring)."""

    def __init__(self, model: RunModel, pool: BlockPool, outbox: Outbox) -> None:
        self._model = model
        self._pool = pool
        self._outbox = outbox
        self._times: npt.NDArray[np.float64] | None = None  # the run in flight's pass end times
        self._start_ms = 0.0
        self._taken = 0  # blocks it took
        self._free = 0  # free blocks before it
        self._evicted: list[int] = []  # cached blocks evicted for it, oldest first
        self.tail = False  # its last pass finishes requests, not applied yet
        self.runs = 0
        self.joins = 0  # runs whose first pass admits activated requests
        self.tails = 0  # runs whose last pass finishes requests

    def start(self, now_ms: float) -> PassPlan | None:
        """A run from ``now_ms``, if the engine's batch allows one (:meth:`RunModel.begin`)."""
        run = self._model.begin(now_ms)
        if run is None:
            return None
        times = run.times
        self._free, self._evicted = self._pool.take_undoable(run.need)
        self._times = times
        self._start_ms = now_ms
        self._taken = run.need
        self.tail = run.tail
        self.runs += 1
        self.joins += run.joined
        self.tails += run.tail
        end = float(times[-1])
        emitted = run.emitted
        self._outbox.start(PassCompletion(end_ms=end, emitted=emitted, finished=run.finished, run_times=times,
                                          delta=run.delta))
        return PassPlan(start_ms=now_ms, end_ms=end, admissions=run.admissions, decode_tokens=len(emitted),
                        last_start_ms=float(times[-2]))

    def finish(self) -> None:
        """The run's completion is due (the worker's ``finish_pass``): no run is in flight any
        more, and the requests its last pass finishes complete."""
        self._times = None
        if self.tail:
            self._end_tail()

    def _end_tail(self) -> None:
        self.tail = False
        self._model.end_tail()

    def split(self, now_ms: float, started: bool) -> tuple[float, float] | None:
        """Cut the run in flight where the per-pass simulation is at ``now_ms``
        (:meth:`~dmocker.engines.interface.EngineWorker.split_run`)."""
        times = self._times
        if times is None:
            return None
        total = int(times.shape[0])
        keep = cut_point(times, now_ms, started)
        if keep >= total:
            if self.tail:
                self._end_tail()
            return None
        self.tail = False  # the finishing pass was cut off: they keep running
        kept_blocks = self._model.rewind(keep, total)
        self._evicted = self._pool.untake(self._free, self._evicted, self._taken, kept_blocks)
        self._taken = kept_blocks
        outbox = self._outbox
        outbox.completion, kept, end = cut_completion(outbox.completion, times, keep)
        if keep < 2:
            self._times = None
            return end, self._start_ms
        self._times = kept
        return end, float(kept[-2])

    def blocks_ahead(self, at_ms: float) -> int:
        """KV blocks the run in flight holds beyond the per-pass simulation at ``at_ms``
        (:meth:`~dmocker.engines.interface.WorkerProbes.run_blocks_ahead`)."""
        times = self._times
        if times is None:
            return 0
        keep = cut_point(times, at_ms, True)
        if keep < int(times.shape[0]):
            return self._taken - self._model.blocks_kept(keep)
        # the whole run has started: per pass, its finishing requests have freed their blocks
        return self._model.tail_blocks() if self.tail else 0
