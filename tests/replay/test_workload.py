"""Mooncake reader (validation, rebasing, sessions, the flat index) and the synthetic generator."""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmocker.replay.workload import (
    NO_NEXT,
    AdmissionQueue,
    MooncakeTrace,
    SyntheticSpec,
    SyntheticWorkload,
    WorkloadError,
)


def _write(tmp_path: Path, lines: list[str], name: str = "t.jsonl", newline_at_end: bool = True) -> Path:
    p = tmp_path / name
    text = "\n".join(lines) + ("\n" if newline_at_end else "")
    p.write_text(text)
    return p


def _row(**kw: object) -> str:
    base: dict[str, object] = {"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": [1]}
    base.update(kw)
    return json.dumps({k: v for k, v in base.items() if v is not ...})


def test_rebase_and_arrival_speedup(tmp_path: Path) -> None:
    p = _write(tmp_path, [_row(timestamp=1000), _row(timestamp=1500), _row(timestamp=3000)])
    t = MooncakeTrace(p, arrival_speedup_ratio=2.0)
    starts = list(t.session_starts())
    assert [s.arrival_ms for s in starts] == [0.0, 250.0, 1000.0]
    assert [s.request_id for s in starts] == [0, 1, 2]
    turn = t.load(1)
    assert turn.input_length == 100 and turn.output_length == 5 and turn.hash_ids == (1,)


def test_unsorted_first_turns_are_released_in_time_order(tmp_path: Path) -> None:
    p = _write(tmp_path, [_row(timestamp=30), _row(timestamp=10), _row(timestamp=20)])
    starts = list(MooncakeTrace(p).session_starts())
    assert [s.request_id for s in starts] == [1, 2, 0]
    assert [s.arrival_ms for s in starts] == [0.0, 10.0, 20.0]


def test_sessions_link_turns_and_infer_delays(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        [
            _row(timestamp=0, session_id="a"),
            _row(timestamp=5, session_id="b"),
            _row(timestamp=100, session_id="a"),
            _row(timestamp=300, session_id="a", delay=7),
        ],
    )
    t = MooncakeTrace(p, arrival_speedup_ratio=2.0)
    assert [s.request_id for s in t.session_starts()] == [0, 1]
    a0, a1, a2 = t.load(0), t.load(2), t.load(3)
    assert (a0.next_request_id, a1.next_request_id, a2.next_request_id) == (2, 3, NO_NEXT)
    assert a1.delay_ms == pytest.approx(50.0)  # (100 - 0) / 2
    assert a2.delay_ms == pytest.approx(3.5)  # explicit 7 / 2
    assert (a0.turn_index, a1.turn_index, a2.turn_index) == (0, 1, 2)
    assert t.load(1).next_request_id == NO_NEXT


def test_index_of_a_trace_longer_than_the_row_buffer(tmp_path: Path) -> None:
    """Rows are buffered and moved into the index's arrays in chunks (mooncake._FLUSH_ROWS):
    every row's numbers and session links survive the chunk boundaries, blank lines included."""
    from dmocker.replay.workload import mooncake

    n = 2 * mooncake._FLUSH_ROWS + 37
    lines: list[str] = []
    for i in range(n):
        sid = i % 5  # five sessions whose turns straddle every chunk boundary
        ts = 10 * i
        lines.append(_row(timestamp=ts, session_id=sid, input_length=100 + i % 97, output_length=1 + i % 13))
        if i % 1000 == 999:
            lines.append("")
    t = MooncakeTrace(_write(tmp_path, lines))
    assert t.num_requests == n
    assert [s.request_id for s in t.session_starts()] == [0, 1, 2, 3, 4]
    for i in (0, 4, mooncake._FLUSH_ROWS - 1, mooncake._FLUSH_ROWS, mooncake._FLUSH_ROWS + 3, n - 6, n - 1):
        turn = t.load(i)
        assert (turn.input_length, turn.output_length) == (100 + i % 97, 1 + i % 13)
        assert turn.turn_index == i // 5
        assert turn.next_request_id == (i + 5 if i + 5 < n else NO_NEXT)
        assert turn.delay_ms == (0.0 if i < 5 else 50.0)


