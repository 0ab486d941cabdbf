"""The live check of ``dmocker serve``: every event-log line the cluster writes goes through the
conformance validator as it is written; a handoff that breaks the spec is reported at once with
its request id and the rule, and the log still reaches the file unchanged."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from dmocker.conformance import Violation
from dmocker.handoff import HandoffOrder, load_spec, order_for_engine
from dmocker.replay import ReplayConfig, run
from dmocker.replay.invariants import conformance_break
from dmocker.serve.live_check import LiveCheck


def _log(tmp_path: Path, engine: str) -> str:
    path = tmp_path / f"{engine}.jsonl"
    run(ReplayConfig.from_values({"synthetic": 12, "engine": engine, "events": str(path)}))
    return path.read_text()


def _feed(check: LiveCheck, text: str, cuts: list[int]) -> None:
    """Write ``text`` in pieces cut at ``cuts`` (anywhere, mid-line included)."""
    last = 0
    for cut in sorted(set(c % (len(text) + 1) for c in cuts)) + [len(text)]:
        check.write(text[last:cut])
        last = cut


@settings(max_examples=25, deadline=None)
@given(cuts=st.lists(st.integers(0, 10**6), max_size=30))
def test_a_conforming_log_passes_in_any_pieces_and_is_forwarded_unchanged(cuts: list[int]) -> None:
    text = _LOGS["vllm"]
    forwarded: list[str] = []
    check = LiveCheck(HandoffOrder.SOURCE_FIRST, forward=forwarded.append)
    _feed(check, text, cuts)
    assert check.ok and check.by_rule == {}
    assert "".join(forwarded) == text
    assert check.summary()["events_checked"] == text.count("\n")
    assert conformance_break(check.result()) is None


def test_a_broken_handoff_is_reported_with_its_request_and_rule(tmp_path: Path) -> None:
    for engine, order in (("vllm", HandoffOrder.SOURCE_FIRST), ("sglang", HandoffOrder.DESTINATION_FIRST)):
        lines = _log(tmp_path, engine).splitlines(keepends=True)
        # request 1 releases its source before its transfer completed: drop the completion
        broken = [ln for ln in lines if not ('"handoff":1,' in ln and "transfer_completed" in ln)]
        assert len(broken) == len(lines) - 1
        seen: list[Violation] = []
        check = LiveCheck(order, report=seen.append)
        check.write("".join(broken))
        assert [v.handoff for v in seen] == [1]
        assert not check.ok and sum(check.by_rule.values()) == 1
        listed = check.summary()["violations_listed"]
        assert isinstance(listed, list) and listed[0]["request_id"] == 1  # type: ignore[index]
        assert "not allowed" in seen[0].message
        problem = conformance_break(check.result())  # the end-of-run verdict the server adds
        assert problem is not None and problem.invariant == "event_log_conforms" and 1 in problem.request_ids


_LOGS: dict[str, str] = {}


def setup_module() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        _LOGS["vllm"] = _log(Path(d), "vllm")



def test_each_worker_kind_is_told_as_it_is_logged_and_the_log_still_conforms(tmp_path: Path) -> None:
    """A cluster whose timers fire: the check hears every worker kind (for ``/metrics``) in the
    log's order, and the log with them conforms."""
    worker_kinds = {k.name for k in load_spec().worker_kinds}
    for engine, clocks in (("vllm", {"kv_abort_timeout_s": 1.0}), ("sglang", {"disaggregation_waiting_timeout_s": 1.0})):
        path = tmp_path / f"{engine}.jsonl"
        run(ReplayConfig.from_values({"synthetic": 30, "rate": 20.0, "isl_mean": 600, "osl_mean": 40, "engine": engine,
                                      "fault_stall_rate": 0.3, "fault_stall_s": 2.0, **clocks, "events": str(path)}))
        text = path.read_text()
        logged = [json.loads(line)["event"] for line in text.splitlines()[1:]]
        heard: list[str] = []
        check = LiveCheck(order_for_engine(engine), worker_event=heard.append)
        _feed(check, text, [len(text) // 3, len(text) // 2])
        assert heard == [kind for kind in logged if kind in worker_kinds] and len(set(heard)) == 2, engine
        assert check.ok and check.result().exit_code == 0, engine
