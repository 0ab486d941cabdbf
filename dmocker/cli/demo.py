"""``dmocker demo``: one complete handoff per order, printed step by step."""

from __future__ import annotations

import argparse

from dmocker.handoff import success_outcomes
from dmocker.handoff import (
    DestinationReserved,
    HandoffCoordinator,
    HandoffOrder,
    IssuedAction,
    Outcome,
    SourceHeld,
    TransferCompleted,
    TransferTiming,
    TransferTimingMode,
)



def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("demo", help="walk one complete handoff per order")
    p.add_argument("--order", choices=[o.value for o in HandoffOrder], help="only this order")
    p.set_defaults(func=run)


def demo_lines(order: HandoffOrder) -> list[str]:
    """The sequence of inputs and issued actions of one clean handoff (deterministic)."""
    hid = "request-0"
    timing = TransferTiming(TransferTimingMode.FULL_PROMPT, 128, 1_000_000, 1.0)
    c = HandoffCoordinator(hid, order)
    good = success_outcomes()
    lines = [f"== {order.value} =="]
    queue: list[IssuedAction] = []

    def show(label: str, issued: list[IssuedAction]) -> None:
        shown = ", ".join(f"#{a.id} {_action(a)}" for a in issued) or "nothing"
        lines.append(f"  {label:<40} -> {shown}")
        queue.extend(issued)

    show("start()", c.start())
    while not c.is_complete:
        if queue:
            action = queue.pop(0)
            name = type(action.action).__name__
            if name == "Complete":
                continue
            kind = good[name]
            show(f"outcome #{action.id} {name}: {kind.value}", c.on_action_outcome(action.id, Outcome(kind)))
            continue
        label = c.state_label()
        if "source=submitted" in label:
            show("fact SourceHeld(128 tokens, 1 GB/s)", c.on_fact(SourceHeld(hid, timing)))
        elif "destination=accepted" in label:
            show("fact DestinationReserved(128 tokens)", c.on_fact(DestinationReserved(hid, 128)))
        elif "transfer=scheduled" in label:
            show("fact TransferCompleted", c.on_fact(TransferCompleted(hid)))
        else:  # pragma: no cover - the clean path always has a next step
            raise AssertionError(f"stuck in {label}")
    lines.append(f"  completion: {c.completion.value if c.completion else None}")
    return lines


def _action(issued: IssuedAction) -> str:
    action = issued.action
    name = type(action).__name__
    delay = getattr(action, "delay_ms", None)
    return f"{name}(delay_ms={delay:g})" if delay is not None else name


def run(args: argparse.Namespace) -> int:
    orders = [HandoffOrder(args.order)] if getattr(args, "order", None) else list(HandoffOrder)
    for order in orders:
        print("\n".join(demo_lines(order)))
    return 0
