"""Small shared helpers for the CLI edge: error reporting (atomic writes: :mod:`dmocker._atomic`)."""

from __future__ import annotations

import sys


class UsageError(Exception):
    """Bad user input: printed as one line, exit code 2."""


def error(message: str) -> int:
    print(f"dmocker: error: {message}", file=sys.stderr)
    return 2
