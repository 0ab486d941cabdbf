"""The metrics a mock worker exposes: vLLM's names, types, labels and buckets as data, and
the exposition prometheus_client writes from them, read back with its own parser.

The specification tests need nothing optional; the registry tests skip without the ``serve``
extra (prometheus_client)."""

from __future__ import annotations

import pytest

from dmocker.handoff import load_spec
from dmocker.serve.metrics import (
    FINISHED_REASONS,
    ITL_BUCKETS,
    METRICS,
    REQUEST_LATENCY_BUCKETS,
    TTFT_BUCKETS,
    VLLM_LABELS,
    LeakCause,
    MetricType,
)


def test_the_names_are_vllms_current_ones() -> None:
    names = {m.name for m in METRICS}
    assert {"vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
            "vllm:e2e_request_latency_seconds", "vllm:num_requests_running", "vllm:num_requests_waiting",
            "vllm:kv_cache_usage_perc", "vllm:prefix_cache_queries", "vllm:prefix_cache_hits",
            "vllm:request_success", "dmocker_handoff_violations", "dmocker_leaked_kv_blocks"} <= names
    # deprecated in vLLM (0.11 and 0.9): the mock does not expose them
    assert not names & {"vllm:time_per_output_token_seconds", "vllm:gpu_cache_usage_perc",
                        "vllm:gpu_prefix_cache_queries", "vllm:gpu_prefix_cache_hits"}
    assert len(names) == len(METRICS)


def test_every_vllm_metric_has_vllms_labels_and_buckets_are_sorted() -> None:
    for m in METRICS:
        if m.name.startswith("vllm:"):
            assert m.labels[:2] == VLLM_LABELS, m.name
        assert (m.type is MetricType.HISTOGRAM) == bool(m.buckets), m.name
        assert list(m.buckets) == sorted(set(m.buckets)), m.name
    assert TTFT_BUCKETS[0] == 0.001 and TTFT_BUCKETS[-1] == 2560.0 and len(TTFT_BUCKETS) == 22
    assert ITL_BUCKETS[0] == 0.01 and ITL_BUCKETS[-1] == 80.0 and len(ITL_BUCKETS) == 19
    assert REQUEST_LATENCY_BUCKETS[0] == 0.3 and REQUEST_LATENCY_BUCKETS[-1] == 7680.0


def test_counters_are_exposed_with_total() -> None:
    by_name = {m.name: m for m in METRICS}
    assert by_name["vllm:request_success"].exposed_name == "vllm:request_success_total"
    assert by_name["dmocker_handoff_violations"].exposed_name == "dmocker_handoff_violations_total"
    assert by_name["vllm:kv_cache_usage_perc"].exposed_name == "vllm:kv_cache_usage_perc"


# -- the registry (needs prometheus_client) -------------------------------------------------------------


def families(text: bytes) -> dict[str, object]:
    parser = pytest.importorskip("prometheus_client.parser")
    return {f.name: f for f in parser.text_string_to_metric_families(text.decode())}


def worker() -> object:
    pytest.importorskip("prometheus_client")
    from dmocker.serve.metrics import WorkerMetrics
    return WorkerMetrics("mock-model")


