"""The per-request record (one JSONL line per request of ``--per-request``), from the runtime's
state of a request and the collector's settled token times."""

from __future__ import annotations

from .collector import Collector, TerminalStatus
from .report import request_uuid
from .request_state import RequestState
from .workload import Turn

__all__ = ["agg_record", "request_record"]


def request_record(req: RequestState, c: Collector) -> dict[str, object]:
    """The record of ``req`` (retired, or in flight at a time cap), fields in a fixed order."""
    rec = _token_fields(req.rid, req.turn, req.arrival_ms, req.first_admit_ms, req.terminal_ms, c)
    status = rec.pop("terminal_status")
    rec["prefill_worker_idx"] = req.prefill_worker if req.prefill_worker >= 0 else None
    rec["decode_worker_idx"] = req.decode_worker if req.decode_worker >= 0 else None
    rec["prefill_admit_ms"] = req.prefill_admit_ms
    rec["source_held_ms"] = req.source_held_ms
    rec["destination_reserved_ms"] = req.destination_reserved_ms
    rec["destination_activated_ms"] = req.destination_activated_ms
    rec["decode_admit_ms"] = req.decode_admit_ms
    rec["source_released_ms"] = req.source_released_ms
    rec["prefill_reused_input_tokens"] = req.prefill_reused
    rec["decode_reused_input_tokens"] = req.decode_reused
    rec["terminal_status"] = status
    return rec


def agg_record(rid: int, turn: Turn, arrival_ms: float, first_admit_ms: float | None, terminal_ms: float | None,
               worker: int, c: Collector) -> dict[str, object]:
    """The record of a request of an aggregated replay: the fields every record has, and the
    worker that prefilled and decoded it."""
    rec = _token_fields(rid, turn, arrival_ms, first_admit_ms, terminal_ms, c)
    status = rec.pop("terminal_status")
    rec["worker_idx"] = worker if worker >= 0 else None
    rec["terminal_status"] = status
    return rec


def _token_fields(rid: int, turn: Turn, arrival_ms: float, first_admit_ms: float | None, terminal_ms: float | None,
                  c: Collector) -> dict[str, object]:
    """The fields of every record, in their order, and its terminal status (last)."""
    n, first_ms, second_ms, last_ms = c.output_of(rid)
    first = first_ms if n > 0 else None
    last = last_ms if n > 0 else None
    second = second_ms if n > 1 else None
    status = c.status_of(rid)
    completed = status is TerminalStatus.COMPLETED
    return {
        "request_id": rid,
        "uuid": request_uuid(rid),
        "session_index": turn.session_index,
        "turn_index": turn.turn_index,
        "arrival_time_ms": arrival_ms,
        "first_admit_ms": first_admit_ms,
        "terminal_time_ms": terminal_ms,
        "first_token_ms": first,
        "last_token_ms": last,
        "ttft_ms": (first - arrival_ms) if first is not None and completed else None,
        "ttst_ms": (second - first) if second is not None and first is not None and completed else None,
        "e2e_latency_ms": (last - arrival_ms) if last is not None and completed else None,
        "itl_ms": ((last - first) / (n - 1)) if n > 1 and last is not None and first is not None else None,
        "input_length": turn.input_length,
        "requested_output_length": turn.output_length,
        "output_length": n,
        "reused_input_tokens": c.reused_of(rid),
        "terminal_status": status.label,
    }
