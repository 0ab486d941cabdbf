"""``dmocker``: the command-line entry point. Each verb lives in its own module."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Sequence

from dmocker.handoff import SpecError

#: What plain ``dmocker`` runs.
DEFAULT_VERB = "replay"
#: Verb modules, in help order. One that fails to import is a broken install or a bug: the
#: command stops with an error naming it (a verb silently missing from ``--help`` hides both).
VERBS = ("demo", "replay", "sweep", "spec_cmd", "check", "conform", "diagram", "fuzz")


class VerbImportError(Exception):
    """A verb's module cannot be imported."""


def version_text() -> str:
    """``dmocker 0.1.0``."""
    from dmocker import __version__

    return f"dmocker {__version__}"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dmocker",
        description="Formally specified prefill->decode KV-cache handoff: spec, checker, replay, conformance.",
    )
    parser.add_argument("--version", action="version", version=version_text(),
                        help="print the version")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parser.set_defaults(verbs=sub.choices)
    for name in VERBS:
        module_name = f"dmocker.cli.{name}"
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise VerbImportError(
                f"the command module {module_name} cannot be loaded: {type(exc).__name__}: {exc} "
                "(a broken install? reinstall dmocker)"
            ) from exc
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
    except VerbImportError as exc:
        print(f"dmocker: error: {exc}", file=sys.stderr)
        return 1
    except SpecError as exc:  # a module read a bad $DMOCKER_SPEC while importing: bad input
        print(f"dmocker: error: {exc}", file=sys.stderr)
        return 2
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
