"""``dmocker``: the command-line entry point. Each verb lives in its own module."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

#: Verb modules, in help order. A module that fails to import is skipped, never fatal.
#: What plain ``dmocker`` runs.
DEFAULT_VERB = "replay"
VERBS = ("demo", "replay", "sweep", "spec_cmd", "check", "conform", "diagram")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dmocker",
        description="Formally specified prefill->decode KV-cache handoff: spec, checker, replay, conformance.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parser.set_defaults(verbs=sub.choices)
    for name in VERBS:
        try:
            module = importlib.import_module(f"dmocker.cli.{name}")
        except ImportError:
            continue
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        # No verb: the main job on its built-in default.
        args = parser.parse_args([DEFAULT_VERB if DEFAULT_VERB in args.verbs else "demo", *(argv or [])])
    try:
        code = args.func(args)
    except BrokenPipeError:  # e.g. `dmocker demo | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("dmocker: interrupted", file=sys.stderr)
        return 130
    return int(code)


if __name__ == "__main__":
    raise SystemExit(main())