def test_follow_up_turn_is_gated_on_the_previous_terminal(tmp_path: Path) -> None:
    p = _write(tmp_path, [_row(timestamp=0, session_id=1), _row(timestamp=10, session_id=1)])
    q = AdmissionQueue(MooncakeTrace(p))
    first = q.drain_ready(0.0)
    assert [r.turn.request_id for r in first] == [0]
    assert q.next_ready_time() is None  # nothing until the first turn ends
    q.on_request_terminal(0, 500.0)
    assert q.next_ready_time() == 510.0
    assert q.drain_ready(509.0) == []
    follow = q.drain_ready(510.0)
    assert [r.turn.request_id for r in follow] == [1] and follow[0].arrival_ms == 510.0
    q.on_request_terminal(1, 600.0)
    assert q.is_drained()


def test_prefetch_sees_every_first_turn_once_the_first_batch_included(tmp_path: Path) -> None:
    # The queue pulls its first batch when it is built, before the runtime installs the hook.
    p = _write(tmp_path, [_row(timestamp=i * 10, session_id=i % 7) for i in range(23)])
    q = AdmissionQueue(MooncakeTrace(p), batch=4)
    seen: list[int] = []
    q.set_prefetch(lambda turns: seen.extend(t.turn_index * 1000 + t.request_id for t in turns))
    assert seen == [0, 1, 2, 3]
    released: list[int] = []
    now = 0.0
    while not q.is_drained():
        for r in q.drain_ready(now):
            released.append(r.turn.request_id)
            q.on_request_terminal(r.turn.request_id, now)
        nxt = q.next_ready_time()
        now = nxt if nxt is not None else now
    assert sorted(released) == list(range(23))
    assert sorted(seen) == list(range(7))  # the seven sessions' first turns, each once


def test_concurrency_mode_caps_open_sessions(tmp_path: Path) -> None:
    p = _write(tmp_path, [_row(timestamp=i * 1000) for i in range(5)])
    q = AdmissionQueue(MooncakeTrace(p), max_in_flight=2)
    assert [r.turn.request_id for r in q.drain_ready(0.0)] == [0, 1]
    assert q.drain_ready(1.0) == []
    q.on_request_terminal(0, 3.0)
    got = q.drain_ready(3.0)
    assert [(r.turn.request_id, r.arrival_ms) for r in got] == [(2, 3.0)]


BAD_ROWS = [
    (_row(input_length=-5), "input_length", "must be >= 1"),
    (_row(input_length=12.5), "input_length", "must be an integer"),
    (_row(input_length=100.0), "input_length", "must be an integer"),
    (_row(input_length="100"), "input_length", "must be an integer"),
    (_row(input_length=0), "input_length", "must be >= 1"),
    (_row(output_length=-1), "output_length", "must be >= 1"),
    (_row(output_length="7"), "output_length", "must be an integer"),
    (_row(output_length=True), "output_length", "must be an integer"),
    (_row(input_length=...), "input_length", "missing"),
    (_row(output_length=...), "output_length", "missing"),
    (_row(hash_ids=...), "hash_ids", "missing"),
    (_row(timestamp=...), "timestamp", "missing"),
    (_row(timestamp="soon"), "timestamp", "finite number"),
    (_row(hash_ids="1,2"), "hash_ids", "list of integers"),
    (_row(hash_ids=[1, -2]), "hash_ids[1]", "[0, 2^63)"),
    (_row(hash_ids=[1, 2.5]), "hash_ids[1]", "[0, 2^63)"),
    (_row(input_length=1025, hash_ids=[1, 2]), "input_length", "exceeds the hash_ids capacity 1024"),
    (_row(input_length=10, hash_ids=[]), "input_length", "capacity 0"),
    (_row(delay=5), "delay", "first turn"),
    (_row(delay=-1), "delay", ">= 0"),
    (_row(session_id=[1]), "session_id", "string or an integer"),
    ("[1, 2]", None, "expected a JSON object"),
    ('{"timestamp": 0, "input_length": 5,, }', None, "malformed JSON"),
    ('{"timestamp": 0, "input_length": NaN, "output_length": 1, "hash_ids": [1]}', "input_length", "integer"),
]


