"""Summary statistics, the Report value, and stable JSON.

Why a custom JSON writer: identical runs must produce byte-identical files.  Keys are sorted,
floats are rounded to 6 decimals and written with Python's shortest round-trip ``repr``, and
non-finite floats become ``null``, so the text depends only on the numbers.
"""

from __future__ import annotations

import json
import math
import os
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TypeAlias, Union

import numpy as np

from dmocker._atomic import write_atomic

from .collector import Collector, DistributionStats, TerminalStatus
from .timeseries import TimeSeries

__all__ = [
    "Report",
    "SlaThresholds",
    "JsonValue",
    "build_summary",
    "stable_json",
    "stable_json_line",
    "request_uuid",
]

JsonValue: TypeAlias = Union[None, bool, int, float, str, list["JsonValue"], dict[str, "JsonValue"]]

_UUID_NAMESPACE = uuid.UUID("6f0c5d2e-4a7b-5c1d-9e3f-2b8a7d6c5e4f")


def request_uuid(request_id: int) -> str:
    """The deterministic stand-in for the reference's random per-request uuid (uuid5)."""
    return str(uuid.uuid5(_UUID_NAMESPACE, f"dmocker-request-{request_id}"))


def _clean(value: object) -> JsonValue:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        if not math.isfinite(f):
            return None
        r = round(f, 6)
        return 0.0 if r == 0 else r
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    raise TypeError(f"not JSON-serialisable: {value!r}")


def stable_json(value: object) -> str:
    """Indented, key-sorted JSON with fixed float formatting, ending in a newline."""
    return json.dumps(_clean(value), sort_keys=True, indent=2, allow_nan=False) + "\n"


