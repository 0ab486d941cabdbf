"""``dmocker diagram`` end to end: formats, files, exit codes, Graphviz missing."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dmocker.cli import diagram as cli
from dmocker.diagrams.render import dot_program

ROOT = Path(__file__).resolve().parents[2]
needs_dot = pytest.mark.skipif(
    dot_program() is None, reason="Graphviz 'dot' not installed (apt-get install -y graphviz)"
)


def test_add_parser_registers_the_verb() -> None:
    parser = argparse.ArgumentParser(prog="dmocker")
    cli.add_parser(parser.add_subparsers(dest="verb"))
    args = parser.parse_args(["diagram", "--order", "destination-first", "--format", "dot"])
    assert args.func is cli.run and args.order == "destination-first" and args.format == "dot"


def test_mermaid_on_stdout_by_default(capfd: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 0
    out = capfd.readouterr().out
    assert out.startswith("---\ntitle: ") and "stateDiagram-v2" in out
    assert "source-first - happy path and cleanup" in out


@pytest.mark.parametrize("order", ["source-first", "destination-first"])
@pytest.mark.parametrize("view", [["--view", "flow"], ["--view", "regions"], ["--explored"]])
def test_dot_files_for_every_view(tmp_path: Path, order: str, view: list[str]) -> None:
    out = tmp_path / "d.dot"
    assert cli.main(["--order", order, "--out", str(out), *view]) == 0
    text = out.read_text(encoding="utf-8")
    assert text.startswith("digraph ") and order in text.splitlines()[0]
    assert "0x" not in text  # no object ids


def test_unknown_suffix_and_bad_spec_exit_2(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--out", str(tmp_path / "d.txt")]) == 2
    assert "cannot tell the format" in capfd.readouterr().err
    bad = tmp_path / "spec.json"
    bad.write_text('{"spec_version": 1,\n')
    assert cli.main(["--spec", str(bad)]) == 2
    err = capfd.readouterr().err
    assert str(bad) in err and "line 2" in err
    assert cli.main(["--update-docs", "--format", "svg"]) == 2
    assert cli.main(["--explored", "--view", "regions"]) == 2
    assert "takes no --view" in capfd.readouterr().err


def test_svg_without_graphviz_says_how_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no dot here
    out = tmp_path / "d.svg"
    assert cli.main(["--out", str(out)]) == 2
    err = capfd.readouterr().err
    assert "'dot' program" in err and "apt-get install -y graphviz" in err
    assert not out.exists()


@needs_dot
def test_svg_and_png(tmp_path: Path) -> None:
    svg = tmp_path / "d.svg"
    assert cli.main(["--view", "regions", "--out", str(svg)]) == 0
    assert "<svg" in svg.read_text(encoding="utf-8")
    png = tmp_path / "d.png"
    assert cli.main(["--order", "destination-first", "--format", "png", "--out", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert oct(png.stat().st_mode & 0o777) == "0o644"


def test_check_docs_exit_codes(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--check-docs"]) == 0
    docs_copy = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs_copy)
    (docs_copy / "diagrams" / "source-first-flow.dot").write_text("digraph {}\n")
    assert cli.main(["--check-docs", "--docs", str(docs_copy)]) == 1
    assert "source-first-flow.dot: stale" in capfd.readouterr().err


def test_output_does_not_depend_on_hash_seed() -> None:
    """Two processes with different hash seeds print byte-identical DOT and Mermaid."""
    script = (
        "from dmocker.handoff import load_spec\n"
        "from dmocker.handoff import HandoffOrder\n"
        "from dmocker.diagrams import build_diagram, View, to_dot, to_mermaid\n"
        "s = load_spec()\n"
        "for o in HandoffOrder:\n"
        "    for v in View:\n"
        "        d = build_diagram(s, o, v)\n"
        "        print(to_dot(d)); print(to_mermaid(d))\n"
    )
    outs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(ROOT))
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                              text=True, check=True, cwd=ROOT)
        outs.append(done.stdout)
    assert outs[0] == outs[1] and len(outs[0]) > 10_000


def test_explored_graph_of_a_named_coordinator(tmp_path: Path) -> None:
    """--explored --coordinator draws the checker's explored graph of any coordinator class."""
    from dmocker.cli.main import main

    out = tmp_path / "explored.dot"
    assert main(["diagram", "--explored", "--coordinator", "dmocker.handoff:HandoffCoordinator", "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("digraph") and "explored state graph" in text and "complete: success" in text
    assert main(["diagram", "--coordinator", "dmocker.handoff:HandoffCoordinator"]) == 2
    assert main(["diagram", "--explored", "--coordinator", "no_such_module:X"]) == 2
