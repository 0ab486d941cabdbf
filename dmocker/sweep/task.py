"""One sweep configuration, run to its result: a replay, or a capacity search of replays.

Why a plain function over plain data: the same :func:`execute` runs in this process, in a
process-pool worker or in a Ray task, so a task and its result are small picklable values (the
base :class:`~dmocker.replay.config.ReplayConfig`, the swept values, JSON summaries) and
nothing depends on where it ran.  A configuration that raises is a result with an ``error``,
never an exception out of the sweep.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from dmocker.replay.api import run as replay_run
from dmocker.replay.config import ReplayConfig, WorkloadKind
from dmocker.replay.report import JsonValue

from .grid import ConfigValue

__all__ = ["SearchSpec", "SweepTask", "TaskResult", "execute", "attainment"]

@dataclass(frozen=True, slots=True)
class SearchSpec:
    """Capacity search: the highest ``variable`` at which ``target`` of requests meet every SLA.

    ``variable`` is ``rate`` (synthetic workloads) or ``arrival_speedup_ratio`` (traces).  The
    search starts at ``start``, doubles (or halves) up to ``max_expand`` times to bracket the
    answer, then bisects until the bracket is narrower than ``tolerance`` (relative) or
    ``steps`` bisections were made.
    """

    variable: str
    start: float
    target: float
    steps: int = 8
    max_expand: int = 10
    tolerance: float = 0.02


@dataclass(frozen=True, slots=True)
class SweepTask:
    """Configuration ``index`` of the sweep: the swept values (by name) over the base config."""

    index: int
    config: dict[str, ConfigValue]
    base: ReplayConfig
    search: SearchSpec | None = None

    def replay_config(self, trace: str | None = None) -> ReplayConfig:
        """The configuration this task replays; ``trace``: where the trace is on this machine."""
        cfg = self.base.with_values(self.config)
        if trace is not None and cfg.workload.kind is WorkloadKind.TRACE:
            cfg = cfg.with_values({"trace": trace})
        return cfg


@dataclass(frozen=True, slots=True)
class TaskResult:
    index: int
    summary: dict[str, JsonValue] | None
    error: str | None = None
    search: dict[str, JsonValue] | None = None


def attainment(summary: dict[str, JsonValue]) -> float:
    """Share of arrived requests that completed within every given SLA (0 when none arrived)."""
    n = summary.get("num_requests")
    good = summary.get("goodput_completed_requests", summary.get("completed_requests"))
    if not isinstance(n, int) or not isinstance(good, int) or n <= 0:
        return 0.0
    return good / n


def _replay(config: ReplayConfig) -> dict[str, JsonValue]:
    return replay_run(config).summary


Replay = Callable[[ReplayConfig], dict[str, JsonValue]]


def execute(task: SweepTask, trace: str | None, replay: Replay | None = None) -> TaskResult:
    """Run ``task``, reading the trace (if its workload is one) at local path ``trace``.

    ``replay`` stands in for the replay in tests (default: ``dmocker.replay.run``'s summary).
    """
    do = replay or _replay
    search = task.search
    try:
        config = task.replay_config(trace)
        if search is None:
            summary = do(config)
            if summary.get("invariants_ok") is False:  # `dmocker replay` exits 1 on this too
                return TaskResult(task.index, summary, f"end-of-run invariants broken: {summary.get('invariant_breaks')}")
            return TaskResult(task.index, summary)
        summary, info = _search(search, lambda x: do(config.with_values({search.variable: x})))
        return TaskResult(task.index, summary, None, info)
    except Exception as exc:  # noqa: BLE001 - recorded, the sweep goes on
        return TaskResult(task.index, None, f"{type(exc).__name__}: {exc}")


def _search(
    spec: SearchSpec, probe: Callable[[float], dict[str, JsonValue]]
) -> tuple[dict[str, JsonValue], dict[str, JsonValue]]:
    """Bracket then bisect; returns the summary at the best passing value and the search record."""
    probes: list[JsonValue] = []

    def passes(x: float) -> tuple[bool, dict[str, JsonValue]]:
        s = probe(x)
        a = attainment(s)
        probes.append({"value": x, "attainment": a})
        return a >= spec.target, s

    lo: float | None = None
    hi: float | None = None
    best: dict[str, JsonValue] | None = None
    x = spec.start
    ok, s = passes(x)
    last = s
    if ok:
        lo, best = x, s
        for _ in range(spec.max_expand):
            x *= 2.0
            ok, s = passes(x)
            if not ok:
                hi = x
                break
            lo, best = x, s
    else:
        hi = x
        for _ in range(spec.max_expand):
            x /= 2.0
            ok, s = passes(x)
            last = s
            if ok:
                lo, best = x, s
                break
            hi = x
    if lo is not None and hi is not None:
        for _ in range(spec.steps):
            if (hi - lo) <= spec.tolerance * lo:
                break
            mid = float(f"{(lo + hi) / 2.0:.9g}")
            if not lo < mid < hi or not math.isfinite(mid):
                break
            ok, s = passes(mid)
            if ok:
                lo, best = mid, s
            else:
                hi = mid
    info: dict[str, JsonValue] = {
        "variable": spec.variable,
        "target_attainment": spec.target,
        "value": lo,
        "bracket": [lo if lo is not None else 0.0, hi],
        "probes": probes,
    }
    return (best if best is not None else last), info
