"""The Mermaid and DOT writers on small hand-built diagrams: syntax, escaping, markings."""

from __future__ import annotations

import pytest

from dmocker.diagrams.dot import quote, to_dot
from dmocker.diagrams.mermaid import escape_label, to_mermaid
from dmocker.diagrams.model import Cluster, Diagram, Edge, Node, NodeKind, safe_id, validate


def _tiny() -> Diagram:
    return Diagram(
        title="tiny: demo",
        nodes=(
            Node("a", "start"),
            Node("b", 'two\nlines "quoted"', NodeKind.COMPLETE),
            Node("c", "end", NodeKind.FINAL),
        ),
        edges=(
            Edge("a", "b", ("go; now: fast",)),
            Edge("b", "c", ("x / A", "y / B"), primary=True),
        ),
        initial="a",
        direction="TB",
    )


def test_mermaid_escapes_statement_breakers_and_marks_states() -> None:
    text = to_mermaid(_tiny())
    lines = text.splitlines()
    assert lines[:4] == ["---", 'title: "tiny: demo"', "---", "stateDiagram-v2"]
    assert "    direction TB" in lines
    assert "    [*] --> a" in lines
    # ';' would end the statement and ':' the label: both become entity codes.
    assert "    a --> b : go#59; now#58; fast" in lines
    assert "    b --> c : x / A<br>y / B" in lines
    assert '    state "two<br>lines #quot;quoted#quot;" as b' in lines
    assert "    c --> [*]" in lines
    assert "    class b complete" in lines
    assert "    class c final" in lines
    # No raw newline inside a statement: every line is a whole statement.
    assert all(";" not in line.replace("#59;", "").replace("#58;", "").replace("#quot;", "")
               .replace("#35;", "") for line in lines if "-->" in line or "state " in line)


def test_escape_label_entities_do_not_escape_each_other() -> None:
    assert escape_label("a;b:c#d") == "a#59;b#58;c#35;d"
    assert escape_label("1\n2") == "1<br>2"


def test_dot_quotes_and_marks_states() -> None:
    text = to_dot(_tiny())
    assert text.startswith('digraph "tiny: demo" {\n')
    assert text.endswith("}\n")
    assert '"b" [label="two\\nlines \\"quoted\\"", style="rounded,bold", penwidth=2];' in text
    assert 'peripheries=2' in text.split('"c" [', 1)[1].split("\n", 1)[0]
    assert '"a" -> "b" [label="go; now: fast"];' in text
    assert '"b" -> "c" [label="x / A\\ny / B", weight=20, penwidth=1.8];' in text
    assert '"__initial_start" [shape=point' in text
    assert '"__initial_start" -> "a";' in text


def test_dot_quote_escapes_backslash_first() -> None:
    assert quote('a\\b"c\nd') == '"a\\\\b\\"c\\nd"'


def test_clusters_are_written_as_composites_and_subgraphs() -> None:
    cluster = Cluster(
        "region_r", "r", (Node("r_x", "x"), Node("r_y", "y", NodeKind.FINAL)),
        (Edge("r_x", "r_y", ("e",)),), initial="r_x",
    )
    other = Cluster("region_q", "q", (Node("q_z", "z"),), (), initial="q_z")
    diagram = Diagram("two", clusters=(cluster, other))
    mermaid = to_mermaid(diagram)
    assert '    state "r" as region_r {' in mermaid
    assert "        [*] --> r_x" in mermaid
    assert "        r_y --> [*]" in mermaid
    dot = to_dot(diagram)
    assert 'subgraph "cluster_region_r" {' in dot
    # LR layouts stack clusters bottom-up, so they are written reversed (first region on top).
    assert dot.index("cluster_region_q") < dot.index("cluster_region_r")


def test_outputs_are_deterministic() -> None:
    assert to_mermaid(_tiny()) == to_mermaid(_tiny())
    assert to_dot(_tiny()) == to_dot(_tiny())


@pytest.mark.parametrize(
    "diagram, message",
    [
        (Diagram("d", nodes=(Node("a", "x"), Node("a", "y"))), "duplicate node id"),
        (Diagram("d", nodes=(Node("a-b", "x"),)), "unsafe node id"),
        (Diagram("d", nodes=(Node("a", "x"),), edges=(Edge("a", "zz"),)), "edge end 'zz'"),
        (Diagram("d", nodes=(Node("a", "x"),), initial="q"), "initial node 'q'"),
        (Diagram("d", nodes=(Node("a", "x"),), direction="RL"), "direction"),
    ],
)
def test_validate_rejects_broken_diagrams(diagram: Diagram, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate(diagram)
    with pytest.raises(ValueError, match=message):
        to_mermaid(diagram)


def test_safe_id() -> None:
    assert safe_id("source-first", "a.b c") == "source_first_a_b_c"
    assert safe_id("1x") == "s_1x"
