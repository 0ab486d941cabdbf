"""``dmocker fuzz --clocks``: Hypothesis search over the coordinator composed with the spec's
worker machines (the workers' own clocks), for one configuration, optionally with a clock mutant.

The cluster fuzzer (:mod:`dmocker.fuzz.search`) drives the replay, whose workers do not run the
spec's worker machines; this search drives the composition ``dmocker check --clocks`` explores
(:class:`dmocker.check.clocks.ClockSystem`) with random move sequences, through the kit
(:func:`dmocker.testing.clocks.find_clock_violation`), and shrinks what breaks.
"""

from __future__ import annotations

from dataclasses import dataclass

from dmocker.check.clock_mutants import CLOCK_MUTANTS, REFERENCE
from dmocker.check.clocks import replay_moves
from dmocker.handoff import HandoffOrder, WorkersSpec, load_workers
from dmocker.testing.clocks import ClockFinding, find_clock_violation

__all__ = ["ClockSearch", "search_clocks", "render_clock_finding"]


@dataclass(frozen=True, slots=True)
class ClockSearch:
    configuration: str
    mutant: str | None
    order: HandoffOrder | None
    finding: ClockFinding | None


def search_clocks(configuration: str | None = None, mutant: str | None = None, *, max_examples: int = 3000,
                  seed: int = 0) -> ClockSearch:
    """Search each order of ``configuration`` (default: the reference) until something breaks."""
    base = load_workers()
    name = configuration or REFERENCE
    if name not in base.configurations:
        raise KeyError(f"unknown clock configuration {name!r} (known: {sorted(base.configurations)})")
    workers: WorkersSpec = base
    if mutant is not None:
        edits = {m.name: m for m in CLOCK_MUTANTS}
        if mutant not in edits:
            raise KeyError(f"unknown clock mutant {mutant!r} (known: {sorted(edits)})")
        workers = edits[mutant].edit(base)
    config = base.configurations[name]
    for order in config.orders:
        finding = find_clock_violation(workers, config, order, max_examples=max_examples, derandomize=seed == 0)
        if finding is not None:
            return ClockSearch(name, mutant, order, finding)
    return ClockSearch(name, mutant, None, None)


def render_clock_finding(result: ClockSearch) -> str:
    assert result.finding is not None and result.order is not None
    workers = load_workers()
    if result.mutant is not None:
        workers = next(m for m in CLOCK_MUTANTS if m.name == result.mutant).edit(workers)
    config = workers.configurations[result.configuration]
    logs, _ = replay_moves(workers, config, result.order, result.finding.moves)
    lines = [f"clocks: {result.configuration} ({result.order.value})"
             + (f", mutant {result.mutant}" if result.mutant else "") + f": {len(result.finding.moves)} move(s) after start"]
    for i, log in enumerate(logs):
        lines.append(f"  {i}. {log.move}: {'; '.join(x.strip() for x in log.lines) or '-'}")
        lines.append(f"       workers: {workers.describe(log.after)}")
    lines.append("broken:")
    for v in result.finding.violations:
        lines.append(f"  {v.prop}: {v.message}")
    return "\n".join(lines) + "\n"
