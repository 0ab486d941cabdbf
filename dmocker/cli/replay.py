"""``dmocker replay [TRACE]``: replay a Mooncake trace or a synthetic workload, print a summary.

With no arguments it runs the built-in default (a small generated workload on 2 prefill +
2 decode vLLM workers) and prints the summary table.

Exit codes: 0 the replay finished with every end-of-run invariant holding; 1 an invariant broke
(the report is still written, marked failed, and what broke is printed), a user coordinator
broke the protocol, or the replay stopped on a dead end or an internal error; 2 bad input
(trace lines, arguments, fault flags, an unloadable --coordinator) -- nothing is written then.  ``--out``, ``--per-request``
and ``--events`` are written atomically (temp file + rename).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Sequence

from dmocker.handoff import HandoffError
from dmocker.replay.api import DEFAULT_SYNTHETIC, run as replay_run
from dmocker.replay.events import DeadEndError, ReplayInvariantError
from dmocker.replay.planner import PlannerError
from dmocker.replay.faults import FaultPlan, parse_worker_crash
from dmocker.replay.report import JsonValue, Report
from dmocker.replay.workload import WorkloadError

from .routing_flags import add_router_arguments, router_kwargs

__all__ = ["add_parser", "configure", "run", "main", "render_summary"]


def add_parser(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser(
        "replay",
        help="replay a trace (or a synthetic workload) on mock prefill/decode pools",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    configure(parser)


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("trace", nargs="?", metavar="TRACE", help="Mooncake JSONL trace")
    w = parser.add_argument_group("synthetic workload")
    w.add_argument("--synthetic", type=_int, metavar="REQUESTS", help="generate this many requests instead of a trace")
    w.add_argument("--rate", type=_float, help=f"Poisson arrival rate, req/s (default {DEFAULT_SYNTHETIC.rate})")
    w.add_argument("--isl-mean", type=_int, help=f"mean input length (default {DEFAULT_SYNTHETIC.isl_mean})")
    w.add_argument("--osl-mean", type=_int, help=f"mean output length (default {DEFAULT_SYNTHETIC.osl_mean})")
    w.add_argument("--spread", type=_float, help=f"uniform +- fraction around the means (default {DEFAULT_SYNTHETIC.spread})")
    w.add_argument("--prefix-groups", type=_int, help=f"shared-prefix groups (default {DEFAULT_SYNTHETIC.prefix_groups})")
    w.add_argument("--prefix-ratio", type=_float, help=f"share of blocks in the group prefix (default {DEFAULT_SYNTHETIC.prefix_ratio})")
    w.add_argument("--turns", type=_int, help="turns per session (default 1)")
    w.add_argument("--seed", type=_int, default=0, help="generator seed (default 0)")
    e = parser.add_argument_group("engines")
    e.add_argument("--engine", default="vllm", help="vllm (source-first) or sglang (destination-first)")
    e.add_argument("--prefill-workers", type=_int, default=2, help="prefill pool size (default 2)")
    e.add_argument("--decode-workers", type=_int, default=2, help="decode pool size (default 2)")
    e.add_argument("--block-size", type=_int, help="KV block (page) size in tokens (default: vllm 64, sglang 1)")
    e.add_argument("--num-gpu-blocks", type=_int, help="KV blocks per worker (default 16384)")
    e.add_argument("--max-num-seqs", type=_int, help="running requests per worker (default 256)")
    e.add_argument("--max-num-batched-tokens", type=_int, help="token budget per pass (default 8192)")
    e.add_argument("--max-model-len", type=_int, help="longest sequence (default: no limit)")
    e.add_argument("--speedup-ratio", type=_float, help="divide pass times by this (default 1)")
    e.add_argument("--decode-speedup-ratio", type=_float, help="extra divisor for decode time (default 1)")
    e.add_argument("--kv-transfer-bandwidth", type=_float, metavar="GB_S", help="KV transfer bandwidth, decimal GB/s")
    e.add_argument("--kv-bytes-per-token", type=_int, help="KV bytes per token (reference: kv_transfer_bytes_per_token)")
    e.add_argument("--kv-transfer-timing-mode", choices=["full-prompt", "destination-missing"],
                   help="tokens a transfer is charged for (default full-prompt)")
    r = parser.add_argument_group("replay")
    r.add_argument("--trace-block-size", type=_int, default=512, help="tokens per trace hash id (default 512)")
    r.add_argument("--arrival-speedup-ratio", type=_float, default=1.0, help="divide arrival times by this (default 1)")
    r.add_argument("--max-in-flight", type=_int, help="concurrency mode: sessions in flight")
    r.add_argument("--sla-ttft-ms", type=_float, help="goodput bound on TTFT; built-in planners' TTFT target (default 500)")
    r.add_argument("--sla-itl-ms", type=_float, help="goodput bound on mean ITL; built-in planners' ITL target (default 50)")
    r.add_argument("--sla-e2e-ms", type=_float, help="goodput bound on end-to-end latency")
    r.add_argument("--max-sim-time-ms", type=_float, help="soft cap on simulated time")
    pl = parser.add_argument_group("planner (autoscaling in the loop)")
    pl.add_argument("--planner", metavar="MODULE:CLASS|throughput|load",
                    help="scale the pools during the replay: a class with initial_tick_ms() and "
                         "on_tick(metrics) (built with no arguments) or a built-in policy")
    pl.add_argument("--startup-time-s", type=_float, default=0.0,
                    help="seconds from a scale-up until the new worker is ready (default 0)")
    pl.add_argument("--throughput-interval-s", type=_float, default=180.0,
                    help="throughput policy: seconds between adjustments (default 180)")
    pl.add_argument("--load-interval-s", type=_float, default=5.0,
                    help="load policy: seconds between adjustments (default 5)")
    pl.add_argument("--min-endpoint", type=_int, default=1, help="built-in policies: workers per pool at least (default 1)")
    pl.add_argument("--max-gpu-budget", type=_int, default=8,
                    help="built-in policies: GPUs of both pools at most, < 0 for no cap (default 8)")
    f = parser.add_argument_group("faults and coordinators (docs/replay.md#faults)")
    f.add_argument("--fault-cancel-rate", type=_float, default=0.0, metavar="P", help="per-request probability of a client cancel")
    f.add_argument("--fault-fail-rate", type=_float, default=0.0, metavar="P", help="per-request probability of a failed handoff action")
    f.add_argument("--fault-timeout-rate", type=_float, default=0.0, metavar="P", help="per-request probability of a transfer timeout")
    f.add_argument("--fault-seed", type=_int, default=0, metavar="N", help="seed of the fault draws (default 0)")
    f.add_argument("--worker-crash", action="append", default=[], metavar="POOL:INDEX@T_MS",
                   help="worker INDEX of POOL (prefill|decode) dies at T_MS; repeatable")
    f.add_argument("--worker-restart-s", type=_float, metavar="S", help="crashed workers come back empty S seconds later")
    f.add_argument("--coordinator", metavar="MODULE:CLASS",
                   help="drive every handoff with this class (the public coordinator API, as for dmocker check)")
    f.add_argument("--scenario", metavar="SCENARIO_JSON", help="re-run a scenario saved by dmocker fuzz exactly")
    add_router_arguments(parser)
    o = parser.add_argument_group("output")
    o.add_argument("--out", metavar="REPORT_JSON", help="write {summary, config} here")
    o.add_argument("--per-request", metavar="RECORDS_JSONL", help="write one record per request here")
    o.add_argument("--events", metavar="EVENTS_JSONL", help="write the handoff event log here")
    o.add_argument("--html", metavar="REPORT_HTML", help="write a self-contained HTML report with plots here (needs dmocker[plot])")
    o.add_argument("--quiet", action="store_true", help="no progress bar, no summary table")
    parser.set_defaults(func=run)


_TABLE = (
    ("requests (completed / total)", None),
    ("handoff_order", "handoff_order"),
    ("duration_ms", "duration_ms"),
    ("request_throughput_rps", "request_throughput_rps"),
    ("output_throughput_tok_s", "output_throughput_tok_s"),
    ("mean_ttft_ms", "mean_ttft_ms"),
    ("p99_ttft_ms", "p99_ttft_ms"),
    ("mean_itl_ms", "mean_itl_ms"),
    ("p99_itl_ms", "p99_itl_ms"),
    ("mean_e2e_latency_ms", "mean_e2e_latency_ms"),
    ("p99_e2e_latency_ms", "p99_e2e_latency_ms"),
    ("prefix_cache_reused_ratio", "prefix_cache_reused_ratio"),
    ("rejected / failed / canceled / incomplete", None),
)


def _fmt(value: JsonValue) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}" if math.isfinite(value) else str(value)
    return str(value)


def render_summary(report: Report) -> str:
    """The human summary table printed on stdout (first line: engine, pools, workload)."""
    s = report.summary
    rows: list[tuple[str, str]] = []
    for label, key in _TABLE:
        if key is not None:
            rows.append((label, _fmt(s.get(key))))
        elif label.startswith("requests"):
            rows.append((label, f"{s['completed_requests']} / {s['num_requests']}"))
        else:
            rows.append((label, " / ".join(str(s[k]) for k in (
                "rejected_requests", "failed_requests", "canceled_requests", "incomplete_requests"))))
    injected = s.get("faults_injected")
    if isinstance(injected, dict) and any(injected.values()):
        rows.append(("faults injected", ", ".join(f"{k} {v}" for k, v in sorted(injected.items()) if v)))
        causes = s.get("failures_by_cause")
        if isinstance(causes, dict):
            rows.append(("failures by cause", ", ".join(f"{k} {v}" for k, v in sorted(causes.items()) if v) or "-"))
    if s.get("leaked_kv_blocks"):
        rows.append(("leaked_kv_blocks", _fmt(s["leaked_kv_blocks"])))
    if "goodput_completed_requests" in s:
        rows.append(("goodput_completed_requests", _fmt(s["goodput_completed_requests"])))
        rows.append(("goodput_request_throughput_rps", _fmt(s["goodput_request_throughput_rps"])))
    cfg = report.config
    head = (
        f"dmocker replay: {cfg['engine']} {cfg['prefill_workers']}P+{cfg['decode_workers']}D, "
        f"{_workload_label(cfg)}"
        + (f", router {cfg['router']}" if cfg.get("router", "round_robin") != "round_robin" else "")
    )
    width = max(len(k) for k, _ in rows)
    lines = [head, "-" * len(head)]
    lines += [f"{k.ljust(width)}  {v}" for k, v in rows]
    return "\n".join(lines) + "\n"


def _workload_label(cfg: dict[str, JsonValue]) -> str:
    w = cfg.get("workload")
    if not isinstance(w, dict):
        return "?"
    if w.get("kind") == "mooncake":
        return f"trace {w.get('path')}"
    return f"synthetic {w.get('requests')} requests @ {w.get('rate')} req/s (seed {w.get('seed')})"


def _check_out_dir(flag: str, path: str | None) -> str | None:
    if path is None:
        return None
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        return f"{flag} {path}: directory {directory} does not exist"
    if os.path.isdir(path):
        return f"{flag} {path}: is a directory"
    return None


def _fault_plan(args: argparse.Namespace) -> FaultPlan | None:
    """The plan from the fault flags (None when none is set); ValueError on a bad value."""
    crashes = tuple(parse_worker_crash(text) for text in args.worker_crash)
    rates = (args.fault_cancel_rate, args.fault_fail_rate, args.fault_timeout_rate)
    if not crashes and all(r == 0.0 for r in rates) and args.worker_restart_s is None:
        return None
    return FaultPlan(cancel_rate=rates[0], fail_rate=rates[1], timeout_rate=rates[2], seed=args.fault_seed,
                     crashes=crashes, restart_s=args.worker_restart_s)


def run(args: argparse.Namespace) -> int:
    if args.scenario is not None:
        from dmocker.cli.fuzz import replay_scenario

        return replay_scenario(args)
    for flag, path in (("--out", args.out), ("--per-request", args.per_request), ("--events", args.events),
                       ("--html", args.html)):
        problem = _check_out_dir(flag, path)
        if problem:
            print(f"dmocker replay: error: {problem}", file=sys.stderr)
            return 2
    if args.html is not None:
        from dmocker.plotting import PlotUnavailable, require

        try:
            require()
        except PlotUnavailable as exc:
            print(f"dmocker replay: error: --html: {exc}", file=sys.stderr)
            return 2
    progress = not args.quiet and sys.stderr.isatty()
    try:
        faults = _fault_plan(args)
        router, router_config = router_kwargs(args)
        report = replay_run(
            args.trace,
            synthetic=args.synthetic,
            rate=args.rate,
            isl_mean=args.isl_mean,
            osl_mean=args.osl_mean,
            spread=args.spread,
            prefix_groups=args.prefix_groups,
            prefix_ratio=args.prefix_ratio,
            turns=args.turns,
            seed=args.seed,
            engine=args.engine,
            prefill_workers=args.prefill_workers,
            decode_workers=args.decode_workers,
            block_size=args.block_size,
            num_gpu_blocks=args.num_gpu_blocks,
            max_num_seqs=args.max_num_seqs,
            max_num_batched_tokens=args.max_num_batched_tokens,
            max_model_len=args.max_model_len,
            speedup_ratio=args.speedup_ratio,
            decode_speedup_ratio=args.decode_speedup_ratio,
            kv_transfer_bandwidth=args.kv_transfer_bandwidth,
            kv_bytes_per_token=args.kv_bytes_per_token,
            kv_transfer_timing_mode=args.kv_transfer_timing_mode,
            trace_block_size=args.trace_block_size,
            arrival_speedup_ratio=args.arrival_speedup_ratio,
            max_in_flight=args.max_in_flight,
            sla_ttft_ms=args.sla_ttft_ms,
            sla_itl_ms=args.sla_itl_ms,
            sla_e2e_ms=args.sla_e2e_ms,
            max_sim_time_ms=args.max_sim_time_ms,
            per_request=args.per_request,
            events=args.events,
            progress=progress,
            planner=args.planner,
            startup_time_s=args.startup_time_s,
            throughput_interval_s=args.throughput_interval_s,
            load_interval_s=args.load_interval_s,
            min_endpoint=args.min_endpoint,
            max_gpu_budget=args.max_gpu_budget,
            faults=faults,
            coordinator=args.coordinator,
            router=router,
            router_config=router_config,
            timeseries=args.html is not None,
        )
    except (DeadEndError, ReplayInvariantError, HandoffError, PlannerError) as exc:
        print(f"dmocker replay: failed: {exc}", file=sys.stderr)
        return 1
    except (WorkloadError, ValueError, OSError) as exc:
        print(f"dmocker replay: error: {exc}", file=sys.stderr)
        return 2
    if args.out is not None:
        report.write(args.out)
    if args.html is not None:
        from dmocker._atomic import write_atomic
        from dmocker.report_html import render_html

        write_atomic(args.html, render_html(report))
    if not args.quiet:
        sys.stdout.write(render_summary(report))
    return report_invariants("dmocker replay", report)


def report_invariants(prog: str, report: Report) -> int:
    """Exit status of a finished run: 1 (and what broke, on stderr) when an end-of-run invariant failed."""
    if report.summary.get("invariants_ok", True):
        return 0
    breaks = report.summary.get("invariant_breaks")
    for b in breaks if isinstance(breaks, list) else []:
        if isinstance(b, dict):
            ids = b.get("request_ids")
            shown = f" (requests {', '.join(str(i) for i in ids)})" if isinstance(ids, list) and ids else ""
            print(f"{prog}: invariant broken: {b.get('invariant')}: {b.get('message')}{shown}", file=sys.stderr)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry (``python -m dmocker.cli.replay``), same as ``dmocker replay``."""
    parser = argparse.ArgumentParser(prog="dmocker replay", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
