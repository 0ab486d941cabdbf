"""State identity is sound: re-running a node's BFS path rebuilds exactly that node's state.

If deduplication merged states that differ, a counterexample path would not lead where the
search believed; these properties would catch it (and a random walk over the environment's
alphabet never breaks an invariant of our coordinator).
"""

from __future__ import annotations

from functools import lru_cache

from hypothesis import given, settings
from hypothesis import strategies as st

from dmocker.check import DEFAULT_VALUES, Exploration, explore, load_target
from dmocker.check.env import INITIAL_ENV, alphabet, next_env, react, read_completion
from dmocker.check.inputs import DeliverFact, DeliverOutcome
from dmocker.check.invariants import safety_step, step_event
from dmocker.handoff import HandoffOrder, load_spec
from dmocker.handoff import Monitor

TARGET = load_target(None)


@lru_cache(maxsize=None)
def _explored(order: HandoffOrder) -> Exploration:
    return explore(TARGET, order, Monitor.for_order(load_spec(), order), DEFAULT_VALUES, stop_at_first=False)


@settings(max_examples=60, deadline=None)
@given(order=st.sampled_from(list(HandoffOrder)), pick=st.floats(0, 1, exclude_max=True))
def test_bfs_path_reruns_to_the_same_snapshot(order: HandoffOrder, pick: float) -> None:
    ex = _explored(order)
    node = int(pick * ex.states)
    root, steps = ex.path(node)
    obj = TARGET.make(DEFAULT_VALUES.handoff_id, order, DEFAULT_VALUES.configs[root])
    env = INITIAL_ENV
    for inp in steps:
        before = TARGET.snapshot(obj)
        reaction = react(obj, inp, env, DEFAULT_VALUES.handoff_id)
        env = next_env(env, inp, reaction, TARGET.snapshot(obj) != before)
    assert TARGET.snapshot(obj) == ex.coordinator_key[node]
    assert read_completion(obj)[:2] == (ex.complete[node], ex.completion[node])
    assert len(steps) == ex.depth[node]


@settings(max_examples=60, deadline=None)
@given(order=st.sampled_from(list(HandoffOrder)), root=st.integers(0, len(DEFAULT_VALUES.configs) - 1),
       choices=st.lists(st.integers(0, 10_000), max_size=25))
def test_random_walks_never_violate_an_invariant(order: HandoffOrder, root: int, choices: list[int]) -> None:
    hid = DEFAULT_VALUES.handoff_id
    config = DEFAULT_VALUES.configs[root]
    facts = [DeliverFact(f) for f in config.facts(hid, DEFAULT_VALUES.foreign_id)]
    monitor = Monitor.for_order(load_spec(), order)
    mon = monitor.initial
    obj = TARGET.make(hid, order, config)
    env = INITIAL_ENV
    for c in choices:
        inputs = alphabet(env, DEFAULT_VALUES, facts)
        inp = inputs[c % len(inputs)]
        before = TARGET.snapshot(obj)
        reaction = react(obj, inp, env, hid)
        changed = TARGET.snapshot(obj) != before
        _, completion, problem = read_completion(obj)
        answered = env.name_of(inp.action_id) if isinstance(inp, DeliverOutcome) else None
        event = step_event(inp, hid, answered, reaction.issued, reaction.error, reaction.api_problem or problem,
                           changed, completion)
        mon, violations = safety_step(monitor, mon, event)
        assert violations == []
        env = next_env(env, inp, reaction, changed)
