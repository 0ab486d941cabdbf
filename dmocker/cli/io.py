"""Small shared helpers for the CLI edge: error reporting and integer flags (atomic writes:
:mod:`dmocker._atomic`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable


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
