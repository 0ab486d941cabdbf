"""Small shared helpers for the CLI edge: atomic writes and error reporting."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path


class UsageError(Exception):
    """Bad user input: printed as one line, exit code 2."""


def write_atomic(path: str | os.PathLike[str], data: str | bytes) -> None:
    """Write via a temp file in the same folder and rename, so a failed run leaves nothing half-written."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=str(target.parent))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def error(message: str) -> int:
    print(f"dmocker: error: {message}", file=sys.stderr)
    return 2
