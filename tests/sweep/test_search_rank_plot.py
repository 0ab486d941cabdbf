"""Capacity search (bisection), ranking and the cheapest mark, the Pareto frontier picture."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, strategies as st

from dmocker.cli.main import main as dmocker_main
from dmocker.replay import ReplayConfig
from dmocker.sweep import plan_sweep, run_sweep
from dmocker.sweep.plot import pareto
from dmocker.sweep.rank import Row, cheapest, rank
from dmocker.sweep.task import SearchSpec, _search

from .test_sweep import WORKLOAD


@given(threshold=st.floats(0.01, 1e4), start=st.floats(0.05, 500))
def test_search_brackets_and_converges(threshold: float, start: float) -> None:
    """Against a cliff at ``threshold``: lo passes, hi fails, and the bracket is tight."""
    spec = SearchSpec("rate", start, 0.9, steps=30, max_expand=30, tolerance=0.01)

    def probe(x: float) -> dict[str, Any]:
        good = 100 if x <= threshold else 50
        return {"num_requests": 100, "goodput_completed_requests": good, "x": x}

    summary, info = _search(spec, probe)
    lo, hi = info["bracket"]  # type: ignore[misc]
    assert info["value"] == lo and lo <= threshold < hi
    assert hi - lo <= 0.01 * lo * 1.000001
    assert summary["x"] == lo
    assert all(p["attainment"] in (0.5, 1.0) for p in info["probes"])  # type: ignore[index, union-attr]


def test_search_when_nothing_passes() -> None:
    spec = SearchSpec("rate", 1.0, 0.9, max_expand=3)
    summary, info = _search(spec, lambda x: {"num_requests": 10, "goodput_completed_requests": 0})
    assert info["value"] is None and info["bracket"] == [0.0, 0.125]
    assert len(info["probes"]) == 4  # type: ignore[arg-type]


def test_max_rate_cli(tmp_path: Path) -> None:
    out = tmp_path / "sweep.json"
    pic = tmp_path / "capacity.svg"
    code = dmocker_main(["sweep", *WORKLOAD, "--decode-workers", "1,2", "--sla-ttft-ms", "150",
                         "--max-rate", "--sla-attainment", "0.9", "--search-steps", "3", "--jobs", "2",
                         "--out", str(out), "--plot", str(pic), "--quiet"])
    assert code == 0
    doc = json.loads(out.read_text())
    assert doc["max_rate"] is True
    for run in doc["runs"]:
        search = run["max_rate"]
        assert search["variable"] == "rate"
        lo, hi = search["bracket"]
        assert search["value"] == lo and lo < hi
        probes = {p["value"]: p["attainment"] for p in search["probes"]}
        assert probes[lo] >= 0.9 > probes[hi]
        assert run["summary"]["goodput_completed_requests"] / run["summary"]["num_requests"] >= 0.9
    svg = pic.read_text()  # matplotlib keeps each drawn text as a comment before its glyphs
    assert "<!-- capacity (req/s) -->" in svg and "<!-- GPUs (prefill + decode workers) -->" in svg


def _row(index: int, gpus: int, good: float, att: float, target: float = 0.99) -> Row:
    return Row(index, {"prefill_workers": index}, {"p99_ttft_ms": 100.0 * index}, None, None, gpus, good, att, att >= target)


def test_cheapest_is_fewest_gpus_meeting_the_sla_then_goodput() -> None:
    rows = [_row(0, 4, 40.0, 1.0), _row(1, 3, 20.0, 0.995), _row(2, 3, 24.0, 0.999), _row(3, 2, 30.0, 0.5)]
    mark = cheapest(rows)
    assert mark is not None and mark.index == 2
    assert [r.index for r in rank(rows)] == [3, 0, 2, 1]  # by goodput per GPU: 15, 10, 8, 6.67
    assert cheapest([_row(0, 2, 30.0, 0.5)]) is None


def test_failed_rows_rank_last() -> None:
    bad = Row(9, {"prefill_workers": 9}, None, "boom", None, 2, 0.0, 0.0, False)
    assert [r.index for r in rank([bad, _row(1, 2, 1.0, 1.0)])] == [1, 9]


@given(st.lists(st.tuples(st.floats(0, 100), st.floats(0, 100)), min_size=1, max_size=30))
def test_pareto_front_is_exactly_the_non_dominated(points: list[tuple[float, float]]) -> None:
    front = set(pareto(points))
    for i, (x, y) in enumerate(points):
        dominated = any(
            (ox <= x and oy >= y) and ((ox, oy) != (x, y) or j < i) for j, (ox, oy) in enumerate(points) if j != i
        )
        assert (i in front) == (not dominated)


def test_plot_png_and_svg(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")  # the optional plot extra; .ci/run installs it
    base: dict[str, Any] = {"synthetic": 60, "rate": 25.0, "isl_mean": 900, "osl_mean": 24, "seed": 3, "sla_ttft_ms": 120.0}
    outcome = run_sweep(plan_sweep(ReplayConfig.from_values(base), {"prefill_workers": (1, 2), "decode_workers": (1, 2)}),
                        jobs=1)
    from dmocker.sweep.plot import plot_frontier

    png = plot_frontier(outcome.rows, tmp_path / "f.png", max_rate=False)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    svg1 = plot_frontier(outcome.rows, tmp_path / "f.svg", max_rate=False)
    svg2 = plot_frontier(outcome.rows, tmp_path / "f.svg", max_rate=False)
    assert svg1 == svg2  # byte-stable
    text = svg1.decode()
    assert "<!-- p99 TTFT (ms) -->" in text and "<!-- goodput per GPU (req/s) -->" in text
    assert "<!-- Pareto frontier -->" in text and "<!-- cheapest meeting the SLA -->" in text
    assert text.count("<svg") == 1 and "http://purl.org" not in text


def test_from_json_reranks_without_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "sweep.json"
    assert dmocker_main(["sweep", *WORKLOAD, "--prefill-workers", "1,2", "--sla-ttft-ms", "120",
                         "--jobs", "1", "--out", str(out)]) == 0
    table = capsys.readouterr().out
    import dmocker.sweep.task as task_mod

    def never(*_a: object, **_k: object) -> Any:
        raise AssertionError("a replay ran")

    monkeypatch.setattr(task_mod, "_replay", never)
    assert dmocker_main(["sweep", "--from-json", str(out)]) == 0
    assert capsys.readouterr().out == table
    bad = tmp_path / "bad.json"
    bad.write_text('{"runs": []}')
    assert dmocker_main(["sweep", "--from-json", str(bad)]) == 2
    assert "not a dmocker sweep.json" in capsys.readouterr().err
