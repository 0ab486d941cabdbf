"""A tiny deterministic driver for engine tests: one prefill + one decode worker, the handoff
done inline (SourceHeld -> reserve, DestinationReserved -> activate + release), no coordinator.

It defers activate/release while the target worker is busy, as the runtime must.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from dmocker.handoff import DestinationReserved, SourceHeld
from dmocker.engines.interface import (
    CommandEffects,
    EngineRequest,
    EngineWorker,
    KvEvent,
    KvStored,
    LifecycleEvent,
    PassCompletion,
)


@dataclass
class Trace:
    tokens: dict[int, list[float]] = field(default_factory=dict)  # decode tokens per request
    prefill_tokens: dict[int, int] = field(default_factory=dict)
    finished: list[int] = field(default_factory=list)
    rejected: list[int] = field(default_factory=list)
    reserved_tokens: dict[int, int] = field(default_factory=dict)
    reserve_stored: int = 0
    activate_stored: list[int] = field(default_factory=list)
    decode_stored: list[int] = field(default_factory=list)
    admissions: list[tuple[float, int, int]] = field(default_factory=list)


def stored(events: tuple[KvEvent, ...]) -> list[int]:
    return [h for e in events if isinstance(e, KvStored) for h in e.block_hashes]


def run_pair(
    prefill: EngineWorker,
    decode: EngineWorker,
    arrivals: list[tuple[float, EngineRequest]],
    max_steps: int = 1_000_000,
) -> Trace:
    tr = Trace()
    reqs = {r.request_id: r for _, r in arrivals}
    ev: list[tuple[float, int, int, int]] = []  # (time, seq, kind, payload)
    seq = 0
    for t, r in arrivals:
        ev.append((t, seq, 0, r.request_id))
        seq += 1
    heapq.heapify(ev)
    deferred: dict[int, list[tuple[str, int]]] = {0: [], 1: []}
    workers = (prefill, decode)

    def on_effects(e: CommandEffects) -> None:
        lifecycle(e.lifecycle)

    def apply(stage: int, what: str, hid: int) -> None:
        w = workers[stage]
        if w.busy:
            deferred[stage].append((what, hid))
            return
        if what == "activate":
            e = w.activate_destination(hid)
            tr.activate_stored.extend(stored(e.kv_events))
            on_effects(e)
            apply(0, "release", hid)
        elif what == "release":
            on_effects(w.release_source(hid))

    def lifecycle(events: tuple[LifecycleEvent, ...]) -> None:
        for f in events:
            if isinstance(f, SourceHeld):
                e = decode.reserve_destination(f.handoff_id, reqs[int(f.handoff_id)])  # type: ignore[call-overload]
                tr.reserve_stored += len(stored(e.kv_events))
                on_effects(e)
            elif isinstance(f, DestinationReserved):
                tr.reserved_tokens[int(f.handoff_id)] = f.transferable_prompt_tokens  # type: ignore[call-overload]
                apply(1, "activate", int(f.handoff_id))  # type: ignore[call-overload]

    def completion(stage: int, c: PassCompletion) -> None:
        if stage == 0:
            for rid in c.emitted.tolist():
                tr.prefill_tokens[rid] = tr.prefill_tokens.get(rid, 0) + 1
        else:
            for rid in c.emitted.tolist():
                tr.tokens.setdefault(rid, []).append(c.end_ms)
            tr.finished.extend(list(c.finished))
            tr.decode_stored.extend(stored(c.kv_events))
        tr.rejected.extend(c.rejected)
        lifecycle(c.lifecycle)
        for what, hid in deferred[stage][:]:
            deferred[stage].remove((what, hid))
            apply(stage, what, hid)

    now = 0.0
    steps = 0
    while True:
        steps += 1
        assert steps < max_steps, "driver did not converge"
        for stage, w in enumerate(workers):
            while not w.busy and w.has_work():
                plan = w.start_pass(now)
                if plan is None:
                    break
                for a in plan.admissions:
                    tr.admissions.append((now, a.request_id, a.reused_input_tokens))
                if stage == 1:
                    tr.decode_stored.extend(stored(plan.pass_start_kv_events))
                heapq.heappush(ev, (plan.end_ms, seq, 1 + stage, 0))
                seq += 1
        if not ev:
            break
        now, _, kind, payload = heapq.heappop(ev)
        if kind == 0:
            on_effects(prefill.submit_handoff_prefill(payload, reqs[payload]))
        else:
            stage = kind - 1
            completion(stage, workers[stage].finish_pass())
    return tr
