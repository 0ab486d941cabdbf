"""The determinised projection accepts exactly the logs the compiled table can produce.

Two oracles that do not use the subset construction:
* random runs of the compiled table (any input the table steps on), logging ``Step.logs``:
  every such log must conform, and every prefix of it must be a legal prefix;
* a direct simulation of the nondeterministic automaton (sets of table states) on arbitrary
  symbol sequences: it must agree with the DFA on acceptance and on rejection points.
And one that does not use the spec's ``log`` annotations at all: the real HandoffCoordinator,
driven with random inputs, logged with the event-log vocabulary of docs/conformance.md.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmocker.conformance.projection import completed_symbol, projection_for, spec_symbols, success_lifecycle
from dmocker.handoff import (
    Canceled, Complete, DestinationReserved, Fact, Failed, HandoffCoordinator, HandoffError, HandoffOrder,
    IssuedAction, Outcome, OutcomeKind, SourceHeld, TimedOut, TransferCompleted, TransferTiming,
    TransferTimingMode, load_spec,
)
from dmocker.handoff import CompiledTable, Step

ORDERS = list(HandoffOrder)


def _table_run(table: CompiledTable, rng: random.Random, max_inputs: int = 40) -> list[str]:
    """Random inputs on the table (only ones it steps on); the observable log they produce."""
    state = table.initial
    out: list[str] = []
    for _ in range(max_inputs):
        steps = [e for e in table.rows[state] if isinstance(e, Step)]
        if not steps:
            break
        step = rng.choice(steps)
        for kind in step.logs:
            out.append(completed_symbol(table.completion(step.next).value) if kind == "completed" else kind)  # type: ignore[union-attr]
        state = step.next
    return out


def _nfa_accepts(table: CompiledTable, symbols: list[str]) -> tuple[bool, int]:
    """(accepted, length of the longest legal prefix) by direct NFA simulation."""

    def closure(nodes: set[tuple[int, tuple[str, ...]]]) -> set[tuple[int, tuple[str, ...]]]:
        todo = list(nodes)
        while todo:
            s, rest = todo.pop()
            if rest:
                continue
            for e in table.rows[s]:
                if isinstance(e, Step) and not e.logs and (e.next, ()) not in nodes:
                    nodes.add((e.next, ()))
                    todo.append((e.next, ()))
        return nodes

    def sym(kind: str, nxt: int) -> str:
        return completed_symbol(table.completion(nxt).value) if kind == "completed" else kind  # type: ignore[union-attr]

    front = closure({(table.initial, ())})
    for i, x in enumerate(symbols):
        nxt: set[tuple[int, tuple[str, ...]]] = set()
        for s, rest in front:
            if rest:
                if rest[0] == x:
                    nxt.add((s, rest[1:]))
                continue
            for e in table.rows[s]:
                if isinstance(e, Step) and e.logs:
                    logged = tuple(sym(k, e.next) for k in e.logs)
                    if logged[0] == x:
                        nxt.add((e.next, logged[1:]))
        if not nxt:
            return False, i
        front = closure(nxt)
    return any(not rest and table.is_complete(s) for s, rest in front), len(symbols)


def _dfa(order: HandoffOrder, symbols: list[str]) -> tuple[bool, int]:
    proj = projection_for(order)
    d = proj.initial
    for i, x in enumerate(symbols):
        nxt = proj.states[d].transitions.get(x)
        if nxt is None:
            return False, i
        d = nxt
    return proj.states[d].accepting, len(symbols)


@pytest.mark.parametrize("order", ORDERS, ids=[o.value for o in ORDERS])
def test_table_runs_are_legal_prefixes(order: HandoffOrder) -> None:
    table = projection_for(order).table
    rng = random.Random(7)
    for _ in range(400):
        log = _table_run(table, rng)
        accepted, legal = _dfa(order, log)
        assert legal == len(log), log


@settings(max_examples=300, deadline=None)
@given(order=st.sampled_from(ORDERS), seed=st.integers(0, 2**32 - 1), edits=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 2), st.integers(0, 15)), max_size=3))
def test_dfa_agrees_with_direct_nfa_simulation(order: HandoffOrder, seed: int, edits: list[tuple[int, int, int]]) -> None:
    table = projection_for(order).table
    symbols = list(spec_symbols(load_spec()))
    log = _table_run(table, random.Random(seed))
    for pos, op, k in edits:  # delete, insert or replace one symbol
        pos = pos % (len(log) + 1)
        if op == 0 and pos < len(log):
            del log[pos]
        elif op == 1:
            log.insert(pos, symbols[k % len(symbols)])
        elif pos < len(log):
            log[pos] = symbols[k % len(symbols)]
    assert _dfa(order, log) == _nfa_accepts(table, log)


def test_projection_is_finite_and_lifecycles_match_the_spec() -> None:
    spec = load_spec()
    for order in ORDERS:
        proj = projection_for(order)
        assert proj is projection_for(order)  # cached
        lifecycle = success_lifecycle(proj)
        assert lifecycle[-1] == completed_symbol("success")
        # The spec's normalized lifecycle (reference names) is a subsequence of ours.
        names = {"SourceHeld": "source_held", "DestinationAccepted": "destination_accepted",
                 "DestinationReserved": "destination_reserved", "DestinationActivated": "destination_activated",
                 "SourceReleased": "source_released", "Completed": "completed:success"}
        normalized = [names[n] for n in spec.lifecycle(order)]
        assert [s for s in lifecycle if s in normalized] == normalized
        # Acyclic but for the worker kinds, each a self-loop: a DFS over the coordinator's
        # symbols never revisits a state on its own path.
        def dfs(d: int, path: set[int]) -> None:
            assert d not in path
            state = proj.states[d]
            for symbol, nxt in state.transitions.items():
                if symbol in proj.worker_kinds:
                    assert nxt == d and symbol not in state.allowed
                else:
                    dfs(nxt, path | {d})
        dfs(proj.initial, set())
        # Every worker kind of the order may appear somewhere, and none of another order anywhere.
        loops = {s for state in proj.states for s in state.transitions if s in proj.worker_kinds}
        assert loops == {k.name for k in spec.worker_kinds if order in k.orders}
        assert not any(s in proj.other_orders_worker_kinds for state in proj.states for s in state.transitions)


def test_after_completion_rules() -> None:
    for order in ORDERS:
        proj = projection_for(order)
        for state in proj.states:
            for symbol, nxt in state.transitions.items():
                after = proj.states[nxt]
                if symbol == completed_symbol("canceled"):
                    assert after.allowed == () and after.accepting  # nothing after completed(canceled)
                if symbol == completed_symbol("success"):
                    # only terminal facts (post-success reopen) may follow
                    assert set(after.allowed) <= {"failed", "timed_out", "canceled"} and after.accepting


# --- the real coordinator, logged with the event-log vocabulary ---------------------------------

_OUTCOME_EVENT = {
    ("SubmitPrefill", OutcomeKind.SUBMITTED): "prefill_submitted",
    ("ReserveDestination", OutcomeKind.ACCEPTED): "destination_accepted",
    ("StartTransfer", OutcomeKind.SCHEDULED): "transfer_started",
    ("ActivateDestination", OutcomeKind.APPLIED): "destination_activated",
    ("ReleaseSource", OutcomeKind.APPLIED): "source_released",
    ("ReleaseSource", OutcomeKind.NOOP): "source_released",
    ("CancelSource", OutcomeKind.APPLIED): "source_canceled",
    ("CancelSource", OutcomeKind.NOOP): "source_canceled",
    ("CancelDestination", OutcomeKind.APPLIED): "destination_canceled",
    ("CancelDestination", OutcomeKind.NOOP): "destination_canceled",
}
_GOOD = {"SubmitPrefill": OutcomeKind.SUBMITTED, "ReserveDestination": OutcomeKind.ACCEPTED,
         "StartTransfer": OutcomeKind.SCHEDULED, "ActivateDestination": OutcomeKind.APPLIED,
         "ReleaseSource": OutcomeKind.APPLIED, "CancelSource": OutcomeKind.NOOP, "CancelDestination": OutcomeKind.APPLIED}
_FACT_EVENT: dict[type, str] = {SourceHeld: "source_held", DestinationReserved: "destination_reserved",
               TransferCompleted: "transfer_completed", Failed: "failed", TimedOut: "timed_out", Canceled: "canceled"}


def _coordinator_log(order: HandoffOrder, rng: random.Random) -> list[str]:
    hid = "h"
    c = HandoffCoordinator(hid, order)
    log: list[str] = []
    pending: dict[int, str] = {}

    def take(issued: list[IssuedAction]) -> None:
        for ia in issued:
            name = type(ia.action).__name__
            if isinstance(ia.action, Complete):
                log.append(completed_symbol(c.completion.value))  # type: ignore[union-attr]
            else:
                pending[ia.id] = name

    take(c.start())
    timing = TransferTiming(TransferTimingMode.FULL_PROMPT, 8)
    for _ in range(30):
        if c.is_complete and rng.random() < 0.7:
            break
        choice = rng.random()
        before = c.state
        try:
            if pending and choice < 0.6:
                aid = rng.choice(sorted(pending))
                name = pending.pop(aid)
                kind = _GOOD[name] if rng.random() < 0.85 or name.startswith("Cancel") else OutcomeKind.FAILED
                issued = c.on_action_outcome(aid, Outcome(kind))
                if c.state != before:
                    log.append(_OUTCOME_EVENT.get((name, kind), "failed"))
                take(issued)
            else:
                facts: list[Fact] = [SourceHeld(hid, timing), DestinationReserved(hid, 8), TransferCompleted(hid),
                                   SourceHeld(hid, timing), DestinationReserved(hid, 8), TransferCompleted(hid),
                                   Failed(hid), TimedOut(hid), Canceled(hid)]
                fact = rng.choice(facts)
                issued = c.on_fact(fact)
                if c.state != before:
                    log.append(_FACT_EVENT[type(fact)])
                take(issued)
        except HandoffError:
            assert c.state == before
    return log


@pytest.mark.parametrize("order", ORDERS, ids=[o.value for o in ORDERS])
def test_coordinator_runs_logged_by_the_vocabulary_are_legal(order: HandoffOrder) -> None:
    rng = random.Random(11)
    complete = 0
    for _ in range(300):
        log = _coordinator_log(order, rng)
        accepted, legal = _dfa(order, log)
        assert legal == len(log), log
        complete += accepted
    assert complete > 50  # the driver does finish handoffs

