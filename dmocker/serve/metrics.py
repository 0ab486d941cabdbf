"""The Prometheus metrics a mock worker exposes on ``/metrics``: vLLM's, and dmocker's handoff metrics.

The vLLM metrics keep the names, types, label names and histogram buckets of vLLM v1's
``PrometheusStatLogger`` (``vllm-project/vllm`` ``vllm/v1/metrics/loggers.py``), so that
dashboards and autoscalers written against vLLM read the mock unchanged:

* ``vllm:inter_token_latency_seconds``, not ``vllm:time_per_output_token_seconds``: vLLM 0.11
  renamed it, hid the old name behind ``--show-hidden-metrics-for-version`` in 0.12 and
  removes it after;
* ``vllm:kv_cache_usage_perc`` (a fraction, 1 is full), not ``vllm:gpu_cache_usage_perc``,
  deprecated since 0.9; likewise ``vllm:prefix_cache_queries``/``vllm:prefix_cache_hits``
  (in tokens) and not their ``gpu_`` forms;
* every vLLM metric is labelled ``model_name`` and ``engine``; ``vllm:request_success`` also
  ``finished_reason`` (``stop``, ``length``, ``abort``, ``error``, ``repetition``: vLLM's
  ``FINISH_REASON_STRINGS``, ``vllm/v1/engine/__init__.py``), every value present from the start.

A counter is named here as it is registered; the exposition adds ``_total``
(``vllm:request_success_total``), as prometheus_client does for vLLM.

dmocker's own: ``dmocker_handoff_violations_total`` (by the spec rule broken) and
``dmocker_leaked_kv_blocks`` (KV blocks held by no live handoff, by cause).

The specifications are plain data (:data:`METRICS`); :func:`build_worker_metrics` registers
them with ``prometheus_client``, the optional ``serve`` extra (``pip install "dmocker[serve]"``),
imported only there.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from dmocker.handoff import load_spec

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram  # type: ignore[import-not-found, unused-ignore]


class MetricType(enum.Enum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


@dataclass(frozen=True)
class MetricSpec:
    """One metric family: its name as registered, type, help text, label names and buckets."""

    name: str
    type: MetricType
    documentation: str
    labels: tuple[str, ...]
    buckets: tuple[float, ...] = ()

    @property
    def exposed_name(self) -> str:
        """The family's name in the exposition (counters get ``_total``)."""
        return self.name + "_total" if self.type is MetricType.COUNTER else self.name


#: vLLM's labels on every engine metric
VLLM_LABELS: Final = ("model_name", "engine")
#: the values of ``finished_reason`` (vLLM's ``FINISH_REASON_STRINGS``)
FINISHED_REASONS: Final = ("stop", "length", "abort", "error", "repetition")

TTFT_BUCKETS: Final = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                       20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS: Final = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                      40.0, 80.0)
REQUEST_LATENCY_BUCKETS: Final = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                                  120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)


class LeakCause(enum.Enum):
    """Why KV blocks are held with no handoff to free them: the ``cause`` label of ``dmocker_leaked_kv_blocks``."""

    #: a source prefill whose decode leg never came (the proxy never sent it): held until the abort timeout
    NO_DECODE_LEG = "no_decode_leg"
    #: the client went away mid-handoff and the blocks were not freed
    CLIENT_DISCONNECT = "client_disconnect"
    #: a decode that read the source and never told it to release
    NEVER_RELEASED = "never_released"
    #: a destination reserved for a prefill that never came (SGLang: a bootstrap room never joined)
    STRANDED_DESTINATION = "stranded_destination"


RUNNING: Final = MetricSpec("vllm:num_requests_running", MetricType.GAUGE,
                            "Number of requests in model execution batches.", VLLM_LABELS)
WAITING: Final = MetricSpec("vllm:num_requests_waiting", MetricType.GAUGE,
                            "Number of requests waiting to be processed.", VLLM_LABELS)
KV_CACHE_USAGE: Final = MetricSpec("vllm:kv_cache_usage_perc", MetricType.GAUGE,
                                   "KV-cache usage. 1 means 100 percent usage.", VLLM_LABELS)
PREFIX_CACHE_QUERIES: Final = MetricSpec("vllm:prefix_cache_queries", MetricType.COUNTER,
                                         "Prefix cache queries, in terms of number of queried tokens.", VLLM_LABELS)
