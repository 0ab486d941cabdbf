"""The CLI edge: exit codes, no report on abort, atomic files, JUnit shape, docs in sync."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from dmocker.cli.conform import main
from dmocker.conformance.events import EVENT_KINDS
from dmocker.handoff import load_spec

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "conformance"


def test_abort_without_keep_going_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.json"
    code = main([str(SUITE / "invalid/11-unknown-event-kind.jsonl"), "--json", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert "11-unknown-event-kind.jsonl:2: event: unknown event kind 'source_hold'" in err


@pytest.mark.parametrize("args, fragment", [
    (["/nonexistent/log.jsonl"], "no such file"),
    ([str(SUITE / "valid")], "is a directory"),
    ([str(SUITE / "valid/source-first.jsonl"), "--json", "/nonexistent/dir/r.json"], "does not exist"),
    ([str(SUITE / "dynamo-records/vllm.jsonl"), "--format", "dynamo-records"], "--order or --engine"),
    ([str(SUITE / "valid/source-first.jsonl"), "--engine", "tgi"], "unknown engine"),
    ([str(SUITE / "valid/source-first.jsonl"), "--engine", "vllm", "--order", "destination-first"], "but --order says"),
    ([], "give a LOG"),
])
def test_bad_arguments_exit_2(args: list[str], fragment: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    assert fragment in capsys.readouterr().err


def test_empty_log_is_unreadable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    assert main([str(empty)]) == 2
    assert "no events" in capsys.readouterr().out


def test_junit_has_one_testcase_per_order_and_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    junit = tmp_path / "r.xml"
    assert main([str(SUITE / "invalid/06-double-completion.jsonl"), "--junit", str(junit)]) == 1
    capsys.readouterr()
    root = ET.parse(junit).getroot()
    cases = root.findall(".//testcase")
    names = [c.get("name") for c in cases]
    assert "source-first: event_after_completion" in names and "source-first: incomplete" in names
    failing = [c.get("name") for c in cases if c.find("failure") is not None]
    assert failing == ["source-first: event_after_completion"]
    assert root.get("failures") == "1"


def test_stdin_and_quiet(capsys: pytest.CaptureFixture[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "dmocker.cli.conform", "-", "--quiet"],
        input=(SUITE / "valid/mixed-engines.jsonl").read_text(encoding="utf-8"),
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "verdict: CONFORMS (exit 0)"


def test_report_is_byte_identical_across_hash_seeds(tmp_path: Path) -> None:
    outs = []
    for seed in ("0", "12345"):
        out = tmp_path / f"r{seed}.json"
        subprocess.run(
            [sys.executable, "-m", "dmocker.cli.conform", str(SUITE / "valid/source-first.jsonl"), "--json", str(out)],
            env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"}, capture_output=True, check=True,
        )
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]


def test_schema_and_docs_agree_with_the_spec() -> None:
    spec = load_spec()
    schema = json.loads((REPO / "spec/event-log.schema.json").read_text(encoding="utf-8"))
    assert schema["$defs"]["event"]["properties"]["event"]["enum"] == list(EVENT_KINDS) == list(spec.log_kinds)
    produced: dict[str, set[str]] = {}
    for t in (*spec.transitions, *spec.rules):
        if t.log:
            produced.setdefault(t.log, set()).add(t.id)
    doc = (REPO / "docs/conformance.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(\w+)` \| [^|]+ \| (.+) \|$", doc, flags=re.M)
    table = {event: cell for event, cell in rows if event in spec.observable_kinds}
    assert set(table) == set(spec.observable_kinds)
    for event, cell in table.items():
        ids = set(re.findall(r"`(\w+)`", cell))
        wildcard = [w[:-1] for w in re.findall(r"`(\w+\*)`", cell)]
        expected = produced[event]
        covered = ids | {t for t in expected for w in wildcard if t.startswith(w)}
        assert covered >= expected and ids - {w + "*" for w in wildcard} <= expected | set(), (event, ids, expected)
    worker_rows = re.findall(r"^\| `(\w+)` \| ([^|]+) \| (\w+) \| ([^|]+) \| ([^|]+) \|$", doc, flags=re.M)
    documented = {row[0]: row[1:] for row in worker_rows if spec.worker_kind(row[0]) is not None}
    assert list(documented) == [k.name for k in spec.worker_kinds]
    for kind in spec.worker_kinds:
        orders, side, when, then = documented[kind.name]
        assert orders == ", ".join(o.value for o in kind.orders) and side == kind.side, kind.name
        assert when == kind.describe_when(), kind.name
        assert then.startswith(f"fact {kind.fact}" if kind.fact else "nothing"), kind.name


@pytest.mark.slow  # jsonschema over every line of the suite
def test_schema_validates_the_suite_when_jsonschema_is_available() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((REPO / "spec/event-log.schema.json").read_text(encoding="utf-8"))
    logs = [p for p in sorted((SUITE / "valid").glob("*.jsonl")) if not p.name.endswith("-records.jsonl")]
    assert logs  # *-records.jsonl are Dynamo per-request records (--format dynamo-records), not event logs
    for path in logs:
        for line in path.read_text(encoding="utf-8").splitlines():
            jsonschema.validate(json.loads(line), schema)


def _doc_block(after: str) -> list[str]:
    doc = (REPO / "docs/conformance.md").read_text(encoding="utf-8").splitlines()
    start = doc.index(after) + 1
    out = []
    for line in doc[start:]:
        if line.startswith("$ ") or line.startswith("```") or line == "…":
            break
        out.append(line)
    return out


def test_docs_worked_example_is_what_the_cli_prints(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    assert main(["conformance/invalid/01-sf-reserve-before-held.jsonl"]) == 1
    printed = capsys.readouterr().out.splitlines()
    assert printed == _doc_block("$ dmocker conform conformance/invalid/01-sf-reserve-before-held.jsonl")


def test_docs_fixture_example_is_what_the_cli_prints(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--fixture", "sglang"]) == 0
    printed = capsys.readouterr().out.splitlines()
    expected = _doc_block("$ dmocker conform --fixture sglang")
    assert printed[: len(expected)] == expected
