"""Opening a trace file as a workload, whatever its format (:mod:`.formats`)."""

from __future__ import annotations

from .formats import TraceFormat, detect_format
from .mooncake import MooncakeTrace
from .types import Workload

__all__ = ["open_trace"]


def open_trace(path: str, fmt: TraceFormat = TraceFormat.AUTO, *, trace_block_size: int = 512,
               arrival_speedup_ratio: float = 1.0, clamp_input_length: bool = False) -> Workload:
    """The trace at ``path`` as a workload, read by its format (``auto``: :func:`detect_format`);
    every line is checked here, before anything runs."""
    if fmt is TraceFormat.AUTO:
        fmt = detect_format(path)
    if fmt is TraceFormat.MOONCAKE:
        return MooncakeTrace(path, trace_block_size=trace_block_size, arrival_speedup_ratio=arrival_speedup_ratio,
                             clamp_input_length=clamp_input_length)
    from .csv_trace import CsvTrace  # (loaded only for a CSV trace)

    return CsvTrace(path, fmt, trace_block_size=trace_block_size, arrival_speedup_ratio=arrival_speedup_ratio)
