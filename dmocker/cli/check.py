"""`dmocker check`: exhaustively check a coordinator, replay a counterexample, or run the mutants.

Exit codes: 0 every property holds; 1 a property fails (or a replayed counterexample still
fails); 2 bad input (unimportable class, wrong API, unreadable file); 3 inconclusive (the
search hit --max-states before finding a violation).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dmocker._atomic import write_atomic
from dmocker.handoff import HandoffOrder, ProtocolSpec, SpecError, load_spec, load_workers

from dmocker.check.clock_mutants import clock_kill_table, run_clock_mutants
from dmocker.check.clocks import (
    as_expected,
    check_configurations,
    clock_counterexample_json,
    clock_report_json,
    render_clock_report,
)
from dmocker.check.core import check
from dmocker.check.counterexample import load_counterexample, run_steps
from dmocker.check.explore import DEFAULT_MAX_STATES, DEFAULT_STEP_BOUND
from dmocker.check.inputs import InputFormatError
from dmocker.check.invariants import InvariantError, Monitor
from dmocker.check.mutants import DEFAULT_CATALOGUE, CatalogueError, kill_table, load_catalogue, run_mutant
from dmocker.check.report import render_json, render_junit, render_text
from dmocker.check.target import DEFAULT_TARGET, TargetError, load_target
from dmocker.cli.io import int_at_least
from .io import VerbRegistry

_ORDERS = {
    "source-first": (HandoffOrder.SOURCE_FIRST,),
    "destination-first": (HandoffOrder.DESTINATION_FIRST,),
    "both": (HandoffOrder.SOURCE_FIRST, HandoffOrder.DESTINATION_FIRST),
}


_positive = int_at_least(1)


def add_parser(subparsers: VerbRegistry) -> None:
    p = subparsers.add_parser(
        "check",
        help="explore every state of a coordinator against an adversarial environment",
        description=(
            "Breadth-first exploration of a coordinator composed with an adversarial environment; "
            "checks the spec's safety invariants on the fly, then no-deadlock, termination under "
            "fairness and cleanup liveness. Exit 0 pass, 1 fail, 2 bad input, 3 inconclusive."
        ),
    )
    p.add_argument("--coordinator", metavar="package.module:Class", default=None,
                   help=f"class with the API of dmocker.handoff.HandoffCoordinator (default {DEFAULT_TARGET})")
    p.add_argument("--order", choices=sorted(_ORDERS), default="both", help="which order(s) to check (default both)")
    p.add_argument("--max-states", type=_positive, default=DEFAULT_MAX_STATES, metavar="N",
                   help=f"bound on explored states; hitting it without a violation exits 3 (default {DEFAULT_MAX_STATES:,})")
    p.add_argument("--step-bound", type=_positive, default=DEFAULT_STEP_BOUND, metavar="N",
                   help=f"steps allowed to reach Complete in the liveness checks (default {DEFAULT_STEP_BOUND})")
    p.add_argument("--all", action="store_true",
                   help="keep exploring after the first safety violation (one shortest counterexample per property)")
    p.add_argument("--json", metavar="PATH", help="write the full report as JSON")
    p.add_argument("--junit", metavar="PATH", help="write a JUnit XML report (one testcase per property)")
    p.add_argument("--cex-dir", metavar="DIR", default="dmocker-counterexamples",
                   help="where failing properties' counterexamples are saved as JSON (default ./dmocker-counterexamples)")
    p.add_argument("--replay", metavar="FILE", help="re-run a saved counterexample step by step")
    p.add_argument("--mutants", nargs="?", const=str(DEFAULT_CATALOGUE), metavar="DIR",
                   help="run a mutant catalogue (a package folder with MUTANTS; default: the one shipped "
                        "in dmocker.check.mutant_catalogue) and print the kill table")
    p.add_argument("--clocks", nargs="?", const="all", metavar="NAMES",
                   help="check the coordinator composed with the workers' own clocks (the spec's workers section) "
                        "in the named configurations (comma-separated; default all); with --mutants, run the clock "
                        "mutants. Exit 0 when every configuration breaks exactly the properties its spec entry expects")
    p.add_argument("--spec", metavar="PATH", help="protocol spec (default: the repository's spec/handoff.json)")
    p.add_argument("-v", "--verbose", action="store_true", help="print every property's message")
    p.set_defaults(func=run)


def _err(message: str) -> int:
    print(f"dmocker check: error: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    try:
        spec = load_spec(args.spec)
    except SpecError as exc:
        return _err(str(exc))
    orders = _ORDERS[args.order]
    if args.clocks is not None:
        return _run_clocks(args)
    if args.mutants is not None:
        return _run_mutants(args, spec, orders)
    if args.replay is not None:
        return _run_replay(args, spec)
    try:
        target = load_target(args.coordinator)
        report = check(target, orders, spec=spec, max_states=args.max_states,
                       step_bound=args.step_bound, stop_at_first=not args.all)
    except (TargetError, InvariantError) as exc:
        return _err(str(exc))
    paths: dict[tuple[str, str], str] = {}
    traces: dict[tuple[str, str], list[str]] = {}
    for o in report.orders:
        for p in o.failed:
            if p.counterexample is not None:
                path = Path(args.cex_dir) / f"{o.order.value}-{p.name}.json"
                write_atomic(path, _json_text(p.counterexample.to_json()), make_parents=True)
                paths[(o.order.value, p.name)] = str(path)
                monitor = Monitor.for_order(spec, o.order)
                traces[(o.order.value, p.name)] = run_steps(target, p.counterexample, monitor).lines()
    sys.stdout.write(render_text(report, paths, verbose=args.verbose, traces=traces))
    if args.json:
        write_atomic(args.json, _json_text(render_json(report)))
    if args.junit:
        write_atomic(args.junit, render_junit(report))
    return report.exit_code


def _json_text(data: object) -> str:
    return json.dumps(data, indent=2, allow_nan=False) + "\n"


def _run_replay(args: argparse.Namespace, spec: ProtocolSpec) -> int:
    try:
        cex = load_counterexample(args.replay)
        target = load_target(args.coordinator or cex.coordinator)
    except (InputFormatError, TargetError) as exc:
        return _err(str(exc))
    monitor = Monitor.for_order(spec, cex.order)
    result = run_steps(target, cex, monitor)
    print(f"replay {args.replay}: {target.name}, order {cex.order.value}, {cex.kind.value} counterexample for {cex.property_name}")
    print(f"  root: {cex.root_label}")
    for line in result.lines():
        print(line)
    print(f"result: {'REPRODUCED' if result.reproduced else 'not reproduced'}: {result.verdict}")
    return 1 if result.reproduced else 0


def _run_mutants(args: argparse.Namespace, spec: ProtocolSpec, orders: tuple[HandoffOrder, ...]) -> int:
    try:
        catalogue = load_catalogue(args.mutants)
        results = [run_mutant(m, orders, spec=spec, step_bound=args.step_bound) for m in catalogue]
    except CatalogueError as exc:
        return _err(str(exc))
    sys.stdout.write(kill_table(results))
    return 0 if all(r.killed for r in results) else 1


def _run_clocks(args: argparse.Namespace) -> int:
    try:
        workers = load_workers(args.spec)
        target = load_target(args.coordinator)
    except (SpecError, TargetError) as exc:
        return _err(str(exc))
    if args.mutants is not None:
        results = run_clock_mutants(workers)
        sys.stdout.write(clock_kill_table(results) + "\n")
        return 0 if all(r.killed for r in results) else 1
    names = None if args.clocks == "all" else [n.strip() for n in args.clocks.split(",") if n.strip()]
    unknown = [n for n in names or [] if n not in workers.configurations]
    if unknown:
        return _err(f"unknown clock configuration(s) {unknown} (known: {sorted(workers.configurations)})")
    reports = check_configurations(workers, names, target=target)
    for line in render_clock_report(workers, reports):
        print(line)
    for r in reports:
        for res in r.results:
            if not res.ok:
                path = Path(args.cex_dir) / f"clocks-{r.configuration}-{r.order.value}-{res.prop}.json"
                write_atomic(path, _json_text(clock_counterexample_json(r, res)), make_parents=True)
    total = sum(r.seconds for r in reports)
    ok = as_expected(workers, reports)
    print(f"result: {'every configuration as its spec entry says' if ok else 'a configuration differs from its spec entry'} "
          f"(exit {0 if ok else 1}); {sum(r.states for r in reports)} states, {total:.3f} s exploring")
    if args.json:
        write_atomic(args.json, _json_text([clock_report_json(r) for r in reports]))
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (dmocker.cli.main wires ``add_parser`` into ``dmocker``)."""
    parser = argparse.ArgumentParser(prog="dmocker")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
