"""The bugs the workers' clocks produce in real code, as edits of the spec's worker machines.

Each mutant takes the ``workers`` section and returns it changed the way a buggy worker
behaves; :func:`run_clock_mutants` checks the mutated machines in the reference configuration
(``dmocker``, both orders) and reports which property catches each one.  Writing a mutant as an
edit of the data (not as a second implementation) keeps the spec the one description of what a
correct worker does.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Sequence

from dmocker.handoff import HandoffOrder, Rule, WorkersSpec, load_workers

from dmocker.check.clocks import ClockReport, check_clocks

REFERENCE = "dmocker"


@dataclass(frozen=True, slots=True)
class ClockMutant:
    name: str
    doc: str
    edit: Callable[[WorkersSpec], WorkersSpec]


def _free_without_failing(w: WorkersSpec) -> WorkersSpec:
    # The expiry frees the blocks under a read but leaves the read running.
    xfer = w.machine_index("transfer_engine")
    moves = tuple(
        dataclasses.replace(r, set=tuple((m, s) for m, s in r.set if m != xfer)) if r.name == "hold_expiry" else r
        for r in w.moves
    )
    return w.with_moves(moves)


def _retry_after_expiry(w: WorkersSpec) -> WorkersSpec:
    # A failed load is retried against the same source instead of failed or recomputed.
    xfer = w.machine_index("transfer_engine")
    template = next(r for r in w.moves if r.name == "load_failed")
    retry = dataclasses.replace(template, guard=dataclasses.replace(template.guard, params=()), set=((xfer, "transferring"),),
                                fact=None, doc="retry the load")
    i = w.moves.index(template)
    return w.with_moves(w.moves[:i] + (retry,) + w.moves[i:])


def _never_times_out(w: WorkersSpec) -> WorkersSpec:
    # The destination keeps its reservation for ever: no wait timeout, no heartbeat verdict.
    return w.with_moves(tuple(r for r in w.moves if r.name not in ("wait_timeout", "heartbeat_timeout")))


def _cancel_not_notifying(w: WorkersSpec) -> WorkersSpec:
    # CancelSource is acknowledged but never reaches the source worker.
    commands: list[Rule] = []
    for r in w.commands:
        if r.name == "CancelSource":
            r = dataclasses.replace(r, set=())
        commands.append(r)
    return w.with_commands(tuple(commands))


CLOCK_MUTANTS: tuple[ClockMutant, ...] = (
    ClockMutant("expiry_frees_without_failing_transfer",
                "the source's hold expiry frees its blocks without failing the transfer reading them", _free_without_failing),
    ClockMutant("decode_retries_load_after_expiry",
                "the destination retries a failed load from a source whose hold expired", _retry_after_expiry),
    ClockMutant("destination_never_times_out",
                "the destination never times out its reservation (no wait timeout, no heartbeat verdict)", _never_times_out),
    ClockMutant("cancel_does_not_notify_source",
                "CancelSource is acknowledged but the source worker is never told", _cancel_not_notifying),
)


@dataclass(frozen=True, slots=True)
class ClockMutantResult:
    mutant: ClockMutant
    reports: tuple[ClockReport, ...]

    @property
    def killed(self) -> bool:
        return any(r.failed for r in self.reports)


def run_clock_mutants(workers: WorkersSpec | None = None, mutants: Sequence[ClockMutant] = CLOCK_MUTANTS) -> list[ClockMutantResult]:
    base = workers if workers is not None else load_workers()
    config = base.configurations[REFERENCE]
    out: list[ClockMutantResult] = []
    for m in mutants:
        mutated = m.edit(base)
        out.append(ClockMutantResult(m, tuple(check_clocks(mutated, config, o) for o in config.orders)))
    return out


def clock_kill_table(results: Sequence[ClockMutantResult]) -> str:
    orders = [HandoffOrder.SOURCE_FIRST, HandoffOrder.DESTINATION_FIRST]
    lines = [f"{'mutant':<40}  " + "  ".join(f"{o.value:<44}" for o in orders)]
    for res in results:
        cells = []
        for o in orders:
            rep = next((r for r in res.reports if r.order is o), None)
            if rep is None:
                cells.append("-")
                continue
            fails = [x for x in rep.results if not x.ok]
            cells.append(", ".join(f"{x.prop} ({len(x.moves)})" for x in fails) if fails else "survived")
        lines.append(f"{res.mutant.name:<40}  " + "  ".join(f"{c:<44}" for c in cells))
    killed = sum(r.killed for r in results)
    lines.append(f"\nkilled {killed}/{len(results)} clock mutants")
    return "\n".join(lines)


__all__ = ["CLOCK_MUTANTS", "ClockMutant", "ClockMutantResult", "REFERENCE", "clock_kill_table", "run_clock_mutants"]
