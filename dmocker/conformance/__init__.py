"""Conformance: check handoff event logs (and the reference's per-request records) against the spec.

The legal sequences are the observable projection of the compiled protocol table
(:mod:`dmocker.conformance.projection`); the validator streams a log through it in one pass
(:mod:`dmocker.conformance.validator`, :mod:`dmocker.conformance.stream`); reports render as
text, JSON and JUnit (:mod:`dmocker.conformance.report`).  ``docs/conformance.md`` describes the
format and the checks; the CLI is ``dmocker conform``.

The one-request engine fixture lives in :mod:`dmocker.conformance.fixture` (it imports the
replay engines, so it is not imported here).
"""

from dmocker.conformance.events import EVENT_KINDS, FORMAT_VERSION, LogError, LogEvent, parse_line
from dmocker.conformance.projection import Projection, projection_for, success_lifecycle
from dmocker.conformance.report import render_junit, render_text, to_json
from dmocker.conformance.stream import LogFormat, check_dynamo_records, check_lines, check_native
from dmocker.conformance.results import (
    ConformanceResult,
    Coverage,
    Lifecycle,
    TimeAnomalies,
    Unfinished,
    Verdict,
    Violation,
    ViolationKind,
)
from dmocker.conformance.validator import Validator, validate_events

__all__ = [
    "EVENT_KINDS",
    "FORMAT_VERSION",
    "ConformanceResult",
    "Coverage",
    "Lifecycle",
    "LogError",
    "LogEvent",
    "LogFormat",
    "Projection",
    "TimeAnomalies",
    "Unfinished",
    "Validator",
    "Verdict",
    "Violation",
    "ViolationKind",
    "check_dynamo_records",
    "check_lines",
    "check_native",
    "parse_line",
    "projection_for",
    "render_junit",
    "render_text",
    "success_lifecycle",
    "to_json",
    "validate_events",
]
