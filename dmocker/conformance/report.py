"""Render a :class:`ConformanceResult`: stable JSON, a text summary, JUnit XML for CI.

The JSON is the golden form the conformance suite diffs, so it is fully determined by the
input: sorted keys, lists in log or spec order, floats rounded to 6 decimals, and the log named
by its file name only (not the path it was given by).
"""

from __future__ import annotations

import json
from typing import Final
from xml.sax.saxutils import escape, quoteattr

from dmocker.conformance.results import ConformanceResult, Verdict, ViolationKind
from dmocker.handoff import HandoffOrder

REPORT_FORMAT: Final = "dmocker.conformance-report"
REPORT_VERSION: Final = 1
#: How many offending handoffs a JUnit testcase lists (keeps the XML bounded).
JUNIT_LISTED: Final = 10


def _num(value: float) -> float | int:
    rounded = round(value, 6)
    return int(rounded) if rounded == int(rounded) and abs(rounded) < 2**53 else rounded


def verdict_of(result: ConformanceResult) -> str:
    code = result.exit_code
    return {0: "conforms", 1: "violates", 2: "unreadable"}[code]


def to_json(result: ConformanceResult, *, log_name: str, fmt: str) -> dict[str, object]:
    """The report as a JSON-ready dict (see docs/conformance.md for every field)."""
    counts: dict[str, object] = {
        "lines": result.lines,
        "events": result.events,
        "handoffs": result.handoffs,
        **{v: n for v, n in result.verdicts.items()},
        "input_errors": result.input_error_count,
        "events_after_violation": result.events_after_violation,
        "by_order": result.by_order,
    }
    if result.truncated_by_status:
        counts["truncated_by_status"] = result.truncated_by_status
    if result.extra:
        counts.update(result.extra)
    return {
        "format": REPORT_FORMAT,
        "version": REPORT_VERSION,
        "log": log_name,
        "input_format": fmt,
        "order": result.order.value if result.order is not None else "from-engine",
        "verdict": verdict_of(result),
        "exit_code": result.exit_code,
        "aborted": result.aborted,
        "counts": counts,
        "violation_counts": [
            {"order": o.value, "kind": k.value, "count": n} for o, k, n in result.violation_counts
        ],
        "violations": [
            {
                "handoff": v.handoff,
                "order": v.order.value,
                "kind": v.kind.value,
                "line": v.line,
                "t_ms": _num(v.t_ms),
                "event": v.event,
                "seen": list(v.seen),
                "state": list(v.state),
                "allowed": list(v.allowed),
                "message": v.message,
            }
            for v in result.violations
        ],
        "unfinished": [
            {
                "handoff": u.handoff,
                "order": u.order.value,
                "verdict": u.verdict.value,
                "first_line": u.first_line,
                "last_line": u.last_line,
                "seen": list(u.seen),
                "state": list(u.state),
                "expected_next": list(u.allowed),
            }
            for u in result.unfinished
        ],
        "lifecycles": [
            {"order": lc.order.value, "verdict": lc.verdict.value, "events": list(lc.events), "count": lc.count}
            for lc in result.lifecycles
        ],
        "coverage": [
            {
                "order": c.order.value,
                "spec_transitions": c.spec_total,
                "observable": len(c.observable),
                "exercised": list(c.exercised),
                "possibly_exercised": list(c.possibly),
                "unexercised": list(c.unexercised),
                "percent_of_observable": _num(round(c.percent_of_observable, 1)),
                "percent_of_spec": _num(round(c.percent_of_spec, 1)),
            }
            for c in result.coverage
        ],
        "time_anomalies": {
            "backwards_within_handoff": result.time.backwards_within_handoff,
            "max_backwards_ms": _num(result.time.max_backwards_ms),
            "lines_out_of_global_order": result.time.lines_out_of_global_order,
        },
        "input_errors": [
            {"line": e.line, "field": e.field, "reason": e.reason} for e in result.input_errors
        ],
    }


def dumps(report: dict[str, object]) -> str:
    return json.dumps(report, indent=2, sort_keys=True) + "\n"


