"""``dmocker``: the command-line entry point. Each verb lives in its own module.

A run imports only the module of the verb it runs (``dmocker replay`` needs neither the checker
nor networkx, nor conformance, sweep or diagrams); ``dmocker --help``, an unknown verb and any
other command line that does not start with a verb build the full parser, so the listing and
the error messages name every verb.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from types import ModuleType
from typing import Final, Mapping, NoReturn, Sequence

from dmocker.handoff import SpecError

#: What plain ``dmocker`` runs.
DEFAULT_VERB = "replay"
#: Each verb, in help order, and the module of dmocker.cli that implements it (its
#: ``add_parser`` registers the verb). A module that fails to import is a broken install or a
#: bug: the command stops with an error naming it (a verb silently missing from ``--help``
#: hides both).
VERBS: Final[Mapping[str, str]] = {
    "demo": "demo",
    "replay": "replay",
    "sweep": "sweep",
    "serve": "serve",
    "spec": "spec_cmd",
    "check": "check",
    "conform": "conform",
    "diagram": "diagram",
    "fuzz": "fuzz",
}


#: Verbs whose process skips the interpreter's teardown once they have returned: they register
#: no exit handlers and have written and closed their outputs, and freeing a replay's heap object
#: by object only delays the exit (mypy exits the same way: ``hard_exit`` in mypy/util.py).
HARD_EXIT_VERBS: Final = frozenset({"replay"})


class VerbImportError(Exception):
    """A verb's module cannot be imported."""


def version_text() -> str:
    """``dmocker 0.1.0``."""
    from dmocker import __version__

    return f"dmocker {__version__}"


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """The ``dmocker`` parser with every verb, or with ``verb`` alone (only its module imported).

    A command line that starts with ``verb`` parses the same either way: the top-level parser
    hands everything after the verb to the verb's own parser, and its own messages list no verbs.
    """
    parser = argparse.ArgumentParser(
        prog="dmocker",
        description="Formally specified prefill->decode KV-cache handoff: spec, checker, replay, conformance.",
    )
    parser.add_argument("--version", action="version", version=version_text(),
                        help="print the version")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in VERBS.items():
        if verb is None or name == verb:
            _verb_module(module_name).add_parser(sub)
    return parser


def _verb_module(name: str) -> ModuleType:
    module_name = f"dmocker.cli.{name}"
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise VerbImportError(
            f"the command module {module_name} cannot be loaded: {type(exc).__name__}: {exc} "
            "(a broken install? reinstall dmocker)"
        ) from exc


def _verb_of(words: Sequence[str]) -> str | None:
    """The verb that runs, when the command line says it up front (plain ``dmocker`` runs the
    default one); None otherwise."""
    return DEFAULT_VERB if not words else words[0] if words[0] in VERBS else None


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    verb = _verb_of(words)  # None builds the full parser
    try:
        parser = build_parser(verb)
    except VerbImportError as exc:
        print(f"dmocker: error: {exc}", file=sys.stderr)
        return 1
    except SpecError as exc:  # a module read a bad $DMOCKER_SPEC while importing: bad input
        print(f"dmocker: error: {exc}", file=sys.stderr)
        return 2
    args = parser.parse_args(words)
    if getattr(args, "func", None) is None:
        # No verb: the main job on its built-in default.
        args = parser.parse_args([DEFAULT_VERB, *(argv or [])])
    try:
        code = args.func(args)
    except SpecError as exc:  # a bad $DMOCKER_SPEC read on first use, by a verb that leaves it to us
        print(f"dmocker: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `dmocker demo | head`
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        print("dmocker: interrupted", file=sys.stderr)
        return 130
    return int(code)


def entry() -> NoReturn:
    """The ``dmocker`` command (and ``python -m dmocker``): :func:`main`, then the exit."""
    code = main()
    if _verb_of(sys.argv[1:]) in HARD_EXIT_VERBS:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (BrokenPipeError, ValueError):  # a reader went away, or stderr was closed for it
            pass
        os._exit(code)
    raise SystemExit(code)


if __name__ == "__main__":
    entry()
