"""``dmocker demo``: one complete handoff per order, printed step by step."""

from __future__ import annotations

import argparse

from dmocker.handoff import (
    DestinationReserved,
    Fact,
    HandoffCoordinator,
    HandoffOrder,
    IssuedAction,
    Outcome,
    SourceHeld,
    TransferTiming,
    TransferTimingMode,
    fair_environment,
)

from .io import VerbRegistry


def add_parser(subparsers: VerbRegistry) -> None:
    p = subparsers.add_parser("demo", help="walk one complete handoff per order")
    p.add_argument("--order", choices=[o.value for o in HandoffOrder], help="only this order")
    p.set_defaults(func=run)


def demo_lines(order: HandoffOrder) -> list[str]:
    """The sequence of inputs and issued actions of one clean handoff (deterministic)."""
    hid = "request-0"
    timing = TransferTiming(TransferTimingMode.FULL_PROMPT, 128, 1_000_000, 1.0)
    c = HandoffCoordinator(hid, order)
    fair = fair_environment()  # the spec's healthy environment: success outcomes, due facts
    payloads: dict[str, object] = {"transfer_timing": timing, "transferable_prompt_tokens": 128}
    answered: set[str] = set()
    delivered: set[str] = set()
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
            if name in fair.unanswered:
                continue
            kind = fair.success[name]
            show(f"outcome #{action.id} {name}: {kind.value}", c.on_action_outcome(action.id, Outcome(kind)))
            answered.add(name)
            continue
        due = next((d for d in fair.due_facts if d.action in answered and d.fact not in delivered), None)
        if due is None:  # pragma: no cover - the clean path always has a next step
            raise AssertionError(f"stuck in {c.state_label()}")
        fact = due.build(hid, payloads)
        delivered.add(due.fact)
        show(f"fact {_fact(fact)}", c.on_fact(fact))
    lines.append(f"  completion: {c.completion.value if c.completion else None}")
    return lines


def _fact(fact: Fact) -> str:
    name = type(fact).__name__
    if isinstance(fact, SourceHeld):
        t = fact.transfer_timing
        return f"{name}({t.full_prompt_tokens} tokens, {t.bandwidth_gb_s:g} GB/s)"
    if isinstance(fact, DestinationReserved):
        return f"{name}({fact.transferable_prompt_tokens} tokens)"
    return name


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