def _n(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def render_text(result: ConformanceResult, *, log_name: str) -> str:
    """The human summary printed on stdout."""
    out: list[str] = []
    v = result.verdicts
    out.append(
        f"{log_name}: {_n(result.events, 'event')}, {_n(result.handoffs, 'handoff')}: "
        f"{v[Verdict.CONFORMS.value]} conform, {v[Verdict.VIOLATES.value]} violate, "
        f"{v[Verdict.INCOMPLETE.value]} incomplete"
        + (f", {v[Verdict.TRUNCATED.value]} truncated" if v[Verdict.TRUNCATED.value] else "")
        + (f", {result.input_error_count} unreadable lines" if result.input_error_count else "")
    )
    for e in result.input_errors:
        out.append(f"  error: {e.render(log_name)}")
    if result.aborted:
        out.append("  stopped at the first unreadable line (use --keep-going to record and continue)")
    for viol in result.violations:
        out.append(f"  VIOLATION {viol.kind.value} [{viol.order.value}] handoff {viol.handoff!r} at line {viol.line}: {viol.message}")
        out.append(f"    seen:    {' '.join(viol.seen) or '(nothing yet)'}")
        for label in viol.state:
            out.append(f"    state:   {label}")
    listed = len(result.violations)
    total = sum(n for _, _, n in result.violation_counts)
    if total > listed:
        out.append(f"  … {total - listed} more violations (see --json)")
    for u in result.unfinished:
        out.append(f"  INCOMPLETE [{u.order.value}] handoff {u.handoff!r} (lines {u.first_line}-{u.last_line}): "
                   f"seen {' '.join(u.seen) or '(nothing)'}; expected next: {', '.join(u.allowed) or 'nothing'}")
    if result.lifecycles:
        out.append("  lifecycles:")
        for lc in result.lifecycles:
            out.append(f"    {lc.count:>8}  [{lc.order.value}, {lc.verdict.value}] {' '.join(lc.events)}")
    for c in result.coverage:
        out.append(
            f"  coverage [{c.order.value}]: {len(c.exercised)}/{len(c.observable)} observable transitions "
            f"({c.percent_of_observable:.1f}%; {c.percent_of_spec:.1f}% of the spec's {c.spec_total})"
        )
    t = result.time
    if t.backwards_within_handoff or t.lines_out_of_global_order:
        out.append(
            f"  time: {t.backwards_within_handoff} backwards within a handoff (max {t.max_backwards_ms:g} ms), "
            f"{t.lines_out_of_global_order} lines out of global time order"
        )
    out.append(f"verdict: {verdict_of(result).upper()} (exit {result.exit_code})")
    return "\n".join(out) + "\n"


def render_junit(result: ConformanceResult, *, log_name: str) -> str:
    """JUnit XML: one testcase per order x violation kind (plus leaks and unreadable lines).

    Every kind gets a testcase for each order seen, passing or failing, so CI shows what was
    checked; a failing one lists at most JUNIT_LISTED offending handoffs.
    """
    orders = [o for o in HandoffOrder if o.value in result.by_order] or (
        [result.order] if result.order is not None else list(HandoffOrder)
    )
    counts = {(o, k): n for o, k, n in result.violation_counts}
    cases: list[str] = []
    failures = 0
    suite = escape(log_name)
    for order in orders:
        for kind in ViolationKind:
            name = f"{order.value}: {kind.value}"
            n = counts.get((order, kind), 0)
            if not n:
                cases.append(f'    <testcase classname={quoteattr("conformance." + log_name)} name={quoteattr(name)}/>')
                continue
            failures += 1
            listed = [v for v in result.violations if v.order is order and v.kind is kind][:JUNIT_LISTED]
            body = "\n".join(f"handoff {v.handoff!r} line {v.line}: {v.message}" for v in listed)
            if n > len(listed):
                body += f"\n… and {n - len(listed)} more"
            cases.append(
                f'    <testcase classname={quoteattr("conformance." + log_name)} name={quoteattr(name)}>\n'
                f'      <failure message={quoteattr(f"{n} handoffs")} type={quoteattr(kind.value)}>{escape(body)}</failure>\n'
                f"    </testcase>"
            )
        leaks = [u for u in result.unfinished if u.order is order and u.verdict is Verdict.INCOMPLETE]
        n_leaks = result.by_order.get(order.value, {}).get(Verdict.INCOMPLETE.value, 0)
        name = f"{order.value}: incomplete"
        if n_leaks:
            failures += 1
            body = "\n".join(
                f"handoff {u.handoff!r} lines {u.first_line}-{u.last_line}: stopped after {' '.join(u.seen) or 'nothing'}"
                for u in leaks[:JUNIT_LISTED]
            )
            if n_leaks > min(len(leaks), JUNIT_LISTED):
                body += f"\n… and {n_leaks - min(len(leaks), JUNIT_LISTED)} more"
            cases.append(
                f'    <testcase classname={quoteattr("conformance." + log_name)} name={quoteattr(name)}>\n'
                f'      <failure message={quoteattr(f"{n_leaks} handoffs")} type="incomplete">{escape(body)}</failure>\n'
                f"    </testcase>"
            )
        else:
            cases.append(f'    <testcase classname={quoteattr("conformance." + log_name)} name={quoteattr(name)}/>')
    if result.input_error_count:
        failures += 1
        body = "\n".join(e.render(log_name) for e in result.input_errors[:JUNIT_LISTED])
        cases.append(
            f'    <testcase classname={quoteattr("conformance." + log_name)} name="input: readable lines">\n'
            f'      <error message={quoteattr(f"{result.input_error_count} unreadable lines")} type="input_error">{escape(body)}</error>\n'
            f"    </testcase>"
        )
    else:
        cases.append(f'    <testcase classname={quoteattr("conformance." + log_name)} name="input: readable lines"/>')
    errors = 1 if result.input_error_count else 0
    head = (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        f'<testsuites name="dmocker conform" tests="{len(cases)}" failures="{failures - errors}" errors="{errors}">\n'
        f'  <testsuite name="{suite}" tests="{len(cases)}" failures="{failures - errors}" errors="{errors}">\n'
    )
    return head + "\n".join(cases) + "\n  </testsuite>\n</testsuites>\n"