PREFIX_CACHE_HITS: Final = MetricSpec("vllm:prefix_cache_hits", MetricType.COUNTER,
                                      "Prefix cache hits, in terms of number of cached tokens.", VLLM_LABELS)
PROMPT_TOKENS: Final = MetricSpec("vllm:prompt_tokens", MetricType.COUNTER,
                                  "Number of prefill tokens processed.", VLLM_LABELS)
GENERATION_TOKENS: Final = MetricSpec("vllm:generation_tokens", MetricType.COUNTER,
                                      "Number of generation tokens processed.", VLLM_LABELS)
REQUEST_SUCCESS: Final = MetricSpec("vllm:request_success", MetricType.COUNTER,
                                    "Count of successfully processed requests.", (*VLLM_LABELS, "finished_reason"))
TIME_TO_FIRST_TOKEN: Final = MetricSpec("vllm:time_to_first_token_seconds", MetricType.HISTOGRAM,
                                        "Histogram of time to first token in seconds.", VLLM_LABELS, TTFT_BUCKETS)
INTER_TOKEN_LATENCY: Final = MetricSpec("vllm:inter_token_latency_seconds", MetricType.HISTOGRAM,
                                        "Histogram of inter-token latency in seconds.", VLLM_LABELS, ITL_BUCKETS)
E2E_REQUEST_LATENCY: Final = MetricSpec("vllm:e2e_request_latency_seconds", MetricType.HISTOGRAM,
                                        "Histogram of e2e request latency in seconds.", VLLM_LABELS,
                                        REQUEST_LATENCY_BUCKETS)
HANDOFF_VIOLATIONS: Final = MetricSpec("dmocker_handoff_violations", MetricType.COUNTER,
                                       "Handoffs that broke a rule of the handoff spec, by rule.", ("rule",))
LEAKED_KV_BLOCKS: Final = MetricSpec("dmocker_leaked_kv_blocks", MetricType.GAUGE,
                                     "KV blocks held with no live handoff to free them, by cause.", ("cause",))
WORKER_EVENTS: Final = MetricSpec("dmocker_worker_events", MetricType.COUNTER,
                                  "Events of the workers' own clocks and of faults (a hold expiry, a timeout, a "
                                  "heartbeat verdict, a recomputed load, a stalled transfer), by kind.", ("kind",))

#: every metric a worker exposes
METRICS: Final = (RUNNING, WAITING, KV_CACHE_USAGE, PREFIX_CACHE_QUERIES, PREFIX_CACHE_HITS, PROMPT_TOKENS,
                  GENERATION_TOKENS, REQUEST_SUCCESS, TIME_TO_FIRST_TOKEN, INTER_TOKEN_LATENCY, E2E_REQUEST_LATENCY,
                  HANDOFF_VIOLATIONS, LEAKED_KV_BLOCKS, WORKER_EVENTS)


class MissingServeExtra(ImportError):
    """``prometheus_client`` is not installed."""


