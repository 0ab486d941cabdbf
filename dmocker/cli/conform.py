"""``dmocker conform LOG``: check a backend's handoff log against the spec.

Exit codes: 0 every handoff conforms; 1 a violation or an incomplete handoff (a leak);
2 unreadable input (the file, a malformed line, a missing field, an unknown event kind) or bad
arguments.  Reports go to stdout (text), ``--json PATH`` and ``--junit PATH``, written
atomically; without ``--keep-going`` the first unreadable line stops the run and no report
file is written.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Sequence

from dmocker._atomic import write_atomic
from dmocker.conformance.events import LogError
from dmocker.conformance.report import dumps, render_junit, render_text, to_json
from dmocker.conformance.stream import LogFormat, check_lines
from dmocker.conformance.validator import Validator
from dmocker.handoff import HandoffOrder, load_spec, order_for_engine
from .io import VerbRegistry


def add_parser(subparsers: VerbRegistry) -> None:
    parser = subparsers.add_parser(
        "conform",
        help="validate a handoff event log (or Dynamo per-request records) against the spec",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    configure(parser)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("log", nargs="?", metavar="LOG", help="JSONL event log ('-' for stdin)")
    parser.add_argument("--order", choices=[o.value for o in HandoffOrder],
                        help="handoff order of every handoff (default: from each handoff's engine field)")
    engines = load_spec().engines
    parser.add_argument("--engine", help=f"engine of every handoff ({', '.join(e.name for e in engines)}): sets the order")
    parser.add_argument("--format", dest="fmt", choices=[f.value for f in LogFormat], default=LogFormat.NATIVE.value,
                        help="native event log (default) or the reference's per-request records")
    parser.add_argument("--json", dest="json_path", metavar="PATH", help="write the JSON report here")
    parser.add_argument("--junit", dest="junit_path", metavar="PATH", help="write a JUnit XML report here")
    parser.add_argument("--keep-going", action="store_true",
                        help="record unreadable lines as errors and continue (exit code stays 2)")
    parser.add_argument("--max-listed", type=int, default=100, metavar="N",
                        help="list at most N violations and N unfinished handoffs in full (default 100)")
    parser.add_argument("--quiet", action="store_true", help="print only the verdict line")
    parser.add_argument("--fixture", choices=[e.name for e in engines if e.default_block_size is not None],
                        help="run the one-request conformance fixture of this engine instead of reading a log")
    parser.set_defaults(func=run)


def _fail(message: str) -> int:
    print(f"dmocker conform: error: {message}", file=sys.stderr)
    return 2


def run(args: argparse.Namespace) -> int:
    if args.fixture is not None:
        return _run_fixture(args)
    if args.log is None:
        return _fail("give a LOG to check (or --fixture vllm|sglang)")
    if args.max_listed < 0:
        return _fail("--max-listed must be >= 0")
    order: HandoffOrder | None = HandoffOrder.parse(args.order) if args.order else None
    if args.engine is not None:
        try:
            engine_order = order_for_engine(args.engine)
        except ValueError as exc:
            return _fail(f"--engine: {exc}")
        if order is not None and order is not engine_order:
            return _fail(f"--engine {args.engine} is {engine_order.value} but --order says {order.value}")
        order = engine_order
    fmt = LogFormat(args.fmt)
    if fmt is LogFormat.DYNAMO_RECORDS and order is None:
        return _fail("dynamo records carry no engine: give --order or --engine")
    for flag, path in (("--json", args.json_path), ("--junit", args.junit_path)):
        if path is not None:
            parent = Path(path).resolve().parent
            if not parent.is_dir():
                return _fail(f"{flag} {path}: directory {parent} does not exist")
    name = "<stdin>" if args.log == "-" else args.log
    log_name = "stdin" if args.log == "-" else os.path.basename(args.log)
    validator = Validator(order, max_listed=args.max_listed)
    try:
        if args.log == "-":
            check_lines(sys.stdin, validator, fmt, order=order, keep_going=args.keep_going)
        else:
            with open(args.log, encoding="utf-8", errors="replace", newline=None) as handle:
                check_lines(handle, validator, fmt, order=order, keep_going=args.keep_going)
    except IsADirectoryError:
        return _fail(f"{name}: is a directory")
    except FileNotFoundError:
        return _fail(f"{name}: no such file")
    except OSError as exc:
        return _fail(f"{name}: cannot read: {exc.strerror or exc}")
    result = validator.result()
    if result.events == 0 and result.input_error_count == 0:
        validator.error(LogError(result.lines, None, "no events in the log"))
        result = validator.result()
    if result.aborted:
        first = result.input_errors[0]
        print(f"dmocker conform: error: {first.render(name)}", file=sys.stderr)
        print("dmocker conform: stopped at the first unreadable line (--keep-going records it and continues); "
              "no report written", file=sys.stderr)
        return 2
    text = render_text(result, log_name=log_name)
    if args.quiet:
        text = text.splitlines()[-1] + "\n"
    sys.stdout.write(text)
    if args.json_path is not None:
        write_atomic(args.json_path, dumps(to_json(result, log_name=log_name, fmt=fmt.value)))
    if args.junit_path is not None:
        write_atomic(args.junit_path, render_junit(result, log_name=log_name))
    return result.exit_code


def _run_fixture(args: argparse.Namespace) -> int:
    from dmocker.conformance.fixture import run_fixture_cli  # imports the engines: only when asked

    return run_fixture_cli(args)


def main(argv: Sequence[str] | None = None) -> int:
    """Standalone entry point (``python -m dmocker.cli.conform``), same as ``dmocker conform``."""
    parser = argparse.ArgumentParser(prog="dmocker conform", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(parser)
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
