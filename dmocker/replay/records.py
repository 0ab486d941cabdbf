"""The per-request record (one JSONL line per request of ``--per-request``), from the runtime's
state of a request and the collector's settled token times."""

from __future__ import annotations

from .collector import Collector, TerminalStatus
from .report import request_uuid
from .request_state import RequestState

__all__ = ["request_record"]


def request_record(req: RequestState, c: Collector) -> dict[str, object]:
    """The record of ``req`` (retired, or in flight at a time cap), fields in a fixed order."""
    rid = req.rid
    n, first_ms, second_ms, last_ms = c.output_of(rid)
    first = first_ms if n > 0 else None
    last = last_ms if n > 0 else None
    second = second_ms if n > 1 else None
    status = c.status_of(rid)
    completed = status is TerminalStatus.COMPLETED
    rec: dict[str, object] = {
        "request_id": rid,
        "uuid": request_uuid(rid),
        "session_index": req.turn.session_index,
        "turn_index": req.turn.turn_index,
        "arrival_time_ms": req.arrival_ms,
        "first_admit_ms": req.first_admit_ms,
        "terminal_time_ms": req.terminal_ms,
        "first_token_ms": first,
        "last_token_ms": last,
        "ttft_ms": (first - req.arrival_ms) if first is not None and completed else None,
        "ttst_ms": (second - first) if second is not None and first is not None and completed else None,
        "e2e_latency_ms": (last - req.arrival_ms) if last is not None and completed else None,
        "itl_ms": ((last - first) / (n - 1)) if n > 1 and last is not None and first is not None else None,
        "input_length": req.turn.input_length,
        "requested_output_length": req.turn.output_length,
        "output_length": n,
        "reused_input_tokens": c.reused_of(rid),
        "prefill_worker_idx": req.prefill_worker if req.prefill_worker >= 0 else None,
        "decode_worker_idx": req.decode_worker if req.decode_worker >= 0 else None,
        "prefill_admit_ms": req.prefill_admit_ms,
        "source_held_ms": req.source_held_ms,
        "destination_reserved_ms": req.destination_reserved_ms,
        "destination_activated_ms": req.destination_activated_ms,
        "decode_admit_ms": req.decode_admit_ms,
        "source_released_ms": req.source_released_ms,
        "prefill_reused_input_tokens": req.prefill_reused,
        "decode_reused_input_tokens": req.decode_reused,
        "terminal_status": status.label,
    }
    return rec
