"""The engine registry: one entry per mock engine, agreeing with the handoff spec's engines table."""

from __future__ import annotations

import dataclasses

import pytest

from dmocker.engines.engine_args import mock_engines
from dmocker.engines.engine_spec import EngineSpec
from dmocker.engines.interface import EngineArgs, EngineWorker, WorkerType
from dmocker.engines.registry import ENGINES, engine_names, engine_spec, make_worker
from dmocker.handoff import HandoffOrder, load_spec, order_for_engine


def test_the_registry_and_the_spec_name_the_same_mock_engines() -> None:
    assert engine_names() == tuple(e.name for e in mock_engines())
    assert len(set(engine_names())) == len(ENGINES)


@pytest.mark.parametrize("spec", ENGINES, ids=lambda s: s.name)
def test_each_engine_takes_its_order_and_block_size_from_the_spec(spec: EngineSpec) -> None:
    entry = load_spec().engine(spec.name)
    assert spec.order is entry.order is order_for_engine(spec.name.upper())
    assert spec.default_block_size == entry.default_block_size == EngineArgs(engine=spec.name).page_tokens
    for role in WorkerType:
        worker = make_worker(EngineArgs(engine=spec.name, worker_type=role), 3)
        assert isinstance(worker, EngineWorker) and worker.worker_idx == 3
        assert type(worker) is spec.worker


def test_orders_of_the_engines_conformance_logs_name() -> None:
    assert order_for_engine("vllm") is order_for_engine("trtllm") is order_for_engine("TRT-LLM") is HandoffOrder.SOURCE_FIRST
    assert order_for_engine(" SGLang ") is HandoffOrder.DESTINATION_FIRST


@pytest.mark.parametrize("name", ["trtllm", "tgi", "", "VLLM"])
def test_engine_args_name_a_mock_engine(name: str) -> None:
    args = dataclasses.replace(EngineArgs(), engine=name)
    with pytest.raises(ValueError, match=r"engine argument engine=.*expected one of 'vllm', 'sglang'"):
        make_worker(args)


def test_lookups_ignore_case_and_name_the_known_engines() -> None:
    assert engine_spec(" VLLM ") is ENGINES[0]
    with pytest.raises(ValueError, match=r"unknown engine 'trtllm': expected one of 'vllm', 'sglang'"):
        engine_spec("trtllm")
    with pytest.raises(ValueError, match="no mock of this engine"):
        _ = EngineArgs(engine="trtllm").page_tokens
