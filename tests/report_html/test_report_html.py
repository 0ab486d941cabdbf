"""``dmocker replay --html``: one self-contained page; optional sections; rendered by Chromium."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")  # the optional plot extra; .ci/run installs it

from dmocker.cli.replay import main as replay_main  # noqa: E402
from dmocker.replay import ReplayConfig, run  # noqa: E402
from dmocker.replay.timeseries import TimeSeriesRecorder  # noqa: E402
from dmocker.report_html import render_html  # noqa: E402

SMALL = {"synthetic": 150, "rate": 30.0, "isl_mean": 900, "osl_mean": 30, "seed": 2}
STANDARD_FIGURES = 4  # latency CDFs, throughput + in flight, queue depth, KV usage


def _no_fetches(page: str) -> None:
    assert "<script" not in page and "<link" not in page and "<iframe" not in page and "<img" not in page
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page)
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", page) and "@import" not in page
    # the only absolute URLs are the SVG/XLink namespace names, which are never fetched
    assert set(re.findall(r"https?://[^\s\"'<>]+", page)) <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}


@pytest.mark.slow
def test_page_is_self_contained_and_deterministic() -> None:
    report = run(ReplayConfig.from_values({"timeseries": True, **SMALL}))
    page = render_html(report)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert page.count("<svg") == STANDARD_FIGURES
    for sid in ("summary", "latency", "throughput", "queues", "kv", "config"):
        assert f'<section id="{sid}">' in page
    for sid in ("workers", "failures", "other"):  # no planner, no faults: no empty sections
        assert f'<section id="{sid}">' not in page
    _no_fetches(page)
    assert render_html(run(ReplayConfig.from_values({"timeseries": True, **SMALL}))) == page


@pytest.mark.slow
def test_planner_and_fault_series_get_their_sections() -> None:
    report = run(ReplayConfig.from_values({"timeseries": True, **SMALL}))
    assert report.timeseries is not None
    rec = TimeSeriesRecorder(bucket_ms=report.timeseries.bucket_ms)
    counts = [("prefill", 2.0), ("decode", 2.0)]
    rec.add_gauge("workers", lambda: tuple(counts))
    rec.sample_until(2000.0)
    counts[1] = ("decode", 3.0)
    rec.sample_until(4000.0)
    rec.count("failures", "transfer_timeout", 1500.0)
    rec.count("failures", "worker_lost", 2500.0, 3.0)
    rec.count("custom_thing", "a", 100.0)
    extra = rec.series()
    ts = dataclasses.replace(report.timeseries, series={**report.timeseries.series, **extra})
    page = render_html(dataclasses.replace(report, timeseries=ts))
    for sid in ("workers", "failures", "other"):
        assert f'<section id="{sid}">' in page
    assert page.count("<svg") == STANDARD_FIGURES + 3
    assert "<!-- Worker counts -->" in page and "<!-- Failures by cause -->" in page
    assert ">worker_lost</th><td class=\"n\">3.000</td>" in page


def test_cli_writes_the_report_and_refuses_without_matplotlib(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--synthetic", "60", "--rate", "30", "--isl-mean", "800", "--osl-mean", "20", "--quiet"]
    out = tmp_path / "report.html"
    assert replay_main([*args, "--html", str(out)]) == 0
    assert out.read_text().count("<svg") == STANDARD_FIGURES

    import dmocker.plotting as plotting

    real = plotting.importlib.import_module

    def no_mpl(name: str, *a: object) -> object:
        if name == "matplotlib":
            raise ImportError("No module named 'matplotlib'")
        return real(name, *a)

    monkeypatch.setattr(plotting.importlib, "import_module", no_mpl)
    missing = tmp_path / "missing.html"
    assert replay_main([*args, "--html", str(missing)]) == 2
    assert 'pip install "dmocker[plot]"' in capsys.readouterr().err
    assert not missing.exists()


def _png_pixels(path: Path) -> np.ndarray:
    import matplotlib.image

    return np.asarray(matplotlib.image.imread(str(path)))


@pytest.mark.slow  # headless Chromium
@pytest.mark.skipif(shutil.which("chromium") is None, reason="Debian package chromium not installed (.ci/run installs it)")
def test_chromium_renders_the_figures(tmp_path: Path) -> None:
    page = tmp_path / "report.html"
    assert replay_main(["--synthetic", "150", "--rate", "30", "--isl-mean", "900", "--osl-mean", "30",
                        "--quiet", "--html", str(page)]) == 0
    shot = tmp_path / "shot.png"
    profile = tmp_path / "profile"
    proc = subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", f"--screenshot={shot}", "--window-size=1200,2400", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0 and shot.exists(), proc.stderr[-2000:]
    px = _png_pixels(shot)[..., :3]
    assert px.shape[0] == 2400 and px.shape[1] == 1200
    # not blank: many distinct colours and, below the summary, figure ink (non-white pixels)
    colours = np.unique((px.reshape(-1, 3) * 255).astype(np.uint8), axis=0)
    assert len(colours) > 200
    figures = px[700:2300]
    ink = (figures.sum(axis=2) < 2.7).mean()
    assert ink > 0.03
    blue = ((figures[..., 2] > 0.8) & (figures[..., 0] < 0.3)).mean()  # the plotted lines
    assert blue > 0.0005


@pytest.mark.slow
def test_faults_add_a_failures_section() -> None:
    from dmocker.replay.faults import FaultPlan

    report = run(ReplayConfig.from_values({
        "timeseries": True, "faults": FaultPlan(cancel_rate=0.1, fail_rate=0.1, seed=4), **SMALL,
    }))
    causes = report.summary["failures_by_cause"]
    assert isinstance(causes, dict) and causes["client_cancel"] and causes["action_failed"]
    page = render_html(report)
    assert '<section id="failures">' in page and "<!-- Failures by cause (whole run) -->" in page
    assert "<!-- client_cancel -->" in page and page.count("<svg") == STANDARD_FIGURES + 1
    _no_fetches(page)
