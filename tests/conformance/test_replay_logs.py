"""Every replay's logs validate clean: the native event log and the per-request records.

Many seeded runs of both engines (vLLM source-first, SGLang destination-first): with and
without a KV transfer model (both timing modes), on a small pool so that requests queue and wait
for room, with shared prefixes, and in concurrency mode.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dmocker import replay
from dmocker.conformance.stream import check_dynamo_records, check_native
from dmocker.conformance.validator import Validator
from dmocker.handoff import HandoffOrder, order_for_engine

_EXTRAS: list[dict[str, object]] = [
    {},
    {"kv_transfer_bandwidth": 10.0, "kv_bytes_per_token": 131072},
    {"num_gpu_blocks": 1024, "block_size": 16},
    {"kv_transfer_bandwidth": 1.0, "kv_bytes_per_token": 65536, "kv_transfer_timing_mode": "destination-missing"},
    {"prefix_groups": 2, "prefix_ratio": 0.5},
    {"max_in_flight": 4},
]
#: vLLM prefills first and holds the source; SGLang reserves the destination first.
ORDER_OF = {"vllm": HandoffOrder.SOURCE_FIRST, "sglang": HandoffOrder.DESTINATION_FIRST}
CONFIGS: list[dict[str, object]] = [{"seed": s, **extra} for s, extra in enumerate(_EXTRAS)]


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("config", CONFIGS, ids=[f"seed{c['seed']}" for c in CONFIGS])
def test_replay_logs_conform(engine: str, config: dict[str, object], tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    records = tmp_path / "records.jsonl"
    replay.run(replay.ReplayConfig.from_values({"synthetic": 40, "engine": engine, "events": events,
                                                "per_request": records, **config}))
    order = order_for_engine(engine)
    assert order is ORDER_OF[engine]
    v = Validator(None)
    with open(events, encoding="utf-8") as handle:
        check_native(handle, v, keep_going=False)
    native = v.result()
    assert native.exit_code == 0, (native.violations[:3], native.unfinished[:3], native.input_errors[:3])
    assert native.handoffs == 40 and {o for o in native.by_order} == {order.value}
    v = Validator(order)
    with open(records, encoding="utf-8") as handle:
        check_dynamo_records(handle, v, order, keep_going=False)
    rec = v.result()
    assert rec.exit_code == 0, (rec.violations[:3], rec.unfinished[:3], rec.input_errors[:3])
    assert rec.handoffs == 40 and set(rec.by_order) == {order.value}
    # both logs tell the same story: the same number of handoffs ended each way
    assert native.verdicts == rec.verdicts, (native.verdicts, rec.verdicts)
