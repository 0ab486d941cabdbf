"""The trace formats ``dmocker replay`` reads, and telling them apart by a file's first line.

Mooncake JSONL (:mod:`.mooncake`), and the Azure LLM inference and BurstGPT CSV traces
(:mod:`.csv_trace`).  A module of its own so that the configuration names the formats without
loading the readers.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from .errors import WorkloadError

__all__ = ["AZURE", "BURSTGPT", "CSV_FORMATS", "CsvFormat", "TraceFormat", "detect_format"]


class TraceFormat(enum.Enum):
    """How a trace file is read (``--trace-format``); ``auto`` looks at its first line."""

    AUTO = "auto"
    MOONCAKE = "mooncake"
    AZURE = "azure"
    BURSTGPT = "burstgpt"


@dataclass(frozen=True)
class CsvFormat:
    """The columns a CSV trace format is read from."""

    name: str
    timestamp: str
    input_tokens: str
    output_tokens: str
    wall_clock: bool  # timestamps are dates and times (Azure), not seconds from the start (BurstGPT)


AZURE: Final = CsvFormat("azure", "TIMESTAMP", "ContextTokens", "GeneratedTokens", wall_clock=True)
BURSTGPT: Final = CsvFormat("burstgpt", "Timestamp", "Request tokens", "Response tokens", wall_clock=False)
CSV_FORMATS: Final = {TraceFormat.AZURE: AZURE, TraceFormat.BURSTGPT: BURSTGPT}


def detect_format(path: str) -> TraceFormat:
    """The format of the trace at ``path`` from its first non-blank line: a JSON object is a
    Mooncake trace; a CSV header naming Azure's or BurstGPT's columns is that format."""
    try:
        with open(path, "rb") as fh:
            for raw in fh:  # (bytes: only the first line is decoded here; each reader checks the rest)
                text = raw.decode("utf-8", errors="replace").strip().lstrip("\ufeff")
                if not text:
                    continue
                if text.startswith("{"):
                    return TraceFormat.MOONCAKE
                import csv  # (a Mooncake trace never needs it)

                header = {h.strip() for h in next(csv.reader([text]))}
                for fmt, cols in CSV_FORMATS.items():
                    if {cols.timestamp, cols.input_tokens, cols.output_tokens} <= header:
                        return fmt
                raise WorkloadError(
                    "not a trace format dmocker reads: a Mooncake JSONL line, or a CSV header with "
                    f"Azure's columns ({AZURE.timestamp},{AZURE.input_tokens},{AZURE.output_tokens}) or "
                    f"BurstGPT's ({BURSTGPT.timestamp}, {BURSTGPT.input_tokens}, {BURSTGPT.output_tokens})",
                    path=path, line=1)
    except FileNotFoundError:
        raise WorkloadError("no such trace file", path=path) from None
    except IsADirectoryError:
        raise WorkloadError("is a directory, not a trace file", path=path) from None
    except OSError as exc:
        raise WorkloadError(f"cannot read the trace: {exc.strerror or exc}", path=path) from None
    return TraceFormat.MOONCAKE  # empty: the Mooncake reader says so

