"""The streaming reader uses the validator's public API only (``Validator.fast_path`` and co.).

stream.py's fast loop used to reach into ``_Open`` and seven private ``Validator`` attributes;
this test parses it and fails on any private name it takes from the validator module or reads
off a Validator.
"""

from __future__ import annotations

import ast
from pathlib import Path

import dmocker.conformance.stream as stream


def test_stream_uses_no_private_validator_names() -> None:
    tree = ast.parse(Path(stream.__file__).read_text(encoding="utf-8"))
    private_imports = [
        a.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "dmocker.conformance.validator"
        for a in node.names
        if a.name.startswith("_")
    ]
    private_reads = [
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "validator"
        and node.attr.startswith("_")
    ]
    assert private_imports == [] and private_reads == []
