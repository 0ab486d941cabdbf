"""The streaming validator: verdicts per handoff, independence from interleaving, fast = slow path."""

from __future__ import annotations

import io
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmocker.conformance.events import EVENT_KINDS, LogError, parse_line
from dmocker.conformance.generate import ENGINE_OF, event_line, interleaved_log, random_lifecycle
from dmocker.conformance.projection import projection_for
from dmocker.conformance.stream import check_native
from dmocker.conformance.validator import ConformanceResult, Validator, Verdict, ViolationKind, validate_events
from dmocker.handoff import HandoffOrder, load_spec

SF = HandoffOrder.SOURCE_FIRST
DF = HandoffOrder.DESTINATION_FIRST
CLEAN_SF = ["prefill_submitted", "source_held", "destination_accepted", "destination_reserved", "transfer_started",
            "transfer_completed", "destination_activated", "source_released", "completed:success"]


def lines_of(events: list[tuple[str, float, str]], engine: str | None = "vllm") -> list[str]:
    return [event_line(h, t, s, engine) + "\n" for h, t, s in events]


def run(lines: list[str], order: HandoffOrder | None = None, keep_going: bool = True) -> ConformanceResult:
    v = Validator(order)
    check_native(lines, v, keep_going=keep_going)
    return v.result()


def slow(lines: list[str], order: HandoffOrder | None = None) -> ConformanceResult:
    parsed = [p for i, text in enumerate(lines, 1) if (p := parse_line(text, i)) is not None]
    return validate_events(parsed, order)


def test_vocabulary_is_the_spec_log_kinds() -> None:
    assert tuple(load_spec().log_kinds) == EVENT_KINDS


def test_clean_handoff_conforms_and_reports_lifecycle() -> None:
    r = run(lines_of([("a", float(i), s) for i, s in enumerate(CLEAN_SF)]))
    assert r.verdicts["conforms"] == 1 and r.exit_code == 0
    assert r.lifecycles[0].events[-1] == "completed(success)"
    assert r.coverage[0].order is SF and "complete_success" in r.coverage[0].exercised


def test_violation_names_line_state_and_allowed() -> None:
    events = [("a", 0.0, "prefill_submitted"), ("a", 1.0, "destination_accepted")]
    r = run(lines_of(events))
    assert r.exit_code == 1
    (v,) = r.violations
    assert v.line == 2 and v.kind is ViolationKind.UNEXPECTED_EVENT and v.event == "destination_accepted"
    assert "source_held" in v.allowed and v.seen == ("prefill_submitted",)
    assert any("source=submitted" in label for label in v.state)


def test_leak_is_incomplete_and_exit_1() -> None:
    r = run(lines_of([("a", float(i), s) for i, s in enumerate(CLEAN_SF[:-2])]))
    assert r.verdicts["incomplete"] == 1 and r.exit_code == 1
    assert "source_released" in r.unfinished[0].allowed and r.unfinished[0].seen[-1] == "destination_activated"


def test_post_success_reopen_then_more_is_after_completion() -> None:
    base = [("a", float(i), s) for i, s in enumerate(CLEAN_SF)]
    ok = base + [("a", 20.0, "failed"), ("a", 21.0, "destination_canceled"), ("a", 22.0, "completed:canceled")]
    assert run(lines_of(ok)).verdicts["conforms"] == 1
    bad = ok + [("a", 23.0, "failed")]
    r = run(lines_of(bad))
    assert r.verdicts == {"conforms": 0, "violates": 1, "incomplete": 0, "truncated": 0}
    assert r.violations[0].kind is ViolationKind.EVENT_AFTER_COMPLETION


def test_time_backwards_is_a_violation() -> None:
    r = run(lines_of([("a", 5.0, "prefill_submitted"), ("a", 4.0, "source_held")]))
    assert r.violations[0].kind is ViolationKind.TIME_BACKWARDS and r.exit_code == 1
    assert r.time.backwards_within_handoff == 1 and r.time.max_backwards_ms == 1.0


def test_order_from_engine_and_mismatch() -> None:
    lines = [event_line("s", 0.0, "destination_accepted", "sglang") + "\n", event_line("s", 1.0, "destination_reserved", "vllm") + "\n"]
    r = run(lines)
    assert r.violations[0].kind is ViolationKind.ENGINE_MISMATCH
    # a fixed order ignores the engine field
    assert run(lines, DF).verdicts["incomplete"] == 1


def test_unreadable_lines_stop_or_are_recorded() -> None:
    lines = lines_of([("a", 0.0, "failed")]) + ['{"handoff": "b", "t_ms": 1, "event": "nope"}\n'] + lines_of([("a", 1.0, "completed:canceled")])
    stopped = run(lines, keep_going=False)
    assert stopped.aborted and stopped.exit_code == 2 and stopped.input_errors[0].line == 2
    went_on = run(lines, keep_going=True)
    assert not went_on.aborted and went_on.exit_code == 2 and went_on.verdicts["conforms"] == 1
    assert went_on.input_errors == (LogError(2, "event", "unknown event kind 'nope'"),)


