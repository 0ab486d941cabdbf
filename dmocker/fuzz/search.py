"""Hypothesis search for a scenario that breaks a coordinator in a cluster, shrunk to a minimum.

Why Hypothesis: its shrinker turns "some run with six requests, two crashes and four faults
broke" into the smallest scenario that still breaks, which is what a person can read.  The
search space is deliberately small and sharp: tiny pools (so reservations wait and crashes
matter), short outputs, transfer delays of a few milliseconds, faults and crashes at exact
times inside the first ~150 ms, where the handoffs are.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from hypothesis import HealthCheck, Phase, find, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from dmocker.engines.registry import engine_names
from dmocker.replay.coordinators import ForeignFactory
from dmocker.replay.faults import FaultKind, Pool, ScheduledFault, WorkerCrash

from .scenario import Outcome, Request, Scenario, run_scenario

__all__ = ["scenarios", "search", "SearchResult"]

_HORIZON_MS = 150


@st.composite
def scenarios(draw: st.DrawFn, engines: Sequence[str] | None = None) -> Scenario:
    """Small cluster scenarios: 1-6 requests, 1-2 workers per pool, exact faults and crashes."""
    engine = draw(st.sampled_from(list(engines if engines is not None else engine_names())))
    n_p = draw(st.integers(1, 2))
    n_d = draw(st.integers(1, 2))
    n = draw(st.integers(1, 6))
    requests = tuple(
        Request(
            arrival_ms=float(draw(st.integers(0, 60))),
            input_length=draw(st.integers(16, 160)),
            output_length=draw(st.integers(1, 4)),
            prefix_group=draw(st.integers(0, 1)),
        )
        for _ in range(n)
    )
    bandwidth = draw(st.sampled_from([None, 0.01, 0.002]))
    faults = tuple(
        ScheduledFault(float(draw(st.integers(0, _HORIZON_MS))), draw(st.integers(0, n - 1)), draw(st.sampled_from(list(FaultKind))))
        for _ in range(draw(st.integers(0, 3)))
    )
    crashes: list[WorkerCrash] = []
    for _ in range(draw(st.integers(0, 1))):
        pool = draw(st.sampled_from(list(Pool)))
        size = n_p if pool is Pool.PREFILL else n_d
        crashes.append(WorkerCrash(pool, draw(st.integers(0, size - 1)), float(draw(st.integers(0, _HORIZON_MS)))))
    restart = draw(st.sampled_from([None, 0.02])) if crashes else None
    return Scenario(
        engine=engine,
        prefill_workers=n_p,
        decode_workers=n_d,
        # Room for every request at once (prompt and output): a smaller pool can dead-end the
        # engines themselves, which says nothing about the coordinator.
        num_gpu_blocks=sum(-(-(r.input_length + r.output_length) // 16) + 1 for r in requests) + draw(st.integers(0, 8)),
        requests=requests,
        kv_transfer_bandwidth=bandwidth,
        faults=faults,
        crashes=tuple(crashes),
        restart_s=restart,
        max_num_seqs=draw(st.integers(1, 4)),
    )


@dataclass
class SearchResult:
    scenario: Scenario | None  # the minimal failing scenario, None when nothing broke
    outcome: Outcome | None  # its run, with every step recorded
    examples: int


def search(
    factory: ForeignFactory,
    *,
    engines: Sequence[str] | None = None,
    max_examples: int = 200,
    seed: int = 0,
) -> SearchResult:
    """Search (deterministically for a given seed) and shrink; re-run the minimum recording it."""
    count = [0]

    def breaks(sc: Scenario) -> bool:
        count[0] += 1
        return run_scenario(sc, factory).failed

    conf = settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        phases=(Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
    )
    try:
        found = find(scenarios(engines), breaks, settings=conf, random=random.Random(seed))
    except NoSuchExample:
        return SearchResult(None, None, count[0])
    return SearchResult(found, run_scenario(found, factory, record=True), count[0])
