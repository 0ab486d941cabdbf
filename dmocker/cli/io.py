"""Small shared helpers for the CLI edge: error reporting, number flags, output paths (atomic
writes: :mod:`dmocker._atomic`)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Protocol

__all__ = ["UsageError", "VerbRegistry", "error", "float_arg", "int_arg", "int_at_least", "check_out_dir"]


class VerbRegistry(Protocol):
    """Where a verb's module registers its parser: what ``ArgumentParser.add_subparsers()``
    returns (typed here by what the verbs use, argparse's own class being private)."""

    def add_parser(self, name: str, *, help: str | None = ..., description: str | None = ...,
                   formatter_class: type[argparse.HelpFormatter] = ...) -> argparse.ArgumentParser: ...


class UsageError(Exception):
    """Bad user input: printed as one line, exit code 2."""


def error(message: str) -> int:
    print(f"dmocker: error: {message}", file=sys.stderr)
    return 2


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type`` for integer flags with a lower bound (counts, seeds)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {text!r}")
        return value

    return parse


def float_arg(text: str) -> float:
    """An argparse ``type`` for number flags (ranges are the configuration's to check)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def int_arg(text: str) -> int:
    """An argparse ``type`` for integer flags (ranges are the configuration's to check)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def check_out_dir(flag: str, path: str | None) -> str | None:
    """The problem with writing an output file at ``path`` (its directory is missing, or it is a
    directory), or None: checked before a run, so a run never ends unable to write."""
    if path is None:
        return None
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        return f"{flag} {path}: directory {directory} does not exist"
    if os.path.isdir(path):
        return f"{flag} {path}: is a directory"
    return None
