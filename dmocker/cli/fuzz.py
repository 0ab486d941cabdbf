"""``dmocker fuzz``: search small cluster scenarios for a run that breaks a coordinator.

Hypothesis generates scenarios (a handful of requests on tiny pools, short outputs, transfer
delays, faults at exact times, worker crashes), runs each through the replay with the
coordinator in the loop, and stops at the first run that breaks an end-of-run invariant or a
protocol invariant, or dead-ends; it then shrinks it to a minimal scenario, prints it step by
step and saves it as JSON, which ``dmocker replay --scenario FILE`` re-runs exactly.

Exit codes: 0 nothing found; 1 a breaking scenario was found (or, for ``replay --scenario``,
the scenario still breaks); 2 bad input (an unloadable coordinator, a bad scenario file, no
Hypothesis installed).
"""

from __future__ import annotations

import argparse
import sys

from dmocker.cli.io import int_at_least
from dmocker.engines.registry import engine_names
from .io import VerbRegistry

__all__ = ["add_parser", "run", "replay_scenario"]

# each mock engine alone, or all of them ("both", as there are two)
_ENGINES = {**{name: (name,) for name in engine_names()}, "both": engine_names()}


_positive = int_at_least(1)


_seed = int_at_least(0)


def add_parser(subparsers: VerbRegistry) -> None:
    p = subparsers.add_parser(
        "fuzz",
        help="search small cluster scenarios (faults, crashes) that break a coordinator",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--coordinator", metavar="MODULE:CLASS", default=None,
                   help="class with the public coordinator API (default: ours)")
    p.add_argument("--engine", choices=sorted(_ENGINES), default="both", help="which engine(s) to search (default both)")
    p.add_argument("--max-examples", type=_positive, default=200, metavar="N", help="scenarios to try (default 200)")
    p.add_argument("--seed", type=_seed, default=0, metavar="S", help="search seed (default 0)")
    p.add_argument("--out", metavar="SCENARIO_JSON", default="dmocker-scenario.json",
                   help="where a breaking scenario is saved (default ./dmocker-scenario.json)")
    p.add_argument("--clocks", nargs="?", const="dmocker", metavar="CONFIGURATION",
                   help="search the coordinator composed with the spec's worker machines (the workers' own "
                        "clocks) in this configuration (default the reference, dmocker) instead of cluster scenarios")
    p.add_argument("--clock-mutant", metavar="NAME", help="with --clocks: apply this clock mutant to the worker machines")
    p.set_defaults(func=run)


def _err(prog: str, message: str) -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


def _run_clocks(args: argparse.Namespace) -> int:
    import json

    from dmocker._atomic import write_atomic
    from dmocker.fuzz.clocks import render_clock_finding, search_clocks

    try:
        result = search_clocks(args.clocks, args.clock_mutant, max_examples=max(args.max_examples, 3000), seed=args.seed)
    except KeyError as exc:
        return _err("dmocker fuzz", str(exc.args[0]))
    if result.finding is None or result.order is None:
        print(f"dmocker fuzz --clocks: {result.configuration}"
              + (f" with {result.mutant}" if result.mutant else "") + ": nothing broke")
        return 0
    sys.stdout.write(render_clock_finding(result))
    data = {"format": "dmocker-clock-counterexample", "version": 1, "configuration": result.configuration,
            "mutant": result.mutant, "order": result.order.value, "moves": list(result.finding.moves),
            "properties": sorted({v.prop for v in result.finding.violations})}
    write_atomic(args.out, json.dumps(data, indent=2) + "\n")
    print(f"\nsaved: {args.out}")
    return 1


def run(args: argparse.Namespace) -> int:
    if args.clocks is not None or args.clock_mutant is not None:
        if args.clocks is None:
            args.clocks = "dmocker"
        try:
            return _run_clocks(args)
        except ImportError as exc:
            return _err("dmocker fuzz", f"needs Hypothesis (pip install 'dmocker[test]'): {exc}")
    try:
        from dmocker.fuzz.render import render
        from dmocker.fuzz.scenario import ScenarioError, coordinator_factory, save_scenario
        from dmocker.fuzz.search import search
    except ImportError as exc:
        return _err("dmocker fuzz", f"needs Hypothesis (pip install 'dmocker[test]'): {exc}")
    try:
        factory = coordinator_factory(args.coordinator)
    except ScenarioError as exc:
        return _err("dmocker fuzz", str(exc))
    result = search(factory, engines=_ENGINES[args.engine], max_examples=args.max_examples, seed=args.seed)
    if result.scenario is None or result.outcome is None:
        print(f"dmocker fuzz: {factory.name}: nothing broke in {result.examples} scenario(s) "
              f"(engine {args.engine}, seed {args.seed})")
        return 0
    sys.stdout.write(render(result.scenario, result.outcome))
    save_scenario(args.out, result.scenario, {"coordinator": factory.name, "problems": result.outcome.problems})
    print(f"\nsaved: {args.out} (re-run: dmocker replay --scenario {args.out}"
          + (f" --coordinator {args.coordinator}" if args.coordinator else "") + ")")
    return 1


def replay_scenario(args: argparse.Namespace) -> int:
    """``dmocker replay --scenario FILE [--coordinator M:C]``: re-run a saved scenario exactly."""
    from dmocker.fuzz.render import render
    from dmocker.fuzz.scenario import ScenarioError, coordinator_factory, load_scenario, run_scenario

    if args.trace is not None or args.synthetic is not None:
        return _err("dmocker replay", "--scenario holds its own workload: give no TRACE or --synthetic with it")
    try:
        scenario = load_scenario(args.scenario)
        factory = coordinator_factory(args.coordinator)
    except ScenarioError as exc:
        return _err("dmocker replay", str(exc))
    outcome = run_scenario(scenario, factory, record=True)
    if not args.quiet:
        sys.stdout.write(render(scenario, outcome))
    if outcome.report is not None and args.out is not None:
        outcome.report.write(args.out)
    return 1 if outcome.failed else 0
