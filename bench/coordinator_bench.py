"""Speed of the three forms of the protocol: raw compiled table, coordinator, python-statemachine chart.

Prints events per second for each, on clean handoffs of both orders. Run:
    python bench/coordinator_bench.py [--handoffs N]
"""

from __future__ import annotations

import argparse
import time

from dmocker.handoff import success_outcomes
from dmocker.handoff import (
    DestinationReserved,
    HandoffCoordinator,
    HandoffOrder,
    Outcome,
    SourceHeld,
    TransferCompleted,
    TransferTiming,
    TransferTimingMode,
    compile_table,
    load_spec,
)
from dmocker.handoff import build_chart
from dmocker.handoff import Step

TIMING = TransferTiming(TransferTimingMode.FULL_PROMPT, 1000, 131072, 10.0)
GOOD = success_outcomes()
FACT_AFTER = {"SubmitPrefill": "held", "ReserveDestination": "reserved", "StartTransfer": "transferred"}


def clean_run(order: HandoffOrder, hid: int) -> int:
    """One clean handoff through the coordinator; returns the number of inputs delivered."""
    c = HandoffCoordinator(hid, order)
    pending = c.start()
    inputs = 1
    while pending:
        issued = pending.pop(0)
        name = type(issued.action).__name__
        if name == "Complete":
            continue
        pending += c.on_action_outcome(issued.id, Outcome(GOOD[name]))
        inputs += 1
        fact = FACT_AFTER.get(name)
        if fact == "held":
            pending += c.on_fact(SourceHeld(hid, TIMING))
        elif fact == "reserved":
            pending += c.on_fact(DestinationReserved(hid, 1000))
        elif fact == "transferred":
            pending += c.on_fact(TransferCompleted(hid))
        inputs += fact is not None
    assert c.is_complete
    return inputs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--handoffs", type=int, default=50_000)
    args = parser.parse_args()
    spec = load_spec()
    for order in HandoffOrder:
        table = compile_table(spec, order)
        # Raw table: replay the event indices of one clean run many times.
        path: list[int] = []
        s = table.initial
        for name in ["start", *(
            ["SubmitPrefill.Submitted", "SourceHeld", "ReserveDestination.Accepted", "DestinationReserved"]
            if order is HandoffOrder.SOURCE_FIRST
            else ["ReserveDestination.Accepted", "DestinationReserved", "SubmitPrefill.Submitted", "SourceHeld"]
        ), "StartTransfer.Scheduled", "TransferCompleted", "ActivateDestination.Applied", "ReleaseSource.Applied"]:
            e = table.event_index(name)
            entry = table.entry(s, e)
            assert isinstance(entry, Step), (name, table.state_label(s))
            path.append(e)
            s = entry.next
        rows = table.rows
        reps = args.handoffs * 10
        t0 = time.perf_counter()
        for _ in range(reps // len(path)):
            s = 0
            for e in path:
                s = rows[s][e].next  # type: ignore[union-attr]
        raw = (reps // len(path)) * len(path) / (time.perf_counter() - t0)

        t0 = time.perf_counter()
        n = sum(clean_run(order, i) for i in range(args.handoffs))
        coord = n / (time.perf_counter() - t0)

        chart_cls = build_chart(spec, order)
        names = [table.events[e] for e in path]
        runs = 200
        t0 = time.perf_counter()
        for _ in range(runs):
            chart = chart_cls()
            for name in names:
                chart.deliver(name)
        chart_rate = runs * len(names) / (time.perf_counter() - t0)
        print(f"{order.value:>17}: table {raw:,.0f} lookups/s | coordinator {coord:,.0f} inputs/s "
              f"({args.handoffs:,} handoffs) | python-statemachine chart {chart_rate:,.0f} events/s")


if __name__ == "__main__":
    main()
