"""Render DOT text to SVG or PNG with the Graphviz ``dot`` program (the only I/O edge here).

SVG and PNG need a layout engine; writing one is out of scope, so the system's ``dot`` is run
as a subprocess.  When it is missing the caller gets :class:`GraphvizMissing`, whose message
says how to install it, instead of a bare FileNotFoundError.
"""

from __future__ import annotations

import enum
import shutil
import subprocess

INSTALL_HINT = (
    "the Graphviz 'dot' program is needed for SVG and PNG output but was not found on PATH; "
    "install it with `apt-get install -y graphviz` (Debian/Ubuntu), `brew install graphviz` "
    "(macOS), or use --format mermaid or --format dot, which need no system program"
)


class ImageFormat(enum.Enum):
    """Formats that need Graphviz."""

    SVG = "svg"
    PNG = "png"


class GraphvizMissing(RuntimeError):
    """The ``dot`` program is not installed."""


class GraphvizFailed(RuntimeError):
    """``dot`` ran but failed (its stderr is in the message)."""


def dot_program() -> str | None:
    """The path of ``dot``, or None when it is not on PATH."""
    return shutil.which("dot")


def render(dot_text: str, fmt: ImageFormat, *, program: str | None = None) -> bytes:
    """The ``fmt`` image of ``dot_text``; raises GraphvizMissing or GraphvizFailed."""
    exe = program if program is not None else dot_program()
    if exe is None:
        raise GraphvizMissing(INSTALL_HINT)
    try:
        done = subprocess.run(
            [exe, f"-T{fmt.value}"],
            input=dot_text.encode("utf-8"),
            capture_output=True,
            check=False,
            timeout=120,
        )
    except FileNotFoundError:
        raise GraphvizMissing(INSTALL_HINT) from None
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip()
        raise GraphvizFailed(f"dot -T{fmt.value} failed (exit {done.returncode}): {message}")
    return done.stdout
