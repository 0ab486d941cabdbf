"""The Azure LLM inference and BurstGPT CSV traces: read as their published files are laid out."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from dmocker.cli.replay import main
from dmocker.replay.workload import AdmissionQueue, WorkloadError
from dmocker.replay.workload.csv_trace import CsvTrace
from dmocker.replay.workload.formats import TraceFormat, detect_format

AZURE_2023 = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.6805900,4808,10
2023-11-16 18:15:50.9951690,3180,8
2023-11-16 18:15:51.0030000,110,27
"""
AZURE_2024 = """TIMESTAMP,ContextTokens,GeneratedTokens
2024-05-10 00:00:00.0097640+00:00,1020,85
2024-05-10 00:00:00.0290000+00:00,2340,12
"""
BURSTGPT = """Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
5,ChatGPT,472,18,490,Conversation log
45,ChatGPT,1087,0,1087,Conversation log
118,GPT-4,417,30,447,Conversation log
"""


def _write(tmp_path: Path, text: str, name: str = "trace.csv") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _arrivals(trace: CsvTrace) -> list[tuple[float, int, int, int]]:
    out = []
    for start in trace.session_starts():
        turn = trace.load(start.request_id)
        out.append((start.arrival_ms, turn.input_length, turn.output_length, len(turn.hash_ids)))
    return out


def test_azure_2023_rows_arrive_at_their_times_to_the_100_ns(tmp_path: Path) -> None:
    path = _write(tmp_path, AZURE_2023)
    assert detect_format(path) is TraceFormat.AZURE
    trace = CsvTrace(path, TraceFormat.AZURE)
    assert trace.num_requests == 3
    # 18:15:50.9951690 - 18:15:46.6805900 = 4.3145790 s; 512-token hash blocks: ceil(4808 / 512) = 10
    assert _arrivals(trace) == [(0.0, 4808, 10, 10), (4314.579, 3180, 8, 7), (4322.41, 110, 27, 1)]


def test_azure_2024_timestamps_with_an_offset_and_arrival_speedup(tmp_path: Path) -> None:
    trace = CsvTrace(_write(tmp_path, AZURE_2024), TraceFormat.AZURE, arrival_speedup_ratio=2.0)
    # (0.0290000 - 0.0097640) s = 192,360 ticks of 100 ns = 19.236 ms, halved
    assert [a[0] for a in _arrivals(trace)] == [0.0, 9.618]


def test_burstgpt_seconds_and_failed_requests_left_out(tmp_path: Path) -> None:
    path = _write(tmp_path, BURSTGPT)
    assert detect_format(path) is TraceFormat.BURSTGPT
    trace = CsvTrace(path, TraceFormat.BURSTGPT, trace_block_size=64)
    assert trace.num_requests == 2  # the row with 0 response tokens generated nothing
    assert _arrivals(trace) == [(0.0, 472, 18, 8), (113_000.0, 417, 30, 7)]


def test_no_prefix_is_shared_between_requests(tmp_path: Path) -> None:
    trace = CsvTrace(_write(tmp_path, AZURE_2023), TraceFormat.AZURE)
    ids = [set(trace.load(s.request_id).hash_ids) for s in trace.session_starts()]
    assert not (ids[0] & ids[1]) and not (ids[1] & ids[2])


@pytest.mark.parametrize(("text", "where"), [
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,12x,3\n", ":2: field 'ContextTokens': must be an integer >= 1"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,0,3\n", ":2: field 'ContextTokens'"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,5,\u00b2\n", ":2: field 'GeneratedTokens'"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,5,-1\n", ":2: field 'GeneratedTokens'"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n16/11/2023 18:15,5,1\n", ":2: field 'TIMESTAMP': must be a date and time"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-02-30 18:15:46,5,1\n", ":2: field 'TIMESTAMP': no such date"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:47,5,1\n2023-11-16 18:15:46,5,1\n",
     ":3: field 'TIMESTAMP': '2023-11-16 18:15:46' is earlier than the row before"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:47,5\n", ":2: 2 columns, the header names 3"),
    ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\nsoon,ChatGPT,5,1,6,x\n",
     ":2: field 'Timestamp': must be a non-negative number of seconds"),
])
def test_bad_rows_name_the_file_line_and_field(tmp_path: Path, text: str, where: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(WorkloadError) as info:
        CsvTrace(path, detect_format(path))
    assert str(info.value).startswith(path + where), str(info.value)


def test_a_trace_with_nothing_to_replay_is_refused(tmp_path: Path) -> None:
    for text in ("TIMESTAMP,ContextTokens,GeneratedTokens\n",
                 "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n1,ChatGPT,5,0,5,x\n"):
        path = _write(tmp_path, text)
        with pytest.raises(WorkloadError, match="no requests to replay"):
            CsvTrace(path, detect_format(path))


def test_an_unknown_header_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "time,prompt,completion\n1,2,3\n")
    with pytest.raises(WorkloadError, match=r"trace.csv:1: not a trace format dmocker reads"):
        detect_format(path)


def test_the_cli_reads_both_formats_and_bad_input_exits_2_writing_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for text in (AZURE_2023, BURSTGPT):
        out = tmp_path / "report.json"
        assert main([_write(tmp_path, text), "--quiet", "--out", str(out)]) == 0
        summary = json.loads(out.read_text())["summary"]
        assert summary["completed_requests"] == summary["num_requests"] > 0
        assert summary["prefix_cache_reused_ratio"] == 0.0
    bad = _write(tmp_path, AZURE_2023 + "2023-11-16 18:15:52.0,oops,3\n", "bad.csv")
    out = tmp_path / "none.json"
    assert main([bad, "--quiet", "--out", str(out)]) == 2
    assert f"{bad}:5: field 'ContextTokens'" in capsys.readouterr().err
    assert not out.exists()
    # the format can be forced: a BurstGPT file read as Azure lacks Azure's columns
    assert main([_write(tmp_path, BURSTGPT, "b.csv"), "--trace-format", "azure", "--quiet", "--out", str(out)]) == 2
    assert "has no column 'TIMESTAMP'" in capsys.readouterr().err


def _burst_rows(n: int) -> str:
    return "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n" + "".join(
        f"{i * 0.01:.2f},ChatGPT,{100 + i % 50},{1 + i % 7},0,Conversation log\n" for i in range(n))


def test_memory_stays_flat_in_the_trace_length(tmp_path: Path) -> None:
    peaks = []
    for n in (2_000, 20_000):
        path = _write(tmp_path, _burst_rows(n), f"b{n}.csv")
        tracemalloc.start()
        trace = CsvTrace(path, TraceFormat.BURSTGPT)
        queue = AdmissionQueue(trace)
        released = 0
        now = 0.0
        while released < n:  # a second of trace time at a time, each request ended as it arrives
            ready = queue.drain_ready(now)
            for item in ready:
                queue.on_request_terminal(item.turn.request_id, now)
            released += len(ready)
            now += 1000.0
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert released == 20_000
    assert peaks[1] < 2 * peaks[0], peaks  # ten times the rows, not ten times the memory
