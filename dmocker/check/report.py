"""Rendering a :class:`CheckReport`: text summary, JSON document, JUnit XML.

All three are pure functions of the report (no clock, no I/O), so they can be golden-tested;
the CLI writes them atomically.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from dmocker.check.core import Category, CheckReport, OrderReport, PropertyResult, Status
from dmocker.check.inputs import Json, describe_input

_MARK = {Status.PASS: "PASS", Status.FAIL: "FAIL", Status.INCONCLUSIVE: "INCONCLUSIVE", Status.NOT_RUN: "not-run"}
EXIT_MEANING = {0: "all properties hold", 1: "a property fails", 2: "bad input", 3: "inconclusive (max-states reached)"}


def _rate(o: OrderReport) -> str:
    return f"{o.states / o.seconds:,.0f} states/s" if o.seconds > 0 else "-"


def render_text(
    report: CheckReport,
    cex_paths: dict[tuple[str, str], str] | None = None,
    verbose: bool = False,
    traces: dict[tuple[str, str], list[str]] | None = None,
) -> str:
    """The human summary: per order, counts and timing, then one line per property.

    ``traces`` (from :func:`dmocker.check.counterexample.run_steps`) replaces a
    counterexample's bare input list with the replayed reactions when given.
    """
    lines = [
        f"dmocker check {report.target}",
        f"  state identity: {report.snapshot_mode}; copies: {report.clone_mode}; "
        f"max-states {report.max_states:,}; step bound {report.step_bound}",
    ]
    for label, reason in report.skipped_roots:
        lines.append(f"  skipped root: {label}: {reason}")
    for o in report.orders:
        lines.append("")
        extra = " (max-states reached)" if o.truncated else (" (stopped at the first violation)" if o.stopped_early else "")
        lines.append(
            f"order {o.order.value}: {o.states:,} states, {o.transitions:,} transitions, "
            f"{o.seconds:.3f} s ({_rate(o)}){extra}"
        )
        width = max(len(p.name) for p in o.properties)
        for p in o.properties:
            note = f"  {p.message}" if p.message and (p.status is not Status.PASS or verbose or p.category is Category.LIVENESS) else ""
            lines.append(f"  {_MARK[p.status]:<12} {p.name:<{width}}{note}".rstrip())
        for p in o.failed:
            cex = p.counterexample
            if cex is None:
                continue
            lines.append("")
            lines.append(f"  counterexample for {p.name} ({cex.length} steps, root: {cex.root_label}):")
            trace = (traces or {}).get((o.order.value, p.name))
            if trace is not None:
                lines.extend("  " + line for line in trace)
            else:
                for n, step in enumerate(cex.steps, 1):
                    lines.append(f"    {n:3}. {describe_input(step)}")
            path = (cex_paths or {}).get((o.order.value, p.name))
            if path:
                lines.append(f"    saved to {path} (re-run: dmocker check --replay {path})")
    lines.append("")
    code = report.exit_code
    lines.append(f"result: {EXIT_MEANING[code]} (exit {code}); {report.seconds:.3f} s exploring")
    return "\n".join(lines) + "\n"


def _prop_json(p: PropertyResult) -> dict[str, Json]:
    return {
        "name": p.name,
        "category": p.category.value,
        "source": p.source,
        "status": p.status.value,
        "message": p.message,
        "doc": p.doc,
        "counterexample": None if p.counterexample is None else p.counterexample.to_json(),
    }


def render_json(report: CheckReport) -> dict[str, Json]:
    return {
        "format": "dmocker-check-report",
        "version": 1,
        "coordinator": report.target,
        "state_identity": report.snapshot_mode,
        "copies": report.clone_mode,
        "max_states": report.max_states,
        "step_bound": report.step_bound,
        "exit_code": report.exit_code,
        "value_set": list(report.values.describe()),
        "skipped_roots": [{"root": label, "reason": reason} for label, reason in report.skipped_roots],
        "orders": [
            {
                "order": o.order.value,
                "states": o.states,
                "transitions": o.transitions,
                "seconds": round(o.seconds, 6),
                "truncated": o.truncated,
                "stopped_early": o.stopped_early,
                "termination_steps": o.termination_steps,
                "cleanup_steps": o.cleanup_steps,
                "properties": [_prop_json(p) for p in o.properties],
            }
            for o in report.orders
        ],
    }


def render_junit(report: CheckReport) -> str:
    """One testsuite per order, one testcase per property (failure / skipped as JUnit has them)."""
    root = ET.Element("testsuites", name=f"dmocker check {report.target}")
    for o in report.orders:
        suite = ET.SubElement(
            root,
            "testsuite",
            name=f"dmocker-check.{o.order.value}",
            tests=str(len(o.properties)),
            failures=str(sum(p.status is Status.FAIL for p in o.properties)),
            skipped=str(sum(p.status in (Status.NOT_RUN, Status.INCONCLUSIVE) for p in o.properties)),
            time=f"{o.seconds:.3f}",
        )
        if report.skipped_roots:
            props = ET.SubElement(suite, "properties")
            for n, (label, reason) in enumerate(report.skipped_roots, 1):
                ET.SubElement(props, "property", name=f"skipped root {n}", value=f"{label}: {reason}")
        for p in o.properties:
            case = ET.SubElement(suite, "testcase", classname=f"dmocker.check.{o.order.value}", name=p.name)
            if p.status is Status.FAIL:
                fail = ET.SubElement(case, "failure", message=p.message, type=p.category.value)
                if p.counterexample is not None:
                    fail.text = "\n".join(
                        f"{n}. {describe_input(s)}" for n, s in enumerate(p.counterexample.steps, 1)
                    )
            elif p.status in (Status.NOT_RUN, Status.INCONCLUSIVE):
                ET.SubElement(case, "skipped", message=f"{p.status.value}: {p.message}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
