"""Seeded generators of legal event logs, drawn from the spec's projection (tests and bench).

A lifecycle is a random walk over the determinised projection that stops at a complete state
(with probability ``stop_bias`` when more may follow, e.g. after ``completed(success)``), so
every generated log conforms by construction.  Interleaving many lifecycles with increasing
timestamps gives logs of any size without holding them in memory.
"""

from __future__ import annotations

import json
import random
from typing import Final, Iterator

from dmocker.conformance.events import COMPLETION_KIND
from dmocker.conformance.projection import Projection, projection_for
from dmocker.handoff import HandoffOrder, load_spec

_COMPLETED_PREFIX = f"{COMPLETION_KIND}:"


def _engine_of() -> dict[HandoffOrder, str]:
    """Order -> the engine generated lines name for it: the first the spec's engines table
    lists speaking that order."""
    out: dict[HandoffOrder, str] = {}
    for entry in load_spec().engines:
        out.setdefault(entry.order, entry.name)
    return out


ENGINE_OF: Final = _engine_of()


def random_lifecycle(projection: Projection, rng: random.Random, *, happy_bias: float = 0.0,
                     stop_bias: float = 0.9) -> tuple[str, ...]:
    """A legal sequence of symbols ending in a complete state.

    ``happy_bias`` is the probability of taking the first allowed symbol (the spec's forward
    path comes first in symbol order), so a high bias gives mostly clean lifecycles.
    """
    dfa = projection.initial
    out: list[str] = []
    while True:
        state = projection.states[dfa]
        if state.accepting and (not state.allowed or rng.random() < stop_bias):
            return tuple(out)
        choices = state.allowed
        symbol = choices[0] if rng.random() < happy_bias else rng.choice(choices)
        out.append(symbol)
        dfa = state.transitions[symbol]


def event_line(handoff: str | int, t_ms: float, symbol: str, engine: str | None) -> str:
    """One native log line for ``symbol`` (compact JSON, schema key order)."""
    if isinstance(handoff, str) and handoff.isalnum() and engine is not None and engine.isalnum():
        if symbol.startswith(_COMPLETED_PREFIX):
            tail = f'"event":"{COMPLETION_KIND}","detail":"{symbol[len(_COMPLETED_PREFIX):]}"'
        else:
            tail = f'"event":"{symbol}"'
        return f'{{"handoff":"{handoff}","t_ms":{json.dumps(t_ms)},{tail},"engine":"{engine}"}}'
    obj: dict[str, object] = {"handoff": handoff, "t_ms": t_ms}
    if symbol.startswith(_COMPLETED_PREFIX):
        obj["event"] = COMPLETION_KIND
        obj["detail"] = symbol.split(":", 1)[1]
    else:
        obj["event"] = symbol
    if engine is not None:
        obj["engine"] = engine
    return json.dumps(obj, separators=(",", ":"))


def interleaved_log(events: int, *, seed: int = 0, open_handoffs: int = 64, happy_bias: float = 0.9,
                    orders: tuple[HandoffOrder, ...] = tuple(HandoffOrder)) -> Iterator[str]:
    """About ``events`` lines of a legal log: ``open_handoffs`` lifecycles in flight at a time,
    each event of a random one of them, the time advancing by a random step."""
    rng = random.Random(seed)
    projections = {o: projection_for(o) for o in orders}
    live: list[tuple[int, HandoffOrder, list[str]]] = []
    next_id = 0
    t = 0.0
    written = 0
    while written < events or live:
        while written < events and len(live) < open_handoffs:
            order = orders[next_id % len(orders)]
            seq = list(random_lifecycle(projections[order], rng, happy_bias=happy_bias))
            seq.reverse()
            live.append((next_id, order, seq))
            next_id += 1
        i = rng.randrange(len(live))
        handoff, order, seq = live[i]
        t += rng.random()
        yield event_line(f"h{handoff}", round(t, 3), seq.pop(), ENGINE_OF[order])
        written += 1
        if not seq:
            live[i] = live[-1]
            live.pop()


__all__ = ["ENGINE_OF", "random_lifecycle", "event_line", "interleaved_log"]
