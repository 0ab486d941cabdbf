"""``dmocker sweep``: replay every combination of configurations, rank them, draw the frontier.

Takes the replay's configuration (``--config FILE`` and the replay's flags); any configuration
field can be varied with ``--vary NAME=VALUES`` (NAME: a dotted path such as
``decode.max_num_seqs``, or a flag name such as ``max_num_seqs``, both pools; docs/config.md),
and --engine, --router, --prefill-workers, --decode-workers, --block-size, --num-gpu-blocks,
--max-num-batched-tokens, --kv-transfer-bandwidth, --rate and --arrival-speedup-ratio take the
values directly.  VALUES is a comma list or a range (1..8, or 10..40:10 with a step); the sweep
runs the cartesian product, each configuration an independent deterministic replay.

Exit codes: 0 every configuration ran; 1 some configuration failed (recorded in --out with its
error, the others still ran); 2 bad input -- reported before anything runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from dmocker._atomic import write_atomic
from dmocker.replay.config import ConfigError, resolve_name
from dmocker.replay.report import stable_json
from dmocker.replay.workload import WorkloadError
from dmocker.sweep.grid import AXES, Axis, AxisKind, ConfigValue, GridError, axis_for, parse_axis

from .config_flags import add_config_flags, config_from_args, given_values
from .io import VerbRegistry, check_out_dir, float_arg, int_arg, int_at_least

__all__ = ["add_parser", "configure", "run", "main"]

_PER_REPLAY = ("--per-request", "--events", "--html")  # per-replay outputs: meaningless for a sweep


def add_parser(subparsers: VerbRegistry) -> None:
    parser = subparsers.add_parser(
        "sweep",
        help="replay a grid of cluster configurations; rank, find capacity, plot the frontier",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    configure(parser)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", nargs="?", metavar="TRACE", help="Mooncake JSONL trace")
    parser.add_argument("--config", metavar="CONFIG",
                        help="the base configuration, a TOML or JSON file (docs/config.md); flags override it")
    add_config_flags(parser, axes={a.key for a in AXES})
    s = parser.add_argument_group("sweep")
    s.add_argument("--vary", action="append", default=[], metavar="NAME=VALUES",
                   help="sweep any configuration field: NAME a dotted path (decode.max_num_seqs) or a flag "
                        "name (max_num_seqs: both pools), VALUES a comma list or a range (A..B[:STEP]); "
                        "repeatable")
    s.add_argument("--gpus", metavar="N",
                   help="for each GPU count (a value, a comma list or a range), the cluster aggregated "
                        "(--mode agg --workers N) and every prefill/decode split of N, ranked together")
    s.add_argument("--jobs", type=_positive_int, default=os.cpu_count() or 1,
                   help="parallel replays in the local process pool (default: the machine's cores)")
    s.add_argument("--backend", choices=["local", "ray"], default="local",
                   help="local process pool, or Ray tasks (pip install \"dmocker[ray]\")")
    s.add_argument("--ray-address", metavar="ADDR", help="Ray cluster to join (default: start a local one)")
    s.add_argument("--max-rate", action="store_true",
                   help="per configuration, search the highest rate (speedup ratio for a trace) "
                        "at which --sla-attainment of requests meet every SLA bound")
    s.add_argument("--sla-attainment", type=float_arg, default=0.99,
                   help="share of requests that must meet every SLA bound (default 0.99)")
    s.add_argument("--search-steps", type=int_arg, default=8,
                   help="bisection steps of --max-rate after bracketing (default 8)")
    s.add_argument("--plot", metavar="PICTURE", help="draw the Pareto frontier here (.png or .svg)")
    s.add_argument("--from-json", metavar="SWEEP_JSON",
                   help="run nothing: re-rank and re-plot a sweep.json written earlier")
    o = parser.add_argument_group("output")
    o.add_argument("--out", metavar="SWEEP_JSON",
                   help="write sweep.json here: {base, axes, runs: [{config, summary}, ...], ranking, ...}")
    o.add_argument("--quiet", action="store_true", help="no progress bar, no table")
    for flag in _PER_REPLAY:  # accepted only to say why they do not apply
        o.add_argument(flag, dest="per_replay_" + flag[2:].replace("-", "_"), help=argparse.SUPPRESS)
    parser.set_defaults(func=run)


_positive_int = int_at_least(1)
_GPUS = Axis("gpus", AxisKind.INT, 2)


def _fail(message: str) -> int:
    print(f"dmocker sweep: error: {message}", file=sys.stderr)
    return 2


def _axes(args: argparse.Namespace) -> dict[str, tuple[ConfigValue, ...]]:
    """The swept fields by name (GridError on a bad one): the axis flags, then ``--vary``."""
    ns = vars(args)
    axes: dict[str, tuple[ConfigValue, ...]] = {}
    for axis in AXES:
        text = ns.get(axis.key)
        if text is not None:
            axes[axis.key] = parse_axis(axis, str(text))
    for item in args.vary:
        name, eq, values = item.partition("=")
        if not eq or not name.strip():
            raise GridError(f"--vary {item!r}: expected NAME=VALUES (e.g. decode.max_num_seqs=128,256)")
        axis = axis_for(name.strip())
        swept = {p for key in axes for p in resolve_name(key)}
        if swept & set(resolve_name(axis.key)):
            raise GridError(f"--vary {axis.key}: this field is already swept")
        axes[axis.key] = parse_axis(axis, values)
    return axes


def run(args: argparse.Namespace) -> int:
    from dmocker.plotting import PLOT_EXTENSIONS, PlotUnavailable, require
    from dmocker.sweep import Backend, BackendUnavailable, plan_sweep, render_table, run_sweep
    from dmocker.sweep.plot import plot_frontier
    from dmocker.sweep.runners import import_ray

    ns = vars(args)
    for flag in _PER_REPLAY:
        if ns.get("per_replay_" + flag[2:].replace("-", "_")) is not None:
            return _fail(f"{flag} is a per-replay output; run `dmocker replay` for one configuration")
    for flag, path in (("--out", args.out), ("--plot", args.plot)):
        problem = check_out_dir(flag, path)
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
    try:
        axes = _axes(args)
        single = {key: values[0] for key, values in axes.items() if len(values) == 1}
        for key in single:  # one value is not an axis: it applies to every configuration
            del axes[key]
        # The base: the file and the flags that are not axes, then the single values.
        base_args = argparse.Namespace(**{**ns, **{a.key: None for a in AXES}})
        swept = {p for key in axes for p in resolve_name(key)}
        for name in given_values(base_args):  # a flag every field of which is swept would do nothing
            if set(resolve_name(name)) <= swept:
                raise GridError(f"--{name.replace('_', '-')} is also swept (--vary); give it once")
        base = config_from_args(base_args, single)
        gpus = parse_axis(_GPUS, args.gpus) if args.gpus is not None else ()
        plan = plan_sweep(base, axes, sla_attainment=args.sla_attainment,
                          max_rate=args.max_rate, search_steps=args.search_steps, gpus=gpus)
    except (GridError, ConfigError, WorkloadError, ValueError, OSError) as exc:
        return _fail(str(exc))

    bar = _bar(len(plan.configs)) if not args.quiet and sys.stderr.isatty() else None
    try:
        outcome = run_sweep(plan, jobs=args.jobs, backend=backend, ray_address=args.ray_address,
                            on_done=bar.done if bar is not None else None)
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
                             sla_ttft_ms=plan.base.sla.ttft_ms)
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


class _Bar:
    """The progress bar: one step per finished configuration."""

    def __init__(self, total: int) -> None:
        from tqdm import tqdm

        self._bar = tqdm(total=total, unit="config", dynamic_ncols=True, leave=False, file=sys.stderr)

    def done(self, _result: object) -> None:
        self._bar.update(1)

    def close(self) -> None:
        self._bar.close()


def _bar(total: int) -> _Bar:
    return _Bar(total)


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry (``python -m dmocker.cli.sweep``), same as ``dmocker sweep``."""
    parser = argparse.ArgumentParser(prog="dmocker sweep", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