def test_the_exposition_parses_and_has_every_family() -> None:
    from dmocker.serve.metrics import WorkerMetrics
    w = worker()
    assert isinstance(w, WorkerMetrics)
    w.set_queue(running=3, waiting=1)
    w.set_kv_cache_usage(0.25)
    w.prefix_cache_lookup(queried_tokens=100, hit_tokens=64)
    w.prefilled(100)
    w.first_token(0.05)
    w.next_token(0.012)
    w.next_token(0.3)
    w.request_finished("length", 1.2)
    w.handoff_violation("ReleaseSource before TransferCompleted")
    w.set_leaked_blocks(LeakCause.NO_DECODE_LEG, 7)
    w.worker_event("source_expired")
    w.worker_event("source_expired")
    parser = pytest.importorskip("prometheus_client.parser")
    parsed = {f.name: f for f in parser.text_string_to_metric_families(w.exposition().decode())}
    # the parser names a counter family without _total; prometheus_client adds a ``_created``
    # timestamp to counters and histograms, which the 0.0.4 text parser reads as gauges
    assert {n for n in parsed if not n.endswith("_created")} == {m.name for m in METRICS}
    for m in METRICS:
        assert parsed[m.name].type == m.type.value, m.name

    def sample(name: str, **labels: str) -> float:
        found = [s.value for s in parsed[name.removesuffix("_total").removesuffix("_bucket").removesuffix("_count")
                                         .removesuffix("_sum")].samples
                 if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
        assert len(found) == 1, (name, labels, found)
        return float(found[0])

    mine = {"model_name": "mock-model", "engine": "0"}
    assert sample("vllm:num_requests_running", **mine) == 3
    assert sample("vllm:num_requests_waiting", **mine) == 1
    assert sample("vllm:kv_cache_usage_perc", **mine) == 0.25
    assert sample("vllm:prefix_cache_queries_total", **mine) == 100
    assert sample("vllm:prefix_cache_hits_total", **mine) == 64
    assert sample("vllm:prompt_tokens_total", **mine) == 100
    assert sample("vllm:generation_tokens_total", **mine) == 3
    assert sample("vllm:request_success_total", **mine, finished_reason="length") == 1
    for reason in FINISHED_REASONS:  # present from the start, as vLLM creates them
        assert sample("vllm:request_success_total", **mine, finished_reason=reason) in (0, 1)
    assert sample("vllm:time_to_first_token_seconds_count", **mine) == 1
    assert sample("vllm:inter_token_latency_seconds_bucket", **mine, le="0.025") == 1
    assert sample("vllm:inter_token_latency_seconds_bucket", **mine, le="+Inf") == 2
    assert sample("vllm:e2e_request_latency_seconds_sum", **mine) == pytest.approx(1.2)
    assert sample("dmocker_handoff_violations_total", rule="ReleaseSource before TransferCompleted") == 1
    assert sample("dmocker_leaked_kv_blocks", cause="no_decode_leg") == 7
    assert sample("dmocker_leaked_kv_blocks", cause="client_disconnect") == 0
    assert sample("dmocker_worker_events_total", kind="source_expired") == 2
    for kind in load_spec().worker_kinds:  # every kind the spec names, present from the start
        assert sample("dmocker_worker_events_total", kind=kind.name) in (0, 2)


def test_the_buckets_in_the_exposition_are_vllms() -> None:
    from dmocker.serve.metrics import WorkerMetrics
    w = worker()
    assert isinstance(w, WorkerMetrics)
    parsed = families(w.exposition())
    for m in METRICS:
        if m.type is MetricType.HISTOGRAM:
            family = parsed[m.name]
            bounds = sorted({float(s.labels["le"]) for s in family.samples  # type: ignore[attr-defined]
                             if s.name.endswith("_bucket")})
            assert bounds == [*m.buckets, float("inf")], m.name


def test_workers_do_not_share_a_registry_and_bad_values_are_refused() -> None:
    from dmocker.serve.metrics import WorkerMetrics
    a, b = worker(), worker()
    assert isinstance(a, WorkerMetrics) and isinstance(b, WorkerMetrics)
    a.set_queue(5, 0)
    assert b"vllm:num_requests_running{engine=\"0\",model_name=\"mock-model\"} 0.0" in b.exposition()
    with pytest.raises(ValueError):
        a.set_kv_cache_usage(1.5)
    with pytest.raises(ValueError):
        a.prefix_cache_lookup(10, 11)
    with pytest.raises(ValueError):
        a.request_finished("timeout", 1.0)
    with pytest.raises(ValueError):
        a.set_leaked_blocks(LeakCause.NEVER_RELEASED, -1)
