"""Replays with injected terminal facts (Canceled, Failed, TimedOut at random times) log cleanly.

The cleanup paths are where a runtime most easily forgets a side; the validator must find the
replay's native log clean in both orders, for faults at any moment of a handoff's life (before
submission, mid-prefill, mid-transfer, after success).  Uses the replay tests' fake-engine
harness (tests/replay/helpers.py), so it runs fast and exercises only the runtime's driving.
"""

from __future__ import annotations

import json
import random

import pytest

from dmocker.conformance.stream import check_native
from dmocker.conformance.validator import Validator
from dmocker.handoff import Canceled, Failed, HandoffOrder, TimedOut
from dmocker.replay import workload as workload_mod
from tests.replay import helpers


@pytest.mark.parametrize("order", list(HandoffOrder), ids=[o.value for o in HandoffOrder])
@pytest.mark.parametrize("seed", range(8))
def test_replay_with_faults_logs_conform(order: HandoffOrder, seed: int) -> None:
    rng = random.Random(seed)
    n = 6
    workload = workload_mod.SyntheticWorkload(
        workload_mod.SyntheticSpec(requests=n, rate=200.0, isl_mean=600, osl_mean=4, spread=0.0)
    )
    kinds = [Canceled, Failed, TimedOut]
    inject = [(rng.uniform(0.0, 120.0), rid, rng.choice(kinds)) for rid in rng.sample(range(n), 3)]
    run = helpers.fake_run(workload, order=order, bandwidth=1.0, kv_bytes=100_000, inject=inject, n_decode=2)
    lines = [json.dumps(e) + "\n" for e in run.events]
    v = Validator(order)
    check_native(lines, v, keep_going=False)
    r = v.result()
    assert r.exit_code == 0, (inject, r.violations[:2], r.unfinished[:2])
    assert r.handoffs == n
