"""The docs document every field a replay writes: summary, records and event log in
docs/replay-fields.md, the config section (every dotted path) in docs/config.md.

The field lists come from real runs (both engines, a trace and a synthetic workload, with SLA
bounds so that the goodput fields exist), so a field added to the code without a line in the
docs fails here.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest

from dmocker.replay import ReplayConfig, run
from dmocker.replay.config import field_paths

DOC = Path(__file__).resolve().parents[2] / "docs" / "replay-fields.md"
CONFIG_DOC = DOC.parent / "config.md"
TRACE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "chat.jsonl"


def _expand(token: str) -> list[str]:
    """``{mean,min}_ttft_ms`` -> ``mean_ttft_ms``, ``min_ttft_ms`` (any number of brace groups)."""
    parts = re.split(r"\{([^{}]*)\}", token)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def documented_names(text: str) -> set[str]:
    names: set[str] = set()
    for token in re.findall(r"`([^`\n]+)`", text):
        names.update(_expand(token.strip()))
    return names


def _paths(value: object, prefix: str, tables: set[str]) -> set[str]:
    """The dotted paths of a report's config section (a null table is not a field)."""
    if isinstance(value, dict):
        return set().union(*(_paths(v, f"{prefix}{k}.", tables) for k, v in value.items())) if value else set()
    path = prefix.rstrip(".")
    return set() if value is None and path in tables else {path}


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, set[str]]:
    out = tmp_path_factory.mktemp("fields")
    fields: dict[str, set[str]] = {"summary": set(), "config": set(), "record": set(), "event": set()}
    tables = {p.rsplit(".", i)[0] for p in field_paths() for i in range(1, p.count(".") + 1)}
    runs: list[dict[str, object]] = [
        dict(synthetic=30, engine="vllm", sla_ttft_ms=50.0, sla_itl_ms=10.0, sla_e2e_ms=2000.0),
        dict(synthetic=30, engine="sglang", block_size=64, max_in_flight=4, turns=3),
        dict(trace=str(TRACE), engine="vllm", max_sim_time_ms=300.0),
    ]
    for i, kw in enumerate(runs):
        rec, ev = out / f"r{i}.jsonl", out / f"e{i}.jsonl"
        report = run(ReplayConfig.from_values({"per_request": rec, "events": ev, **kw}))
        fields["summary"] |= set(report.summary)
        fields["config"] |= _paths(report.config, "", tables)
        for line in rec.read_text().splitlines():
            fields["record"] |= set(json.loads(line))
        for line in ev.read_text().splitlines()[1:]:
            fields["event"] |= set(json.loads(line))
    return fields


@pytest.mark.parametrize("kind", ["summary", "config", "record", "event"])
def test_every_written_field_is_documented(written: dict[str, set[str]], kind: str) -> None:
    doc = CONFIG_DOC if kind == "config" else DOC
    names = documented_names(doc.read_text(encoding="utf-8"))
    missing = sorted(written[kind] - names)
    assert missing == [], f"{doc.relative_to(DOC.parents[1])} does not document these {kind} fields: {missing}"


def test_the_runs_write_the_fields_the_docs_promise(written: dict[str, set[str]]) -> None:
    # Guards the fixture: the goodput fields and every distribution family are present.
    assert {"goodput_completed_requests", "p99_itl_ms", "std_output_token_throughput_per_user"} <= written["summary"]
    assert {"uuid", "terminal_status", "source_released_ms"} <= written["record"]
    assert {"handoff", "t_ms", "event", "engine", "worker", "tokens", "detail"} <= written["event"]
    assert {"workload.trace.path", "workload.synthetic.rate", "workload.synthetic.turn_delay_ms", "capped",
            "decode.block_size", "router.kv.router_queue_policy"} <= written["config"]


def test_expand_and_extract() -> None:
    assert _expand("{mean,p99}_ttft_ms") == ["mean_ttft_ms", "p99_ttft_ms"]
    assert documented_names("a `x` and `{a,b}_{c,d}`") == {"x", "a_c", "a_d", "b_c", "b_d"}
    assert "ttft_ms" not in documented_names("the `mean_ttft_ms` field")
