"""The workload error, re-exported by :mod:`dmocker.replay.workload.types`.

Why its own module: the workload types, trace reader and admission queue are compiled by mypyc
(``setup.py``), and mypyc cannot compile a subclass of a built-in exception as a native class;
kept here, interpreted, it stays an ordinary ``ValueError`` that users catch.
"""

from __future__ import annotations

__all__ = ["WorkloadError"]


class WorkloadError(ValueError):
    """Bad workload input, pointing at the file, line and field at fault."""

    def __init__(
        self, message: str, *, path: str | None = None, line: int | None = None, field: str | None = None
    ) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.detail = message
        where = ""
        if path is not None:
            where = path
            if line is not None:
                where += f":{line}"
            where += ": "
        elif line is not None:
            where = f"line {line}: "
        what = f"field '{field}': " if field is not None else ""
        super().__init__(f"{where}{what}{message}")
