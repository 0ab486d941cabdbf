"""`dmocker diagram --view workers` draws the workers' own clocks from the spec."""

from __future__ import annotations

from dmocker.diagrams.views import OutputFormat, View, build_diagram, text
from dmocker.handoff import HandoffOrder, load_spec


def test_workers_view_draws_timers_faults_and_kvpoll() -> None:
    spec = load_spec()
    mermaid = text(build_diagram(spec, HandoffOrder.SOURCE_FIRST, View.WORKERS), OutputFormat.MERMAID)
    for needle in ("(timer) hold_expiry", "(timer) wait_timeout", "(timer) heartbeat_timeout", "(timer) bootstrap_timeout",
                   "(fault) transfer_stall", "(fault) heartbeat_loss", "waiting_for_input (WaitingForInput)",
                   "state \"source_worker\"", "state \"heartbeat\""):
        assert needle in mermaid, needle
    # one picture for both orders
    assert mermaid == text(build_diagram(spec, HandoffOrder.DESTINATION_FIRST, View.WORKERS), OutputFormat.MERMAID)
    dot = text(build_diagram(spec, HandoffOrder.SOURCE_FIRST, View.WORKERS), OutputFormat.DOT)
    assert dot.startswith("digraph") and "hold_expiry" in dot