def stable_json_line(value: object) -> str:
    """One compact key-sorted JSON line (records, event logs)."""
    return json.dumps(_clean(value), sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n"


@dataclass(frozen=True, slots=True)
class SlaThresholds:
    """Goodput bounds; only the set ones are checked (the reference's SlaThresholds)."""

    ttft_ms: float | None = None
    itl_ms: float | None = None
    e2e_ms: float | None = None

    @property
    def is_set(self) -> bool:
        return self.ttft_ms is not None or self.itl_ms is not None or self.e2e_ms is not None


def build_summary(
    c: Collector,
    *,
    handoff_order: str,
    sla: SlaThresholds,
    prefill_gpus_per_worker: int = 1,
    decode_gpus_per_worker: int = 1,
) -> dict[str, JsonValue]:
    """The flat summary object with the reference's key names plus our terminal counts."""
    arrived = ~np.isnan(c.arrival)
    status = c.status
    completed = arrived & (status == TerminalStatus.COMPLETED) & c.first_admitted
    tokens = c.tokens.astype(np.int64)
    total_in = int(c.input_length[completed].astype(np.int64).sum())
    total_out = int(tokens[completed].sum())
    n_completed = int(completed.sum())
    duration_ms = c.max_terminal_ms
    duration_s = duration_ms / 1000.0

    def rate(x: float) -> float:
        return x / duration_s if duration_s > 0 else 0.0

    with_tok = completed & (tokens > 0)
    ttft = (c.first_token - c.arrival)[with_tok]
    e2e = (c.last_token - c.arrival)[with_tok]
    two = completed & (tokens > 1)
    ttst = np.maximum(c.second_token - c.first_token, 0.0)[two]
    tpot = (np.maximum(c.last_token - c.first_token, 0.0)[two]) / (tokens[two] - 1)

    summary: dict[str, JsonValue] = {
        "num_requests": int(arrived.sum()),
        "completed_requests": n_completed,
        "total_input_tokens": total_in,
        "total_output_tokens": total_out,
        "duration_ms": duration_ms,
        "request_throughput_rps": rate(n_completed),
        "input_throughput_tok_s": rate(total_in),
        "output_throughput_tok_s": rate(total_out),
        "total_throughput_tok_s": rate(total_in + total_out),
        "num_ttft_samples": int(ttft.shape[0]),
        "prefix_cache_reused_ratio": (
            float(c.reused[completed].astype(np.int64).sum()) / total_in if total_in > 0 else 0.0
        ),
        "prefill_worker_seconds": c.prefill_worker_seconds,
        "decode_worker_seconds": c.decode_worker_seconds,
        "gpu_hours": (
            c.prefill_worker_seconds * prefill_gpus_per_worker
            + c.decode_worker_seconds * decode_gpus_per_worker
        )
        / 3600.0,
        "rejected_requests": int((arrived & (status == TerminalStatus.REJECTED)).sum()),
        "failed_requests": int((arrived & (status == TerminalStatus.FAILED)).sum()),
        "canceled_requests": int((arrived & (status == TerminalStatus.CANCELED)).sum()),
        "incomplete_requests": int((arrived & (status == TerminalStatus.INCOMPLETE)).sum()),
        "handoff_order": handoff_order,
    }
    dists: list[tuple[str, str, DistributionStats]] = [
        ("ttft", "_ms", DistributionStats.exact(ttft)),
        ("ttst", "_ms", DistributionStats.exact(ttst)),
        ("tpot", "_ms", DistributionStats.exact(tpot)),
        ("itl", "_ms", c.gaps.itl_stats()),
        ("e2e_latency", "_ms", DistributionStats.exact(e2e)),
        ("output_token_throughput_per_user", "", c.gaps.per_user_stats()),
    ]
    for prefix, suffix, stats in dists:
        summary.update(stats.items(prefix, suffix))
    if sla.is_set:
        good = with_tok.copy()
        if sla.e2e_ms is not None:
            good &= (c.last_token - c.arrival) <= sla.e2e_ms
        if sla.ttft_ms is not None:
            good &= (c.first_token - c.arrival) <= sla.ttft_ms
        if sla.itl_ms is not None:
            gaps = np.maximum(tokens - 1, 1)
            avg = ((c.last_token - c.arrival) - (c.first_token - c.arrival)) / gaps
            good &= (tokens <= 1) | (avg <= sla.itl_ms)
        n_good = int(good.sum())
        summary["goodput_completed_requests"] = n_good
        summary["goodput_request_throughput_rps"] = rate(n_good)
        summary["goodput_output_throughput_tok_s"] = rate(int(tokens[good].sum()))
    return summary


@dataclass(frozen=True, slots=True)
class Report:
    """The result of one replay: ``summary`` (flat dict) and ``config`` (what was run).

    ``records_path`` is where the per-request JSONL went, if requested; iterate it with
    :meth:`records`.
    """

    summary: dict[str, JsonValue]
    config: dict[str, JsonValue]
    records_path: str | None = None
    events_path: str | None = None
    wall_seconds: float = field(default=0.0, compare=False)
    planner: dict[str, JsonValue] | None = None  # scaling timeline and decisions, if a planner ran
    timeseries: TimeSeries | None = field(default=None, compare=False, repr=False)  # outputs.timeseries

    def to_json(self) -> str:
        """The byte-stable ``report.json`` text: ``{"summary": ..., "config": ...}``
        (plus ``"planner"`` when a planner ran)."""
        if self.planner is not None:
            return stable_json({"summary": self.summary, "config": self.config, "planner": self.planner})
        return stable_json({"summary": self.summary, "config": self.config})

    def write(self, path: str | os.PathLike[str]) -> None:
        write_atomic(path, self.to_json())

    def records(self) -> Iterator[dict[str, JsonValue]]:
        """Stream the per-request records back (needs ``per_request`` at run time)."""
        if self.records_path is None:
            raise ValueError("this replay was run without per-request records")
        with open(self.records_path, encoding="utf-8") as fh:
            for line in fh:
                value = json.loads(line)
                assert isinstance(value, dict)
                yield value
