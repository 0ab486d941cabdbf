"""Keep docs/protocol.md and docs/diagrams/ in step with the spec.

The prose of docs/protocol.md is written by hand; the diagrams inside it are generated.  Each
generated block sits between two HTML comments (invisible on GitHub)::

    <!-- BEGIN GENERATED mermaid source-first flow -->
    ```mermaid
    ...
    ```
    <!-- END GENERATED mermaid source-first flow -->

:func:`expected` computes every generated text (the Mermaid blocks and the DOT files of
docs/diagrams/); :func:`stale` compares them with what is on disk, so a test fails when the spec
changed and the docs did not; :func:`update` rewrites them (atomically) and renders the SVGs.
SVG bytes depend on the Graphviz version, so they are regenerated but never compared.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from dmocker._atomic import write_atomic
from dmocker.handoff import ProtocolSpec
from dmocker.handoff import HandoffOrder

from .dot import to_dot
from .mermaid import to_mermaid
from .render import ImageFormat, render
from .views import View, build_diagram

PROTOCOL_MD = "protocol.md"
DIAGRAM_DIR = "diagrams"
#: Views embedded as Mermaid in protocol.md (the explored graph is too big for Mermaid; it is
#: linked as SVG instead).
MERMAID_VIEWS = (View.FLOW, View.REGIONS, View.WORKERS)
FILE_VIEWS = (View.FLOW, View.REGIONS, View.EXPLORED, View.WORKERS)


@dataclass(frozen=True, slots=True)
class Block:
    """One generated Mermaid block of protocol.md."""

    order: HandoffOrder
    view: View
    text: str

    @property
    def tag(self) -> str:
        if self.view is View.WORKERS:  # the same machines in both orders: one block
            return f"mermaid {self.view.value!s}"
        return f"mermaid {self.order.value} {self.view.value}"


@dataclass(frozen=True, slots=True)
class DotFile:
    """One generated DOT file (and the SVG rendered from it) under docs/diagrams/."""

    order: HandoffOrder
    view: View
    text: str

    @property
    def stem(self) -> str:
        if self.view is View.WORKERS:
            return str(self.view.value)
        return f"{self.order.value}-{self.view.value}"


@dataclass(frozen=True, slots=True)
class Expected:
    blocks: tuple[Block, ...]
    dot_files: tuple[DotFile, ...]


def default_docs_dir() -> Path:
    """The repository's docs/ (next to the dmocker package in a source checkout)."""
    return Path(__file__).resolve().parents[2] / "docs"


def expected(spec: ProtocolSpec) -> Expected:
    """Every generated text, in a fixed order (orders, then views)."""
    blocks: list[Block] = []
    files: list[DotFile] = []
    for order in HandoffOrder:
        for view in FILE_VIEWS:
            if view is View.WORKERS and order is not HandoffOrder.SOURCE_FIRST:
                continue  # one picture for both orders
            diagram = build_diagram(spec, order, view)
            if view in MERMAID_VIEWS:
                blocks.append(Block(order, view, to_mermaid(diagram)))
            files.append(DotFile(order, view, to_dot(diagram)))
    return Expected(tuple(blocks), tuple(files))


def _markers(tag: str) -> tuple[str, str]:
    return f"<!-- BEGIN GENERATED {tag} -->", f"<!-- END GENERATED {tag} -->"


def _block_body(block: Block) -> str:
    return f"```mermaid\n{block.text}```\n"


class DocsError(ValueError):
    """docs/protocol.md lacks a marker pair, or has it twice."""


def _find(md: str, tag: str, path: Path) -> tuple[int, int]:
    """The span of the text between the BEGIN and END markers of ``tag``."""
    begin, end = _markers(tag)
    starts = [m.start() for m in re.finditer(re.escape(begin), md)]
    if len(starts) != 1:
        line = md.count("\n", 0, starts[1]) + 1 if len(starts) > 1 else 0
        where = f"line {line}: duplicate" if starts else "missing"
        raise DocsError(f"{path}: {where} marker {begin!r}")
    body_start = md.index("\n", starts[0]) + 1
    stop = md.find(end, body_start)
    if stop < 0:
        line = md.count("\n", 0, starts[0]) + 1
        raise DocsError(f"{path}: line {line}: {begin!r} has no matching {end!r}")
    return body_start, stop


def stale(spec: ProtocolSpec, docs_dir: Path | None = None) -> list[str]:
    """What is out of date under ``docs_dir``, one message each (empty: all current)."""
    root = docs_dir if docs_dir is not None else default_docs_dir()
    want = expected(spec)
    problems: list[str] = []
    md_path = root / PROTOCOL_MD
    try:
        md = md_path.read_text(encoding="utf-8")
    except OSError as exc:
        problems.append(f"{md_path}: cannot read: {exc.strerror or exc}")
        md = None
    if md is not None:
        for block in want.blocks:
            try:
                start, stop = _find(md, block.tag, md_path)
            except DocsError as exc:
                problems.append(str(exc))
                continue
            if md[start:stop] != _block_body(block):
                line = md.count("\n", 0, start) + 1
                problems.append(f"{md_path}: line {line}: Mermaid block {block.tag!r} is stale")
    for dot_file in want.dot_files:
        path = root / DIAGRAM_DIR / f"{dot_file.stem}.dot"
        try:
            current = path.read_text(encoding="utf-8")
        except OSError:
            problems.append(f"{path}: missing")
            continue
        if current != dot_file.text:
            problems.append(f"{path}: stale")
        svg = path.with_suffix(".svg")
        if not svg.is_file():
            problems.append(f"{svg}: missing")
    return problems


def update(spec: ProtocolSpec, docs_dir: Path | None = None, *, svg: bool = True) -> list[Path]:
    """Rewrite the generated blocks and files; returns the paths written.

    Text is written first, so a missing Graphviz (GraphvizMissing, raised afterwards) still
    leaves the Mermaid and DOT current.
    """
    root = docs_dir if docs_dir is not None else default_docs_dir()
    want = expected(spec)
    written: list[Path] = []
    md_path = root / PROTOCOL_MD
    try:
        md = md_path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DocsError(f"{md_path}: cannot read: {exc.strerror or exc}") from None
    new_md = md
    for block in want.blocks:
        start, stop = _find(new_md, block.tag, md_path)
        new_md = new_md[:start] + _block_body(block) + new_md[stop:]
    if new_md != md:
        write_atomic(md_path, new_md.encode("utf-8"), make_parents=True)
        written.append(md_path)
    for dot_file in want.dot_files:
        path = root / DIAGRAM_DIR / f"{dot_file.stem}.dot"
        data = dot_file.text.encode("utf-8")
        if not path.is_file() or path.read_bytes() != data:
            write_atomic(path, data, make_parents=True)
            written.append(path)
    if svg:
        for dot_file in want.dot_files:
            path = root / DIAGRAM_DIR / f"{dot_file.stem}.svg"
            write_atomic(path, render(dot_file.text, ImageFormat.SVG), make_parents=True)
            written.append(path)
    return written