class WorkerMetrics:
    """One worker's metrics in a registry of its own; what the worker records, by name.

    Values are what the caller measured: the caller's clock (scaled by ``--speedup-ratio`` or
    not) is the caller's business.
    """

    def __init__(self, model_name: str, engine: str = "0") -> None:
        try:
            import prometheus_client  # type: ignore[import-not-found, unused-ignore]
        except ImportError as exc:
            raise MissingServeExtra('/metrics needs prometheus_client: pip install "dmocker[serve]"') from exc
        self.registry: CollectorRegistry = prometheus_client.CollectorRegistry(auto_describe=True)
        self._generate = prometheus_client.generate_latest
        counters: dict[str, Counter] = {}
        gauges: dict[str, Gauge] = {}
        histograms: dict[str, Histogram] = {}
        for spec in METRICS:
            if spec.type is MetricType.COUNTER:
                counters[spec.name] = prometheus_client.Counter(spec.name, spec.documentation, spec.labels,
                                                                registry=self.registry)
            elif spec.type is MetricType.GAUGE:
                gauges[spec.name] = prometheus_client.Gauge(spec.name, spec.documentation, spec.labels,
                                                            registry=self.registry)
            else:
                histograms[spec.name] = prometheus_client.Histogram(spec.name, spec.documentation, spec.labels,
                                                                    registry=self.registry, buckets=spec.buckets)
        labels = {"model_name": model_name, "engine": engine}
        self._running = gauges[RUNNING.name].labels(**labels)
        self._waiting = gauges[WAITING.name].labels(**labels)
        self._kv_usage = gauges[KV_CACHE_USAGE.name].labels(**labels)
        self._queries = counters[PREFIX_CACHE_QUERIES.name].labels(**labels)
        self._hits = counters[PREFIX_CACHE_HITS.name].labels(**labels)
        self._prompt = counters[PROMPT_TOKENS.name].labels(**labels)
        self._generation = counters[GENERATION_TOKENS.name].labels(**labels)
        self._ttft = histograms[TIME_TO_FIRST_TOKEN.name].labels(**labels)
        self._itl = histograms[INTER_TOKEN_LATENCY.name].labels(**labels)
        self._e2e = histograms[E2E_REQUEST_LATENCY.name].labels(**labels)
        self._violations = counters[HANDOFF_VIOLATIONS.name]
        # vLLM creates a series per finish reason up front: a reason never seen reads 0, not absent
        self._success = {reason: counters[REQUEST_SUCCESS.name].labels(**labels, finished_reason=reason)
                         for reason in FINISHED_REASONS}
        self._leaked = {cause: gauges[LEAKED_KV_BLOCKS.name].labels(cause=cause.value) for cause in LeakCause}
        # one series per kind the spec names (observable.worker_kinds), each reading 0 until it happens
        self._worker_events = {kind.name: counters[WORKER_EVENTS.name].labels(kind=kind.name)
                               for kind in load_spec().worker_kinds}

    # -- scheduler state ------------------------------------------------------------------------
    def set_queue(self, running: int, waiting: int) -> None:
        self._running.set(running)
        self._waiting.set(waiting)

    def set_kv_cache_usage(self, fraction: float) -> None:
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"KV cache usage is a fraction in [0, 1], got {fraction}")
        self._kv_usage.set(fraction)

    def prefix_cache_lookup(self, queried_tokens: int, hit_tokens: int) -> None:
        if not 0 <= hit_tokens <= queried_tokens:
            raise ValueError(f"hits must be within the queried tokens, got {hit_tokens} of {queried_tokens}")
        self._queries.inc(queried_tokens)
        self._hits.inc(hit_tokens)

    # -- requests -------------------------------------------------------------------------------
    def prefilled(self, prompt_tokens: int) -> None:
        """Prompt tokens this worker computed (a decode worker that received the KV computed none)."""
        self._prompt.inc(prompt_tokens)

    def first_token(self, ttft_s: float) -> None:
        self._ttft.observe(ttft_s)
        self._generation.inc(1)

    def next_token(self, itl_s: float) -> None:
        self._itl.observe(itl_s)
        self._generation.inc(1)

    def request_finished(self, finished_reason: str, e2e_s: float) -> None:
        counter = self._success.get(finished_reason)
        if counter is None:
            raise ValueError(f"finished_reason must be one of {FINISHED_REASONS}, got {finished_reason!r}")
        counter.inc()
        self._e2e.observe(e2e_s)

    # -- handoffs -------------------------------------------------------------------------------
    def handoff_violation(self, rule: str) -> None:
        self._violations.labels(rule=rule).inc()

    def worker_event(self, kind: str) -> None:
        """A worker's own clock or a fault produced ``kind`` (a spec worker kind)."""
        counter = self._worker_events.get(kind)
        if counter is None:
            raise ValueError(f"kind must be one of the spec's worker kinds {sorted(self._worker_events)}, got {kind!r}")
        counter.inc()

    def set_leaked_blocks(self, cause: LeakCause, blocks: int) -> None:
        if blocks < 0:
            raise ValueError(f"a number of blocks, got {blocks}")
        self._leaked[cause].set(blocks)

    def exposition(self) -> bytes:
        """The registry in Prometheus' text format (the body of ``GET /metrics``)."""
        text: bytes = self._generate(self.registry)
        return text


#: the ``Content-Type`` of :meth:`WorkerMetrics.exposition`
EXPOSITION_CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
