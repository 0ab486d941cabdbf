"""The python-statemachine charts and the compiled table accept exactly the same inputs.

Walks every reachable state of the table (BFS), positions a chart there by re-running the
shortest path, and compares every event: next state, emitted actions, observable logs,
guards consulted, ignores and rejections (with their error kind).  By induction over the
reachable graph both forms accept the same event sequences and emit the same actions.
"""

from __future__ import annotations

from collections import deque

import pytest

from dmocker.handoff import HandoffError, HandoffOrder, load_spec
from dmocker.handoff import build_chart
from dmocker.handoff import NotApplicable, Reject, Step, compile_table


# the quick loop walks one order's graph
@pytest.mark.parametrize("order", [o if o is HandoffOrder.SOURCE_FIRST else pytest.param(o, marks=pytest.mark.slow)
                                   for o in HandoffOrder], ids=lambda o: o.value)
def test_chart_and_table_agree_on_the_whole_reachable_graph(order: HandoffOrder) -> None:
    spec = load_spec()
    table = compile_table(spec, order)
    chart_cls = build_chart(spec, order)
    chart = chart_cls()
    assert chart.region_states() == table.region_states(table.initial)
    seen = {table.initial}
    queue = deque([table.initial])
    compared = 0
    while queue:
        s = queue.popleft()
        for e, event in enumerate(table.events):
            entry = table.entry(s, e)
            if isinstance(entry, NotApplicable):
                continue
            chart.position(table.region_states(s))
            compared += 1
            if isinstance(entry, Reject):
                with pytest.raises(HandoffError) as info:
                    chart.deliver(event)
                assert info.value.kind is entry.kind, (table.state_label(s), event)
                continue
            emitted = chart.deliver(event)
            if isinstance(entry, Step):
                assert emitted == list(entry.emits), (table.state_label(s), event)
                assert chart.logs == list(entry.logs)
                assert chart.checks == [g for g, _ in entry.checks]
                assert chart.region_states() == table.region_states(entry.next), (table.state_label(s), event)
                if entry.next not in seen:
                    seen.add(entry.next)
                    queue.append(entry.next)
                # Each failing guard rejects with the spec's error kind.
                for guard, error in entry.checks:
                    chart.position(table.region_states(s))
                    with pytest.raises(HandoffError) as info:
                        chart.deliver(event, frozenset({guard}))
                    assert info.value.kind is error
            else:
                assert emitted == [] and chart.region_states() == table.region_states(s), (table.state_label(s), event)
    assert len(seen) == table.state_count
    assert compared > table.state_count * 10
