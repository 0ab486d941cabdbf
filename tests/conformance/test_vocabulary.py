"""The event vocabulary has one source, the spec's ``observable`` section.

The format parser (``conformance/events.py``), the stream validator's fast path
(``conformance/stream.py``), the projection's alphabet, the event-log schema and the one
writer (:class:`dmocker.handoff.EventLogWriter`) must all speak it; these tests fail on any
divergence (a kind added to the spec but not to the schema, a fast-path set that misses a kind).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from dmocker.conformance import events, stream
from dmocker.conformance.projection import spec_symbols
from dmocker.handoff import (
    OBSERVABLE_SIDES,
    Completion,
    DestinationReserved,
    EventLogWriter,
    HandoffCoordinator,
    HandoffOrder,
    Outcome,
    OutcomeKind,
    SourceHeld,
    TransferCompleted,
    TransferTiming,
    TransferTimingMode,
    load_spec,
    load_workers,
)

REPO = Path(__file__).resolve().parents[2]


def test_parser_and_fast_path_speak_the_spec() -> None:
    spec = load_spec()
    assert events.EVENT_KINDS == spec.log_kinds == spec.observable_kinds + tuple(k.name for k in spec.worker_kinds)
    assert events.COMPLETED_DETAILS == spec.completed_details
    assert events.COMPLETION_KIND == spec.completion_kind
    fast = set(stream._SIMPLE_KINDS) | set(stream._COMPLETED_SYMBOLS.values())  # noqa: SLF001
    assert fast == set(spec_symbols(spec))
    assert set(stream._COMPLETED_SYMBOLS) == set(spec.completed_details) == {c.value for c in Completion}  # noqa: SLF001
    assert stream._COMPLETION_KIND not in stream._SIMPLE_KINDS  # noqa: SLF001


def test_schema_speaks_the_spec() -> None:
    spec = load_spec()
    schema = json.loads((REPO / "spec/event-log.schema.json").read_text(encoding="utf-8"))
    event = schema["$defs"]["event"]
    assert event["properties"]["event"]["enum"] == list(spec.log_kinds)
    assert event["if"]["properties"]["event"]["const"] == spec.completion_kind
    assert event["then"]["properties"]["detail"]["enum"] == list(spec.completed_details)


def test_every_kind_has_a_side() -> None:
    spec = load_spec()
    assert [k for k, _ in spec.observable_sides] == list(spec.observable_kinds)
    assert {s for _, s in spec.observable_sides} <= set(OBSERVABLE_SIDES)
    assert set(spec.kinds_on_side("source")) == {"prefill_submitted", "source_held", "source_released", "source_canceled"}


def test_the_writer_lines_parse_back() -> None:
    """Every line the one writer writes for a clean run parses and names its side's worker."""
    spec = load_spec()
    out = io.StringIO()
    writer = EventLogWriter(out.write, "vllm")
    coord = HandoffCoordinator(7, HandoffOrder.SOURCE_FIRST)
    ok = {a.name: a.allowed[0] for a in spec.actions if a.allowed}
    prev = coord.state
    queue = list(coord.start())
    writer.log(0.0, coord, prev, "start", None, 1, 2)
    while queue:
        ia = queue.pop(0)
        name = type(ia.action).__name__
        if name not in ok:
            continue
        prev = coord.state
        queue.extend(coord.on_action_outcome(ia.id, Outcome(OutcomeKind(ok[name]))))
        writer.log(1.0, coord, prev, f"{name}.{ok[name]}", None, 1, 2)
        fact = {"SubmitPrefill": SourceHeld(7, TransferTiming(TransferTimingMode.FULL_PROMPT, 8)),
                "ReserveDestination": DestinationReserved(7, 8), "StartTransfer": TransferCompleted(7)}.get(name)
        if fact is not None:
            prev = coord.state
            queue.extend(coord.on_fact(fact))
            writer.log(2.0, coord, prev, type(fact).__name__, fact, 1, 2)
    lines = out.getvalue().splitlines()
    parsed = [events.parse_line(line, i) for i, line in enumerate(lines, 1)]
    assert all(isinstance(p, events.LogEvent) for p in parsed)
    kinds = [p.event for p in parsed if isinstance(p, events.LogEvent)]
    assert kinds[-1] == spec.completion_kind and "source_released" in kinds
    sides = dict(spec.observable_sides)
    for p in parsed:
        assert isinstance(p, events.LogEvent)
        expected = {"source": "prefill-1", "destination": "decode-2", "none": None}[sides[p.event]]
        assert p.worker == expected, p


def test_fixture_and_replay_write_through_the_one_writer() -> None:
    """The fixture's lines have the replay's shape (sorted keys; the side's worker; tokens)."""
    from dmocker.conformance.fixture import run_fixture

    spec = load_spec()
    sides = dict(spec.observable_sides)
    verdict = run_fixture("sglang")
    assert verdict.ok
    for line in verdict.capture.events:
        obj = json.loads(line)
        assert list(obj) == sorted(obj)
        expected = {"source": "prefill-0", "destination": "decode-0", "none": None}[sides[obj["event"]]]
        assert obj.get("worker") == expected, line
        if obj["event"] in ("source_held", "destination_reserved"):
            assert obj["tokens"] == 8


def test_every_worker_kind_reports_a_move_of_the_workers_machines() -> None:
    """The log's worker kinds and the checker's worker machines are one model: each kind names
    the move it reports, a timer or a fault there, or the recompute variant of a failed load."""
    spec = load_spec()
    workers = load_workers()
    moves = {m.name: m for m in workers.moves}
    assert spec.worker_kinds
    for kind in spec.worker_kinds:
        assert kind.move in moves, kind.name
        assert moves[kind.move].kind is not None, kind.name
    expected = {"source_expired": "hold_expiry", "bootstrap_timed_out": "bootstrap_timeout",
                "destination_timed_out": "wait_timeout", "heartbeat_lost": "heartbeat_timeout",
                "transfer_stalled": "transfer_stall", "kv_recomputed": "load_failed"}
    assert {k.name: k.move for k in spec.worker_kinds} == expected
    # a kind that delivers a fact delivers a terminal one (the coordinator's cleanup follows)
    assert all(k.fact is None or k.fact in spec.terminal_facts for k in spec.worker_kinds)
