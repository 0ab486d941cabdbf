"""The one way dmocker writes an output file: atomically, with the mode ``open()`` would give.

Every writer (replay reports and logs, conformance and checker reports, counterexamples,
diagrams, the generated docs) goes through here, so a failed or interrupted run never leaves a
half-written file behind and a finished file looks like one ``open(path, "w")`` made:

- the data goes to a temp file in the target's own folder (so the rename cannot cross file
  systems), is flushed and ``fsync``-ed, then renamed over the target (``os.replace``: atomic on
  POSIX; readers see the old file or the new one, never a mix);
- the temp file is created 0600 by :func:`tempfile.mkstemp`; before the rename it gets
  ``0o666 & ~umask``, the mode ``open()`` gives a new file;
- on any error the temp file is removed and the target is left as it was.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO


def _creation_mode() -> int:
    """``0o666 & ~umask``: the mode ``open()`` creates files with (the umask can only be read by
    setting it, so it is set and restored at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


class AtomicFile:
    """A file that appears at ``path`` only when :meth:`commit` runs (or the ``with`` block ends
    without an error); :meth:`abort` (or an error in the block) leaves ``path`` untouched.

    Text mode writes UTF-8 with ``\\n`` line ends; ``binary=True`` takes bytes.
    ``make_parents`` creates missing parent folders first.
    """

    def __init__(self, path: str | os.PathLike[str], *, binary: bool = False, make_parents: bool = False) -> None:
        self.path = Path(path)
        directory = self.path.parent
        if make_parents:
            directory.mkdir(parents=True, exist_ok=True)
        import tempfile  # here, not at module level: a replay that writes no file never loads it

        fd, self._tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=directory)
        try:
            os.fchmod(fd, _creation_mode())
            self._fh: IO[str] | IO[bytes] = (
                os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8", newline="\n")
            )
        except BaseException:
            os.close(fd)
            os.unlink(self._tmp)
            raise
        self._done = False

    def write(self, data: str | bytes) -> int:
        """Write ``data`` (str in text mode, bytes in binary mode); returns the count like ``IO.write``."""
        return self._fh.write(data)  # type: ignore[arg-type]

    def commit(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self._fh.close()
            os.replace(self._tmp, self.path)
        except BaseException:
            self._fh.close()
            _unlink(self._tmp)
            raise

    def abort(self) -> None:
        if self._done:
            return
        self._done = True
        self._fh.close()
        _unlink(self._tmp)

    def __enter__(self) -> AtomicFile:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def write_atomic(path: str | os.PathLike[str], data: str | bytes, *, make_parents: bool = False) -> None:
    """Write all of ``data`` (text as UTF-8, or bytes) to ``path`` atomically (see the module doc)."""
    with AtomicFile(path, binary=isinstance(data, bytes), make_parents=make_parents) as fh:
        fh.write(data)
