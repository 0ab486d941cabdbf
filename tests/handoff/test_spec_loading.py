"""Loading validates the spec: every broken element is named with the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import pytest

from dmocker.cli.main import main
from dmocker.handoff import SpecError, load_spec
from dmocker.handoff import default_spec_path

RAW = json.loads(default_spec_path().read_text())


def _mutate(tmp_path: Path, change: Callable[[dict], None]) -> Path:
    doc = json.loads(json.dumps(RAW))
    change(doc)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(doc))
    return path


def _transition(doc: dict, tid: str) -> dict:
    return next(t for t in doc["transitions"] + doc["rules"] if t["id"] == tid)


CASES = {
    "unknown state": (lambda d: _transition(d, "held").update(set={"source": "helld"}), "unknown state 'helld'"),
    "unknown region": (lambda d: _transition(d, "held")["when"].update(sauce="x"), "unknown region 'sauce'"),
    "unknown event": (lambda d: _transition(d, "held").update(event="SourceHold"), "unknown event 'SourceHold'"),
    "unknown action": (lambda d: _transition(d, "reserve_after_held").update(emit=["Reserve"]), "unknown action 'Reserve'"),
    "unknown error": (lambda d: _transition(d, "held_early").update(reject="EARLY"), "unknown error 'EARLY'"),
    "duplicate id": (lambda d: _transition(d, "reserved").update(id="held"), "duplicate id"),
    "duplicate transition": (lambda d: d["transitions"].insert(0, dict(_transition(d, "held_early"), id="copy")), "duplicate transition"),
    "unreachable state": (lambda d: d["regions"]["transfer"]["states"].update(lost="never entered"), "unreachable state"),
    "no way out": (lambda d: d["rules"].__setitem__(slice(None), [r for r in d["rules"] if not r["id"].startswith("complete_canceled")]), "no input leads out"),
    "missing transition": (lambda d: d["transitions"].remove(_transition(d, "failed_ignored")), "no transition for event 'Failed'"),
    "dead transition": (lambda d: d["transitions"].insert(3, {"id": "dead", "event": "start", "when": {"source": "released"}, "ignore": True}), "never fires"),
    "bad json": (None, "invalid JSON"),
    "action without a class": (lambda d: d["actions"].update(Frobnicate={"side": "source", "pending": None, "allowed": []}),
                               "spec actions without a class in dmocker.handoff: ['Frobnicate']"),
    "fact without a class": (lambda d: d["facts"].update(Paused={"payload": {}, "terminal": True, "request_ends": "failed"}),
                             "spec facts without a class in dmocker.handoff: ['Paused']"),
    "terminal fact without request_ends": (lambda d: d["facts"]["Failed"].pop("request_ends"),
                                           "facts.Failed: missing field 'request_ends'"),
    "request_ends of a non-terminal fact": (lambda d: d["facts"]["SourceHeld"].update(request_ends="failed"),
                                            "facts.SourceHeld.request_ends: only a terminal fact ends a request"),
    "unknown request_ends": (lambda d: d["facts"]["Canceled"].update(request_ends="aborted"),
                             "facts.Canceled.request_ends: expected one of ['failed', 'canceled']"),
    "two faults of one name": (lambda d: d["facts"]["TimedOut"]["fault"].update(name="fail"),
                               "fault names must be unique"),
    "fault without a cause": (lambda d: d["facts"]["Canceled"]["fault"].pop("cause"),
                              "facts.Canceled.fault: missing field 'cause'"),
    "class without a spec action": (lambda d: d["actions"].pop("CancelDestination"), "the spec does not declare: ['CancelDestination']"),
    "observable kind without a side": (lambda d: d["observable"]["sides"].pop("failed"), "no side for ['failed']"),
    "unknown side": (lambda d: d["observable"]["sides"].update(failed="middle"), "unknown side 'middle'"),
    "side of an unknown kind": (lambda d: d["observable"]["sides"].update(exploded="none"), "observable.sides.exploded"),
    "unknown completion kind": (lambda d: d["observable"].update(completion_kind="done"), "unknown observable kind 'done'"),
    "engine with an unknown order": (lambda d: d["engines"]["vllm"].update(order="sideways"),
                                     "engines.vllm.order: unknown order 'sideways'"),
    "engine with a bad block size": (lambda d: d["engines"]["sglang"].update(default_block_size=0),
                                     "engines.sglang.default_block_size: expected a positive integer"),
    "engine with an unknown field": (lambda d: d["engines"]["vllm"].update(page=4), "engines.vllm: unknown field 'page'"),
    "engine name not lower case": (lambda d: d["engines"].update(TGI={"order": "source-first"}),
                                   "engines.TGI: an engine name is lower case"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_broken_specs_are_rejected_naming_file_and_element(case: str, tmp_path: Path) -> None:
    change, expected = CASES[case]
    if change is None:
        path = tmp_path / "spec.json"
        path.write_text("{ not json")
    else:
        path = _mutate(tmp_path, change)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(path) in str(info.value) and expected in str(info.value)
    assert main(["spec", "validate", str(path)]) == 2


def test_bundled_spec_validates_and_shows(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec", "validate"]) == 0
    assert "valid" in capsys.readouterr().out
    assert main(["spec", "show", "--order", "destination-first"]) == 0
    out = capsys.readouterr().out
    assert "submit_after_reserved" in out and "reserve_after_held" not in out


def test_demo_prints_one_clean_handoff_per_order(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert out.count("completion: success") == 2
    assert out.index("#1 ReserveDestination") < out.index("== destination-first ==") < out.index("#1 SubmitPrefill")


@pytest.mark.parametrize("verb", [["spec", "validate"], ["spec", "show"]])
def test_spec_help_names_the_real_default(verb: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # The default is $DMOCKER_SPEC, else dmocker's own spec/handoff.json: the help says so.
    with pytest.raises(SystemExit):
        main([*verb, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "default: $DMOCKER_SPEC if set, else dmocker's spec/handoff.json" in out
    assert "bundled" not in out


def test_engine_orders_come_from_the_spec(tmp_path: Path) -> None:
    """The engines table is the one engine -> order map: a spec that gives vLLM another order
    changes what ``ProtocolSpec.engine`` answers, and a spec without the table knows no engine."""
    spec = load_spec(_mutate(tmp_path, lambda d: d["engines"]["vllm"].update(order="destination-first")))
    assert spec.engine(" VLLM ").order.value == "destination-first"
    assert spec.engine("trt-llm").default_block_size is None
    (tmp_path / "bare").mkdir()  # (another file: specs are cached by path)
    bare = load_spec(_mutate(tmp_path / "bare", lambda d: d.pop("engines")))
    with pytest.raises(ValueError, match="unknown engine 'vllm': expected one of none"):
        bare.engine("vllm")
