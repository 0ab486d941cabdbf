"""docs/protocol.md and docs/diagrams/ must match what the spec generates.

If this fails after a spec change, run ``dmocker diagram --update-docs`` and commit the result.
SVG bytes depend on the Graphviz version, so only their presence is checked.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dmocker.diagrams import docs
from dmocker.diagrams.render import dot_program
from dmocker.handoff import load_spec

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_generated_docs_are_current() -> None:
    problems = docs.stale(load_spec(), DOCS)
    assert problems == [], "stale docs; run `dmocker diagram --update-docs`:\n" + "\n".join(problems)


def test_protocol_md_embeds_every_mermaid_block_and_links_every_svg() -> None:
    md = (DOCS / "protocol.md").read_text(encoding="utf-8")
    want = docs.expected(load_spec())
    assert len(want.blocks) == 5  # flow and regions per order, and the workers (one for both orders)
    for block in want.blocks:
        assert f"<!-- BEGIN GENERATED {block.tag} -->\n```mermaid\n---\n" in md
    for dot_file in want.dot_files:
        assert f"diagrams/{dot_file.stem}.svg" in md


@pytest.fixture()
def docs_copy(tmp_path: Path) -> Path:
    target = tmp_path / "docs"
    shutil.copytree(DOCS, target)
    return target


def test_stale_mermaid_block_is_reported(docs_copy: Path) -> None:
    md_path = docs_copy / "protocol.md"
    md = md_path.read_text(encoding="utf-8")
    start = md.index("<!-- BEGIN GENERATED mermaid destination-first flow -->")
    tampered = md[start:].replace("ReserveDestination.Accepted", "ReserveDestination.Acepted", 1)
    md_path.write_text(md[:start] + tampered)
    problems = docs.stale(load_spec(), docs_copy)
    assert len(problems) == 1 and "is stale" in problems[0] and "mermaid" in problems[0]
    assert "protocol.md: line " in problems[0]


def test_stale_or_missing_dot_and_missing_svg_are_reported(docs_copy: Path) -> None:
    (docs_copy / "diagrams" / "source-first-flow.dot").write_text("digraph {}\n")
    (docs_copy / "diagrams" / "destination-first-regions.dot").unlink()
    (docs_copy / "diagrams" / "source-first-explored.svg").unlink()
    problems = docs.stale(load_spec(), docs_copy)
    assert any(p.endswith("source-first-flow.dot: stale") for p in problems)
    assert any(p.endswith("destination-first-regions.dot: missing") for p in problems)
    assert any(p.endswith("source-first-explored.svg: missing") for p in problems)
    assert len(problems) == 3


def test_missing_marker_is_named(docs_copy: Path) -> None:
    md_path = docs_copy / "protocol.md"
    md = md_path.read_text(encoding="utf-8")
    md_path.write_text(md.replace("<!-- END GENERATED mermaid destination-first flow -->", ""))
    problems = docs.stale(load_spec(), docs_copy)
    assert any("has no matching" in p and "destination-first flow" in p for p in problems)
    with pytest.raises(docs.DocsError, match="destination-first flow"):
        docs.update(load_spec(), docs_copy, svg=False)


def test_update_repairs_text_and_keeps_the_prose(docs_copy: Path) -> None:
    md_path = docs_copy / "protocol.md"
    original = md_path.read_text(encoding="utf-8")
    start = original.index("<!-- BEGIN GENERATED mermaid source-first regions -->")
    stop = original.index("<!-- END GENERATED mermaid source-first regions -->")
    md_path.write_text(original[: start] + original[start:].split("\n", 1)[0] + "\n" + original[stop:])
    (docs_copy / "diagrams" / "source-first-flow.dot").write_text("digraph {}\n")
    written = docs.update(load_spec(), docs_copy, svg=False)
    assert md_path in written and docs_copy / "diagrams" / "source-first-flow.dot" in written
    assert md_path.read_text(encoding="utf-8") == original
    assert docs.stale(load_spec(), docs_copy) == []
    # A second update writes nothing: the output is a fixed point.
    assert docs.update(load_spec(), docs_copy, svg=False) == []


@pytest.mark.skipif(dot_program() is None, reason="Graphviz 'dot' not installed (apt-get install -y graphviz)")
def test_update_renders_svgs(docs_copy: Path) -> None:
    for svg in (docs_copy / "diagrams").glob("*.svg"):
        svg.unlink()
    docs.update(load_spec(), docs_copy)
    svgs = sorted(p.name for p in (docs_copy / "diagrams").glob("*.svg"))
    assert len(svgs) == 7
    for name in svgs:
        head = (docs_copy / "diagrams" / name).read_text(encoding="utf-8")[:400]
        assert "<svg" in head or "<?xml" in head
