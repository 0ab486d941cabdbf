"""``dmocker sweep``: replay every combination of configurations, rank them, draw the frontier.

Takes the replay's workload and engine flags; any of --engine, --router, --prefill-workers,
--decode-workers, --block-size, --num-gpu-blocks, --max-num-batched-tokens,
--kv-transfer-bandwidth, --rate and --arrival-speedup-ratio may be a comma list or a range
(1..8, or 10..40:10 with a step), and the sweep runs their cartesian product; each
configuration is an independent deterministic replay.

Exit codes: 0 every configuration ran; 1 some configuration failed (recorded in --out with its
error, the others still ran); 2 bad input -- reported before anything runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Sequence

from dmocker.cli import replay as replay_cli
from dmocker._atomic import write_atomic
from dmocker.replay.report import stable_json
from dmocker.replay.workload import WorkloadError
from dmocker.cli.io import int_at_least

__all__ = ["add_parser", "configure", "run", "main"]

_NOT_FOR_SWEEP = ("per_request", "events", "html")  # per-replay outputs: meaningless for a sweep
_NOT_REPLAY_KWARGS = ("out", "quiet", "func", "verbs", "command", "jobs", "backend", "ray_address",
                      "plot", "max_rate", "sla_attainment", "search_steps", "trace", "from_json")


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser(
        "sweep",
        help="replay a grid of cluster configurations; rank, find capacity, plot the frontier",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    configure(parser)


def configure(parser: argparse.ArgumentParser) -> None:
    from dmocker.sweep.grid import AXES

    replay_cli.configure(parser)  # the replay's flags, whatever helpers have added to them
    options = parser._option_string_actions  # argparse has no public API to retype an action
    for axis in AXES:
        action = options.get(axis.flag)
        if action is None:  # e.g. --router before the router lands in the replay
            parser.add_argument(axis.flag, dest=axis.key, help="comma list of values")
            continue
        action.type = None
        action.default = None
        action.choices = None
        action.help = f"{action.help or ''} -- a value, a comma list or a range (A..B[:STEP])"
    for dest in _NOT_FOR_SWEEP:
        action = options.get("--" + dest.replace("_", "-"))
        if action is not None:
            action.help = argparse.SUPPRESS
    for action in parser._actions:
        if action.dest == "out":
            action.help = "write sweep.json here: {runs: [{config, summary}, ...], ranking, ...}"
            action.metavar = "SWEEP_JSON"
        elif action.dest == "quiet":
            action.help = "no progress bar, no table"
    s = parser.add_argument_group("sweep")
    s.add_argument("--jobs", type=_positive_int, default=os.cpu_count() or 1,
                   help="parallel replays in the local process pool (default: the machine's cores)")
    s.add_argument("--backend", choices=["local", "ray"], default="local",
                   help="local process pool, or Ray tasks (pip install \"dmocker[ray]\")")
    s.add_argument("--ray-address", metavar="ADDR", help="Ray cluster to join (default: start a local one)")
    s.add_argument("--max-rate", action="store_true",
                   help="per configuration, search the highest rate (speedup ratio for a trace) "
                        "at which --sla-attainment of requests meet every SLA bound")
    s.add_argument("--sla-attainment", type=replay_cli._float, default=0.99,
                   help="share of requests that must meet every SLA bound (default 0.99)")
    s.add_argument("--search-steps", type=replay_cli._int, default=8,
                   help="bisection steps of --max-rate after bracketing (default 8)")
    s.add_argument("--plot", metavar="PICTURE", help="draw the Pareto frontier here (.png or .svg)")
    s.add_argument("--from-json", metavar="SWEEP_JSON",
                   help="run nothing: re-rank and re-plot a sweep.json written earlier")
    parser.set_defaults(func=run)


def _replay_params() -> frozenset[str]:
    import inspect

    from dmocker.replay.api import run as replay_run

    return frozenset(inspect.signature(replay_run).parameters) - {"trace"}


def _defaults() -> dict[str, Any]:
    parser = argparse.ArgumentParser(add_help=False)
    configure(parser)
    return {a.dest: a.default for a in parser._actions}


_positive_int = int_at_least(1)


def _fail(message: str) -> int:
    print(f"dmocker sweep: error: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    from dmocker.plotting import PLOT_EXTENSIONS, PlotUnavailable, require
    from dmocker.sweep import Backend, BackendUnavailable, GridError, parse_axis, plan_sweep, render_table, run_sweep
    from dmocker.sweep.grid import AXES
    from dmocker.sweep.plot import plot_frontier
    from dmocker.sweep.runners import import_ray

    ns = vars(args)
    for dest in _NOT_FOR_SWEEP:
        if ns.get(dest) is not None:
            return _fail(f"--{dest.replace('_', '-')} is a per-replay output; run `dmocker replay` for one configuration")
    for flag, path in (("--out", args.out), ("--plot", args.plot)):
        problem = replay_cli._check_out_dir(flag, path)
        if problem:
            return _fail(problem)
    if args.plot is not None:
        ext = os.path.splitext(args.plot)[1].lower().lstrip(".")
        if ext not in PLOT_EXTENSIONS:
            return _fail(f"--plot {args.plot}: the picture must end in .png or .svg")
        try:
            require()
        except PlotUnavailable as exc:
            return _fail(str(exc))
    if args.from_json is not None:
        return _from_json(args)
    backend = Backend(args.backend)
    if backend is Backend.RAY:
        try:
            import_ray()
        except BackendUnavailable as exc:
            return _fail(str(exc))
    elif args.ray_address is not None:
        return _fail("--ray-address needs --backend ray")

    axes: dict[str, tuple[Any, ...]] = {}
    for axis in AXES:
        text = ns.get(axis.key)
        if text is not None:
            try:
                axes[axis.key] = parse_axis(axis, str(text))
            except GridError as exc:
                return _fail(str(exc))
    axis_keys = {a.key for a in AXES}
    run_params = _replay_params()
    defaults = _defaults()
    base = {}
    for k, v in ns.items():
        if v is None or k in _NOT_REPLAY_KWARGS or k in _NOT_FOR_SWEEP or k in axis_keys:
            continue
        if k in run_params:
            base[k] = v
        elif v != defaults.get(k):  # a replay flag that is not a run() keyword (faults, scenarios)
            return _fail(f"--{k.replace('_', '-')} is not supported by dmocker sweep")
    for key in list(axes):
        if len(axes[key]) == 1:  # one value is not an axis: it applies to every configuration
            base[key] = axes.pop(key)[0]
    for key in ("engine", "prefill_workers", "decode_workers"):
        if key not in axes:
            base.setdefault(key, {"engine": "vllm", "prefill_workers": 2, "decode_workers": 2}[key])
    try:
        plan = plan_sweep(args.trace, base, axes, sla_attainment=args.sla_attainment,
                          max_rate=args.max_rate, search_steps=args.search_steps)
    except (GridError, WorkloadError, ValueError, OSError) as exc:
        return _fail(str(exc))

    bar = _bar(len(plan.configs)) if not args.quiet and sys.stderr.isatty() else None
    try:
        outcome = run_sweep(plan, jobs=args.jobs, backend=backend, ray_address=args.ray_address,
                            on_done=(lambda _r: bar.update(1)) if bar is not None else None)
    except BackendUnavailable as exc:
        return _fail(str(exc))
    finally:
        if bar is not None:
            bar.close()
    if args.out is not None:
        write_atomic(args.out, stable_json(outcome.document))
    if args.plot is not None:
        data = plot_frontier(outcome.rows, args.plot, max_rate=plan.search is not None,
                             variable=plan.search.variable if plan.search is not None else "rate",
                             sla_ttft_ms=plan.base.get("sla_ttft_ms"))
        write_atomic(args.plot, data)
    if not args.quiet:
        sys.stdout.write(render_table(outcome.rows, target=plan.target, max_rate=plan.search is not None))
    for row in outcome.rows:
        if not row.ok:
            print(f"dmocker sweep: configuration {row.index} failed: {row.error}", file=sys.stderr)
    return 1 if outcome.failed else 0


def _from_json(args: argparse.Namespace) -> int:
    import json

    from dmocker.sweep.plot import plot_frontier
    from dmocker.sweep.rank import rows_from_document, render_table

    try:
        with open(args.from_json, encoding="utf-8") as fh:
            doc = json.load(fh)
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        rows, target, sla = rows_from_document(doc)
    except (OSError, ValueError) as exc:
        return _fail(f"--from-json {args.from_json}: {exc}")
    max_rate = doc.get("max_rate") is True
    variable = "rate"
    for row in rows:
        if row.search is not None and isinstance(row.search.get("variable"), str):
            variable = str(row.search["variable"])
    ttft = sla.get("ttft_ms")
    if args.plot is not None:
        write_atomic(args.plot, plot_frontier(rows, args.plot, max_rate=max_rate, variable=variable,
                                              sla_ttft_ms=float(ttft) if isinstance(ttft, (int, float)) else None))
    if not args.quiet:
        sys.stdout.write(render_table(rows, target=target, max_rate=max_rate))
    return 1 if any(not r.ok for r in rows) else 0


def _bar(total: int) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, unit="config", dynamic_ncols=True, leave=False, file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry (``python -m dmocker.cli.sweep``), same as ``dmocker sweep``."""
    parser = argparse.ArgumentParser(prog="dmocker sweep", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
