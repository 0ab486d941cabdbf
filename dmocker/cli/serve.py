"""``dmocker serve``: a live mock prefill/decode cluster behind one OpenAI-compatible front on
localhost (docs/serve.md).

The cluster is the replay's (the same configuration flags: engine, pool sizes, routers, link,
model, ``--speedup-ratio`` to shorten every pass), driven by the wall clock.  Ctrl-C or SIGTERM
stops it: the requests still in flight are canceled, and what was asked is written (``--out``
the summary with the end-of-run checks, ``--per-request``, ``--events``), atomically.

Exit codes: 0 stopped by a signal (or --stop-after-s), outputs written; 1 an end-of-run check
broke (outputs still written); 2 bad input -- nothing is started or written.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from typing import Sequence

from dmocker.replay.config import ConfigError

from .config_flags import add_config_flags, config_from_args
from .io import VerbRegistry, check_out_dir, float_arg, int_arg

__all__ = ["add_parser", "configure", "run", "main"]

#: The replay's workload flags: a live cluster's requests come from its clients.
_WORKLOAD_FLAGS = ("trace", "synthetic", "rate", "isl_mean", "osl_mean", "spread", "prefix_groups", "prefix_ratio",
                   "turns", "trace_block_size", "trace_format", "arrival_speedup_ratio", "max_in_flight",
                   "max_sim_time_ms", "planner", "per_request", "events", "timeseries")


def add_parser(subparsers: VerbRegistry) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve a live mock prefill/decode cluster over HTTP (OpenAI API), every handoff by the spec",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    configure(parser)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="CONFIG", help="the cluster's configuration, a TOML or JSON file "
                                                           "(docs/config.md); flags given override its values")
    add_config_flags(parser)
    s = parser.add_argument_group("server")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int_arg, default=8000, help="port of the front (default 8000; 0: any free port)")
    s.add_argument("--served-model-name", action="append", metavar="NAME",
                   help="model name(s) the front answers to (default: --model, or 'dmocker-mock')")
    s.add_argument("--front", choices=("dmocker", "workers"), default="dmocker",
                   help="dmocker: one OpenAI-compatible front, the replay's routers choose the workers (default); "
                        "workers: each worker on a port of its own (--port, --port + 1, ...; prefill first), "
                        "speaking vLLM's disaggregation protocol, for a real proxy in front")
    # The workers' timers are the configuration's, one flag each for replay and serve:
    # --kv-abort-timeout-s (a held source not read in time is freed; with --front workers, one
    # whose decode leg never came), --disaggregation-waiting-timeout-s (a reserved destination
    # whose KV does not come is timed out; with --front workers, a decode leg whose prefill leg
    # never came) and --disaggregation-bootstrap-timeout-s (a destination that makes no room;
    # with --front workers, a prefill leg whose decode leg never came).
    s.add_argument("--capacity", type=int_arg, default=1_000_000,
                   help="requests the cluster takes in its life (default 1,000,000); later ones get 503")
    s.add_argument("--stop-after-s", type=float_arg, default=None, metavar="S",
                   help="stop by itself after S seconds, as on SIGTERM (tests, scripted runs)")
    o = parser.add_argument_group("output (written when the server stops)")
    o.add_argument("--out", metavar="SUMMARY_JSON", help="write {summary, config} here")
    o.add_argument("--per-request", metavar="RECORDS_JSONL", help="write one record per request here")
    o.add_argument("--events", metavar="EVENTS_JSONL", help="write the handoff event log here")
    parser.set_defaults(func=run)


def _fail(message: str) -> int:
    print(f"dmocker serve: error: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    ns = vars(args)
    for name in _WORKLOAD_FLAGS:
        if name in ("per_request", "events"):
            continue
        if ns.get(name) is not None:
            return _fail(f"--{name.replace('_', '-')} is a replay's workload setting; a live cluster's requests "
                         "come from its clients")
    for flag, path in (("--out", args.out), ("--per-request", args.per_request), ("--events", args.events)):
        problem = check_out_dir(flag, path)
        if problem:
            return _fail(problem)
    try:
        from dmocker.serve.server import ServeOptions
    except ImportError as exc:
        return _fail(f"{exc}: pip install \"dmocker[serve]\"")
    try:
        config = config_from_args(argparse.Namespace(**{k: v for k, v in ns.items()
                                                       if k not in ("per_request", "events")}))
        options = ServeOptions.check(config, host=args.host, port=args.port, names=args.served_model_name,
                                     capacity=args.capacity,
                                     out=args.out, per_request=args.per_request, events=args.events,
                                     stop_after_s=args.stop_after_s, front=args.front)
    except (ConfigError, ValueError) as exc:
        return _fail(str(exc))
    try:
        import uvloop  # the loop the HTTP stack was chosen on (docs/serve.md)
    except ImportError:
        return asyncio.run(_serve(options))
    return int(uvloop.run(_serve(options)))


async def _serve(options: object) -> int:
    from dmocker.serve.server import ServeOptions, serve

    assert isinstance(options, ServeOptions)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return await serve(options, stop, started=lambda where: print(f"dmocker serve: listening on {where}", flush=True),
                       wall=time.time)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dmocker serve", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(parser)
    args = parser.parse_args(argv)
    return int(args.func(args))