@pytest.mark.parametrize(("line", "field", "text"), BAD_ROWS)
def test_bad_rows_name_file_line_and_field(tmp_path: Path, line: str, field: str | None, text: str) -> None:
    p = _write(tmp_path, [_row(), "", line])
    with pytest.raises(WorkloadError) as info:
        MooncakeTrace(p)
    err = info.value
    assert err.path == str(p)
    assert err.line == 3
    assert err.field == field
    assert text in str(err)
    assert str(err).startswith(f"{p}:3: ")


def test_truncated_last_line(tmp_path: Path) -> None:
    p = _write(tmp_path, [_row(), '{"timestamp": 5, "input_length": 10'], newline_at_end=False)
    with pytest.raises(WorkloadError, match=r":2: truncated JSON record"):
        MooncakeTrace(p)


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_file(tmp_path: Path, content: str) -> None:
    p = tmp_path / "e.jsonl"
    p.write_text(content)
    with pytest.raises(WorkloadError, match=r"empty|no requests"):
        MooncakeTrace(p)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="no such trace file"):
        MooncakeTrace(tmp_path / "nope.jsonl")


def test_later_turn_timestamp_going_backwards(tmp_path: Path) -> None:
    p = _write(tmp_path, [_row(timestamp=50, session_id="s"), _row(timestamp=10, session_id="s")])
    with pytest.raises(WorkloadError, match=r":2: field 'timestamp'.*earlier"):
        MooncakeTrace(p)


def test_clamp_option_follows_the_reference(tmp_path: Path) -> None:
    p = _write(tmp_path, [_row(input_length=2000, hash_ids=[1, 2])])
    t = MooncakeTrace(p, clamp_input_length=True)
    assert t.load(0).input_length == 1024


# The two public Mooncake traces (kvcache-ai/Mooncake, FAST25-release/traces/): set
# DMOCKER_MOONCAKE_TRACES to the folder holding them to run this test.
_REAL_TRACES = os.environ.get("DMOCKER_MOONCAKE_TRACES")


@pytest.mark.skipif(_REAL_TRACES is None, reason="DMOCKER_MOONCAKE_TRACES (folder of the Mooncake traces) not set")
def test_real_traces_index() -> None:
    assert _REAL_TRACES is not None
    for name, n in (("conversation_trace.jsonl", 12031), ("synthetic_trace.jsonl", 3993)):
        t = MooncakeTrace(Path(_REAL_TRACES) / name)
        assert t.num_requests == n
        starts = list(t.session_starts())
        assert starts[0].arrival_ms == 0.0
        assert all(a.arrival_ms <= b.arrival_ms for a, b in zip(starts, starts[1:]))


@pytest.mark.slow  # builds and measures a 5k-row trace
def test_trace_index_keeps_flat_arrays_not_rows(tmp_path: Path) -> None:
    # 5k rows with 40 hash ids each: parsed whole this is ~10 MB of Python objects (checked
    # below); the index keeps the ids at 8 bytes each in one array plus ~50 bytes a row.
    rows, per_row = 5_000, 40
    p = tmp_path / "big.jsonl"
    with p.open("w") as fh:
        for i in range(rows):
            fh.write(json.dumps({"timestamp": i, "input_length": 20000, "output_length": 10,
                                 "hash_ids": list(range(i, i + per_row))}) + "\n")
    tracemalloc.start()
    t = MooncakeTrace(p)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    tracemalloc.start()
    whole = [json.loads(line) for line in p.open()]
    _, whole_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(whole) == t.num_requests == rows
    # the ids array may be caught mid-reallocation (old and new buffer both alive): 2 x 8 bytes
    assert peak < 2 * 8 * rows * per_row + 100 * rows + 300_000, peak
    assert peak < whole_peak / 2.5, (peak, whole_peak)
    assert t.load(4_999).hash_ids == tuple(range(4_999, 4_999 + per_row))
    assert t.load(0).hash_ids == tuple(range(per_row))


