"""Read a :class:`~dmocker.replay.config.ReplayConfig` from a TOML or JSON file.

The format is the file's extension (``.toml``, ``.json``) or, for any other name, its first
character (``{``: JSON).  A whole report (``dmocker replay --out``) is accepted too: its
``config`` section is read, so a report reruns as ``dmocker replay --config report.json``.
Relative paths in the file (the trace, the outputs) are relative to the current directory,
as on the command line.

Every problem is a :class:`~dmocker.replay.config_schema.ConfigError` naming the file, the line
when it can be found (always for a syntax error), and the field.
"""

from __future__ import annotations

import json
import os
import re

from .config import ReplayConfig
from .config_schema import ConfigError

__all__ = ["load_config", "field_line"]

_TOML_ERROR_AT = re.compile(r"\(at line (\d+), column \d+\)")


def load_config(path: str | os.PathLike[str]) -> ReplayConfig:
    """The configuration in the file at ``path`` (ConfigError naming file, line and field)."""
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror}", file=name) from None
    except UnicodeDecodeError:
        raise ConfigError("not a text file (TOML or JSON expected)", file=name) from None
    is_json = _is_json(name, text)
    data = _parse(name, text, is_json)
    if isinstance(data, dict) and isinstance(data.get("config"), dict) and "summary" in data:
        data = data["config"]  # a whole report
    try:
        return ReplayConfig.from_json(data)
    except ConfigError as exc:
        line = _field_line(text, exc.field, is_json) if exc.field else None
        raise exc.at(file=name, line=line) from None


def field_line(path: str | os.PathLike[str], field: str | None) -> int | None:
    """Best effort: the line of the file at ``path`` where ``field`` (a dotted path) is set."""
    if field is None:
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError):
        return None
    return _field_line(text, field, _is_json(os.fspath(path), text))


def _is_json(name: str, text: str) -> bool:
    ext = os.path.splitext(name)[1].lower()
    if ext in (".json", ".toml"):
        return ext == ".json"
    return text.lstrip().startswith("{")


def _parse(name: str, text: str, is_json: bool) -> object:
    if is_json:
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"not valid JSON: {exc.msg} (column {exc.colno})", file=name, line=exc.lineno) from None
    import tomllib  # here: a replay that reads no TOML file does not load the parser

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        m = _TOML_ERROR_AT.search(message)
        line = int(m.group(1)) if m else None
        raise ConfigError(f"not valid TOML: {_TOML_ERROR_AT.sub('', message).strip()}", file=name, line=line) from None


def _field_line(text: str, field: str, is_json: bool) -> int | None:
    """Best effort: the line where ``field`` (a dotted path) is written, or its table's line."""
    parts = [p for p in re.sub(r"\[\d+\]", "", field).split(".") if p]
    if not parts:
        return None
    return _json_line(text, parts) if is_json else _toml_line(text, parts)


_TOML_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?")
_TOML_KEY = re.compile(r"^\s*([A-Za-z0-9_\-\".' ]+?)\s*=")


def _toml_keys(text: str) -> list[str]:
    return [k.strip().strip("\"'") for k in text.split(".")]


def _toml_line(text: str, parts: list[str]) -> int | None:
    """The field's own line; else the line of the longest table or key holding it."""
    table: list[str] = []
    best: tuple[int, int] | None = None  # (depth, line)
    for n, line in enumerate(text.splitlines(), start=1):
        header = _TOML_HEADER.match(line)
        key = None if header else _TOML_KEY.match(line)
        if header:
            table = _toml_keys(header.group(1))
            full = table
        elif key:
            full = table + _toml_keys(key.group(1))
        else:
            continue
        if full == parts and key:
            return n
        if full == parts[:len(full)] and (best is None or len(full) > best[0]):
            best = (len(full), n)
    return best[1] if best is not None else None


def _json_line(text: str, parts: list[str]) -> int | None:
    pos = 0
    found: int | None = None
    for part in parts:
        m = re.compile(r'"' + re.escape(part) + r'"\s*:').search(text, pos)
        if m is None:
            break
        pos = m.end()
        found = text.count("\n", 0, m.start()) + 1
    return found