@pytest.mark.parametrize(
    "text, field",
    [
        ("[1, 2]", None), ("{", None), ('{"t_ms": 1, "event": "failed"}', "handoff"),
        ('{"handoff": true, "t_ms": 1, "event": "failed"}', "handoff"),
        ('{"handoff": "a", "t_ms": "1", "event": "failed"}', "t_ms"),
        ('{"handoff": "a", "t_ms": -1, "event": "failed"}', "t_ms"),
        ('{"handoff": "a", "t_ms": NaN, "event": "failed"}', "t_ms"),
        ('{"handoff": "a", "t_ms": 1}', "event"),
        ('{"handoff": "a", "t_ms": 1, "event": "completed", "detail": "ok"}', "detail"),
        ('{"handoff": "a", "t_ms": 1, "event": "failed", "tokens": -3}', "tokens"),
        ('{"handoff": "a", "t_ms": 1, "event": "failed", "worker": [1]}', "worker"),
        ('{"handoff": "a", "t_ms": 1, "event": "failed", "engine": 7}', "engine"),
        ('{"handoff": "a", "t_ms": 1, "event": "failed"} trailing', None),
        ('{"dmocker_event_log": "2.0"}', "dmocker_event_log"),
    ],
)
def test_bad_lines_name_the_field(text: str, field: str | None) -> None:
    r = run([text + "\n"], SF)
    assert r.input_error_count == 1 and r.input_errors[0].field == field and r.input_errors[0].line == 1


def test_header_only_first_line() -> None:
    header = '{"dmocker_event_log": "1.0"}\n'
    assert run([header] + lines_of([("a", 0.0, "failed"), ("a", 0.0, "completed:canceled")])).exit_code == 0
    r = run(lines_of([("a", 0.0, "failed")]) + [header] + lines_of([("a", 0.0, "completed:canceled")]))
    assert r.input_errors[0].field == "dmocker_event_log"


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), open_handoffs=st.integers(1, 20), mutate=st.integers(0, 40),
       order=st.sampled_from([None, SF, DF]))
def test_fast_path_equals_slow_path(seed: int, open_handoffs: int, mutate: int, order: HandoffOrder | None) -> None:
    lines = [line + "\n" for line in interleaved_log(120, seed=seed, open_handoffs=open_handoffs, happy_bias=0.5)]
    rng = random.Random(seed)
    for _ in range(mutate % 4):  # break a few lines: swap, drop, duplicate, time shift
        i = rng.randrange(len(lines))
        j = rng.randrange(len(lines))
        op = rng.randrange(4)
        if op == 0:
            lines[i], lines[j] = lines[j], lines[i]
        elif op == 1:
            del lines[i]
        elif op == 2:
            lines.insert(j, lines[i])
        else:
            obj = json.loads(lines[i])
            obj["t_ms"] = max(0.0, obj["t_ms"] - 10.0)
            lines[i] = json.dumps(obj) + "\n"
    if mutate % 5 == 4:  # an unknown engine and an int handoff id somewhere
        obj = json.loads(lines[0])
        obj["engine"] = "tgi"
        lines.insert(1, json.dumps(obj) + "\n")
        obj2 = json.loads(lines[-1])
        obj2["handoff"] = 7
        lines.append(json.dumps(obj2) + "\n")
    fast = run(lines, order)
    assert fast == slow(lines, order)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6))
def test_generated_logs_conform_and_interleaving_does_not_matter(seed: int) -> None:
    lines = [line + "\n" for line in interleaved_log(200, seed=seed, open_handoffs=8, happy_bias=0.3)]
    r = run(lines)
    assert r.exit_code == 0 and r.verdicts["conforms"] == r.handoffs
    # Grouping each handoff's events together (a different interleaving) gives the same result.
    by_handoff: dict[str, list[str]] = {}
    for line in lines:
        by_handoff.setdefault(json.loads(line)["handoff"], []).append(line)
    grouped = [line for group in by_handoff.values() for line in group]
    g = run(grouped)
    assert g.verdicts == r.verdicts and g.lifecycles == r.lifecycles and g.coverage == r.coverage


def test_memory_is_open_handoffs_plus_finished_ids() -> None:
    v = Validator(None)
    check_native(io.StringIO("".join(line + "\n" for line in interleaved_log(5000, seed=3, open_handoffs=10))), v, keep_going=False)
    assert len(v._open) == 0 and len(v._finished) == v.result().handoffs  # noqa: SLF001
    assert all(isinstance(n, int) for n in v._finished.values())  # noqa: SLF001
    assert len(v._trie.dfa) < 5000  # prefixes are shared, not per handoff  # noqa: SLF001


def test_listing_is_bounded_counts_are_not() -> None:
    lines = [event_line(f"h{i}", 0.0, "source_held", "vllm") + "\n" for i in range(50)]
    v = Validator(None, max_listed=5)
    check_native(lines, v, keep_going=True)
    r = v.result()
    assert len(r.violations) == 5 and r.verdicts["violates"] == 50
    assert r.violation_counts == ((SF, ViolationKind.UNEXPECTED_EVENT, 50),)


def test_random_lifecycles_each_conform() -> None:
    rng = random.Random(5)
    for order in HandoffOrder:
        proj = projection_for(order)
        for k in range(100):
            seq = random_lifecycle(proj, rng, stop_bias=0.5)
            r = run(lines_of([(f"x{k}", float(i), s) for i, s in enumerate(seq)], ENGINE_OF[order]))
            assert r.verdicts["conforms"] == 1, seq
            assert r.lifecycles[0].verdict is Verdict.CONFORMS
