"""Code blocks in docs/*.md run as tests, so the documented examples stay true."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.mark.parametrize("name", ["testing.md"])
def test_python_blocks_run(name: str) -> None:
    text = (DOCS / name).read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert blocks, f"{name} has no python example"
    for block in blocks:
        exec(compile(block, f"docs/{name}", "exec"), {"__name__": "docs_example"})