# --- synthetic -----------------------------------------------------------------------------


def _all_turns(spec: SyntheticSpec) -> list[object]:
    w = SyntheticWorkload(spec)
    out = []
    for s in w.session_starts():
        rid = s.request_id
        while rid != NO_NEXT:
            turn = w.load(rid)
            out.append((s.arrival_ms, turn))
            rid = turn.next_request_id
    return out


def test_synthetic_is_deterministic_and_seeded() -> None:
    spec = SyntheticSpec(requests=50, turns=2, seed=7)
    assert _all_turns(spec) == _all_turns(spec)
    assert _all_turns(spec) != _all_turns(SyntheticSpec(requests=50, turns=2, seed=8))


@settings(max_examples=25, deadline=None)
@given(
    isl=st.integers(64, 5000),
    osl=st.integers(1, 500),
    spread=st.floats(0.0, 0.9),
    groups=st.integers(0, 5),
    ratio=st.floats(0.0, 1.0),
    seed=st.integers(0, 1000),
)
def test_synthetic_lengths_and_prefixes(isl: int, osl: int, spread: float, groups: int, ratio: float, seed: int) -> None:
    spec = SyntheticSpec(requests=30, isl_mean=isl, osl_mean=osl, spread=spread,
                         prefix_groups=groups, prefix_ratio=ratio, seed=seed)
    turns = [t for _, t in _all_turns(spec)]  # type: ignore[misc]
    lo_i, hi_i = isl * (1 - spread) - 1, isl * (1 + spread) + 1
    for t in turns:
        assert lo_i <= t.input_length <= hi_i  # type: ignore[attr-defined]
        assert osl * (1 - spread) - 1 <= t.output_length <= osl * (1 + spread) + 1  # type: ignore[attr-defined]
        assert len(t.hash_ids) * 512 >= t.input_length  # type: ignore[attr-defined]
    arrivals = [a for a, _ in _all_turns(spec)]  # type: ignore[misc]
    assert arrivals[0] == 0.0 and arrivals == sorted(arrivals)


def test_prefix_groups_share_leading_blocks() -> None:
    spec = SyntheticSpec(requests=64, isl_mean=2048, spread=0.0, prefix_groups=2, prefix_ratio=0.5)
    turns = [t for _, t in _all_turns(spec)]
    firsts = {t.hash_ids[:2] for t in turns}  # type: ignore[attr-defined]
    assert len(firsts) == 2  # two groups, each sharing 2 of 4 blocks
    uniques = [t.hash_ids[2:] for t in turns]  # type: ignore[attr-defined]
    assert len(set(uniques)) == len(uniques)


@pytest.mark.parametrize(
    ("kw", "field"),
    [({"requests": 0}, "requests"), ({"rate": 0.0}, "rate"), ({"rate": float("nan")}, "rate"),
     ({"spread": 1.5}, "spread"), ({"prefix_ratio": -0.1}, "prefix_ratio"), ({"turns": 0}, "turns"),
     ({"requests": 5, "turns": 2}, "requests"), ({"isl_mean": -3}, "isl_mean")],
)
def test_synthetic_validation(kw: dict[str, object], field: str) -> None:
    with pytest.raises(WorkloadError) as info:
        SyntheticWorkload(SyntheticSpec(**kw))  # type: ignore[arg-type]
    assert info.value.field == field


def test_poisson_rate_is_respected() -> None:
    spec = SyntheticSpec(requests=4000, rate=50.0, seed=3)
    arrivals = [s.arrival_ms for s in SyntheticWorkload(spec).session_starts()]
    rate = (len(arrivals) - 1) / (arrivals[-1] / 1000.0)
    assert 47.0 < rate < 53.0
