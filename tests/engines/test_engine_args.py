"""EngineArgs: the reference's defaults and validation errors that name the field."""

from __future__ import annotations

import dataclasses

import pytest

from dmocker.handoff import TransferTimingMode
from dmocker.engines.interface import EngineArgs, WorkerType
from dmocker.engines.registry import ENGINES, engine_names, engine_spec, make_worker


def test_defaults_match_reference() -> None:
    a = EngineArgs()
    assert (a.num_gpu_blocks, a.max_num_seqs, a.max_num_batched_tokens) == (16384, 256, 8192)
    assert a.enable_prefix_caching and a.enable_chunked_prefill
    assert (a.speedup_ratio, a.decode_speedup_ratio) == (1.0, 1.0)
    assert a.kv_bytes_per_token is None and a.kv_transfer_bandwidth is None
    assert a.kv_transfer_timing_mode is TransferTimingMode.FULL_PROMPT
    assert a.max_model_len is None
    assert a.page_tokens == 64
    assert EngineArgs(engine="sglang").page_tokens == 1
    assert (a.max_prefill_tokens, a.chunked_prefill_size) == (16384, 8192)


@pytest.mark.parametrize(
    "field,value",
    [
        ("block_size", 0),
        ("num_gpu_blocks", -1),
        ("max_num_seqs", 0),
        ("max_num_batched_tokens", 1.5),
        ("max_model_len", 0),
        ("speedup_ratio", float("nan")),
        ("kv_transfer_bandwidth", -1.0),
        ("kv_transfer_bandwidth", float("nan")),
        ("kv_bytes_per_token", -3),
        ("fixed_prefill_ms", 1.0),
        ("schedule_conservativeness", 0.0),
        ("engine", "trtllm"),
        ("engine", "SGLang"),
        ("worker_type", "decode"),
    ],
)
def test_validation_names_the_field(field: str, value: object) -> None:
    args = dataclasses.replace(EngineArgs(), **{field: value})
    with pytest.raises(ValueError, match=field):
        args.validate()
    with pytest.raises(ValueError, match=field):
        make_worker(args)


def test_parse_helpers() -> None:
    assert engine_spec(" SGLang ") is ENGINES[1]
    assert WorkerType.parse("prefill") is WorkerType.PREFILL
    with pytest.raises(ValueError, match="unknown engine"):
        engine_spec("trtllm")


def test_transfer_timing_uses_prefill_args() -> None:
    a = EngineArgs(kv_bytes_per_token=1_000_000, kv_transfer_bandwidth=1.0)
    t = a.transfer_timing(128)
    assert t.delay_ms(0) == pytest.approx(128.0)


@pytest.mark.parametrize("engine", engine_names())
@pytest.mark.parametrize("link", [{}, {"kv_bytes_per_token": 131072, "kv_transfer_bandwidth": 50.0},
                                  {"kv_bytes_per_token": 4, "kv_transfer_bandwidth": 2,
                                   "kv_transfer_timing_mode": TransferTimingMode.DESTINATION_MISSING}])
def test_a_held_source_reports_its_args_transfer_timing(engine: str, link: dict[str, object]) -> None:
    """Engines build the SourceHeld timing from link settings read at start: the same value as
    ``EngineArgs.transfer_timing`` for every prompt length."""
    from dmocker.handoff import SourceHeld

    args = EngineArgs(engine=engine, worker_type=WorkerType.PREFILL, **link)  # type: ignore[arg-type]
    worker = make_worker(args)
    for prompt in (0, 1, 777, 1 << 40):
        held = worker._book.source_held(("h", prompt), prompt)  # type: ignore[attr-defined]
        assert held == SourceHeld(("h", prompt), args.transfer_timing(prompt))
        assert repr(held.transfer_timing) == repr(args.transfer_timing(prompt))
