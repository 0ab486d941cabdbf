"""The one event-log writer: what a coordinator step makes observable, as JSONL lines.

The spec's compiled table says which observable kinds each step produces (``Step.logs``, from
the transitions' and rules' ``log``); the spec's ``observable`` section says on which side each
kind happens (``sides``: the ``worker`` field names a prefill worker for source kinds, a decode
worker for destination kinds) and which kind carries the completion (``completion_kind``).
The kinds a worker logs on its own clock (``observable.worker_kinds``) go through
:meth:`EventLogWriter.log_worker`.  Both the cluster replay and the conformance fixture write
their logs through
:class:`EventLogWriter`, so a log line is shaped in one place (spec/event-log.schema.json).

A line is compact JSON with sorted keys and times rounded to 6 decimals (as every dmocker
JSONL output): ``{"detail"?, "engine", "event", "handoff", "t_ms", "tokens"?, "worker"?}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Final

from dmocker.handoff._coordinator import HandoffCoordinator
from dmocker.handoff._spec import ProtocolSpec
from dmocker.handoff._spec_load import load_spec
from dmocker.handoff._table import STEP_TAG, Step
from dmocker.handoff._types import DestinationReserved, Fact, SourceHeld

_dumps: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False).encode


class EventLogWriter:
    """Writes the observable events of coordinator steps through ``write`` (one line each).

    ``log`` is called after the coordinator handled an input, with the state it was in before
    (``prev``) and the input's event name (``SourceHeld``, ``SubmitPrefill.Submitted``, ...);
    a step that produces no observable kind writes nothing.
    """

    __slots__ = ("_write", "_engine", "_source", "_destination", "_completion_kind", "_worker_sides")

    def __init__(self, write: Callable[[str], object], engine: str, spec: ProtocolSpec | None = None) -> None:
        the_spec = spec if spec is not None else load_spec()
        self._write = write
        self._engine = engine
        self._source = frozenset(the_spec.kinds_on_side("source"))
        self._destination = frozenset(the_spec.kinds_on_side("destination"))
        self._completion_kind = the_spec.completion_kind
        self._worker_sides = {k.name: k.side for k in the_spec.worker_kinds}

    def log(
        self,
        t_ms: float,
        coord: HandoffCoordinator,
        prev: int,
        event: str,
        fact: Fact | None,
        source_worker: int = -1,
        destination_worker: int = -1,
    ) -> tuple[str, ...]:
        """Write the kinds the step ``event`` from state ``prev`` produced (workers: -1 = none);
        returns them."""
        table = coord.table
        entry = table.rows[prev][table.event_index(event)]
        if entry.tag != STEP_TAG:
            return ()
        assert isinstance(entry, Step)
        r = round(t_ms, 6)
        t = 0.0 if r == 0 else r
        for kind in entry.logs:
            line: dict[str, object] = {"handoff": coord.handoff_id, "t_ms": t, "event": kind, "engine": self._engine}
            if kind in self._source and source_worker >= 0:
                line["worker"] = f"prefill-{source_worker}"
            elif kind in self._destination and destination_worker >= 0:
                line["worker"] = f"decode-{destination_worker}"
            if isinstance(fact, SourceHeld):
                line["tokens"] = int(fact.transfer_timing.full_prompt_tokens)
            elif isinstance(fact, DestinationReserved):
                line["tokens"] = int(fact.transferable_prompt_tokens)
            if kind == self._completion_kind:
                completion = coord.completion
                assert completion is not None
                line["detail"] = completion.value
            self._write(_dumps(line) + "\n")
        return entry.logs

    def log_worker(self, t_ms: float, handoff_id: int | str, kind: str, worker: int = -1) -> None:
        """Write a kind a worker logs on its own (spec ``observable.worker_kinds``): a timer fired,
        a fault hit it.  ``worker`` (-1: none) is on the kind's side; an unknown kind is a ValueError."""
        side = self._worker_sides.get(kind)
        if side is None:
            raise ValueError(f"{kind!r} is not a worker kind of the spec (observable.worker_kinds: "
                             f"{', '.join(sorted(self._worker_sides))})")
        r = round(t_ms, 6)
        line: dict[str, object] = {"handoff": handoff_id, "t_ms": 0.0 if r == 0 else r, "event": kind,
                                   "engine": self._engine}
        if worker >= 0 and side == "source":
            line["worker"] = f"prefill-{worker}"
        elif worker >= 0 and side == "destination":
            line["worker"] = f"decode-{worker}"
        self._write(_dumps(line) + "\n")


__all__ = ["EventLogWriter"]
