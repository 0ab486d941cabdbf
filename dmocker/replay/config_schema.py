"""The machinery under :class:`~dmocker.replay.config.ReplayConfig`: typed fields, checked values.

Why generic: the configuration is a tree of frozen dataclasses, read from TOML or JSON, written
back as JSON, overridden by CLI flags and varied by ``dmocker sweep``.  All of these walk the
same fields, so the walk is written once, driven by the dataclasses' own type annotations: a
field's type says how a file value, a flag's text or a Python value becomes the field's value,
and a :class:`Bound` (per class and field) says its range.  Every failure is a
:class:`ConfigError` naming the field by its dotted path (``decode.max_num_seqs``).

Supported field types: ``int``, ``float`` (finite; an integer is accepted and stored as a
float), ``bool``, ``str``, enums (by value), ``X | None``, nested dataclasses (a table),
``tuple[D, ...]`` of dataclasses (a list of tables) and :class:`PythonObject` (a value only
Python can give, such as a planner instance; a file gives its text form instead).
"""

from __future__ import annotations

import dataclasses
import enum
import math
import os
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypeAlias, Union

__all__ = [
    "Bound",
    "ConfigError",
    "ConfigValue",
    "Check",
    "FieldInfo",
    "JsonValue",
    "PythonObject",
    "Schema",
]

JsonValue: TypeAlias = Union[None, bool, int, float, str, list["JsonValue"], dict[str, "JsonValue"]]
ConfigValue: TypeAlias = Union[None, bool, int, float, str]
"""One scalar value of a field, as a flag or ``--vary`` gives it after parsing."""


class ConfigError(ValueError):
    """A configuration value that cannot be used: names the field, and the file (and line) it
    came from when it was read from one."""

    def __init__(self, message: str, *, field: str | None = None, file: str | None = None,
                 line: int | None = None) -> None:
        self.detail = message
        self.field = field
        self.file = file
        self.line = line
        super().__init__(self._text())

    def _text(self) -> str:
        where = ""
        if self.file is not None:
            where = self.file + (f":{self.line}" if self.line is not None else "") + ": "
        what = f"field '{self.field}': " if self.field else ""
        return f"{where}{what}{self.detail}"

    def at(self, *, field: str | None = None, file: str | None = None, line: int | None = None) -> ConfigError:
        """The same error with its place filled in (what is already known is kept)."""
        return ConfigError(self.detail, field=self.field or field, file=self.file or file,
                           line=self.line if self.line is not None else line)


class _Mismatch(ConfigError):
    """A value of the wrong kind (a union tries its next alternative)."""


class PythonObject:
    """Stand-in type for a field that also takes a Python object (a planner, a coordinator
    factory, a workload); the field's :data:`Check` says what is acceptable."""


@dataclass(frozen=True, slots=True)
class Bound:
    """The range of a number field: ``minimum`` (``exclusive``: strictly above), ``maximum``."""

    minimum: float | None = None
    exclusive: bool = False
    maximum: float | None = None

    def problem(self, value: float) -> str | None:
        lo, hi = self.minimum, self.maximum
        if lo is not None and (value < lo or (self.exclusive and value == lo)):
            return f"must be {'>' if self.exclusive else '>='} {lo:g}"
        if hi is not None and value > hi:
            return f"must be <= {hi:g}"
        return None

    def text(self) -> str:
        parts = []
        if self.minimum is not None:
            parts.append(f"{'>' if self.exclusive else '>='} {self.minimum:g}")
        if self.maximum is not None:
            parts.append(f"<= {self.maximum:g}")
        return ", ".join(parts)


Check: TypeAlias = Callable[[object], str | None]
"""A field's own rule: the problem with a value (a sentence), or None when it is fine."""


@dataclass(frozen=True, slots=True)
class FieldInfo:
    name: str
    hint: object  # a type, or a typing form (``int | None``, ``tuple[X, ...]``)
    default: object  # dataclasses.MISSING when required


def _is_dataclass_type(hint: object) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def _union_args(hint: object) -> tuple[object, ...] | None:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is Union:
        return typing.get_args(hint)
    return None


def _kind_name(hint: object) -> str:
    if hint is int:
        return "an integer"
    if hint is float:
        return "a number"
    if hint is bool:
        return "true or false"
    if hint is str:
        return "a string"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in hint)
    if _is_dataclass_type(hint):
        return "a table"
    if typing.get_origin(hint) is tuple:
        return "a list"
    if hint is PythonObject:
        return "a Python object (given from Python only)"
    args = _union_args(hint)
    if args is not None:
        return " or ".join("null" if a is type(None) else _kind_name(a) for a in args)
    return str(hint)


class Schema:
    """The walk over a configuration's dataclasses (see the module docstring).

    ``bounds`` and ``checks`` are keyed by ``(dataclass, field name)``; ``namespace`` resolves
    annotation names that exist only for the type checker (a planner protocol, a workload
    protocol: :class:`PythonObject` at run time); ``text_of`` gives the file form of a Python
    object; ``text_forms`` lets a dataclass also be written as one string (parse, format);
    ``table_defaults`` gives, for a dataclass, the instance a partial table starts from (when it
    is not the class's own defaults).
    """

    def __init__(
        self,
        *,
        bounds: Mapping[tuple[type, str], Bound],
        checks: Mapping[tuple[type, str], Check],
        namespace: Mapping[str, object],
        text_of: Callable[[object], str],
        text_forms: Mapping[type, tuple[Callable[[str], object], Callable[[object], str]]],
        table_defaults: Mapping[type, object],
    ) -> None:
        self._bounds = dict(bounds)
        self._checks = dict(checks)
        self._namespace = dict(namespace)
        self._text_of = text_of
        self._text_forms = dict(text_forms)
        self._table_defaults = dict(table_defaults)
        self._fields: dict[type, tuple[FieldInfo, ...]] = {}

    # ---- fields ----------------------------------------------------------------------------

    def fields(self, cls: type) -> tuple[FieldInfo, ...]:
        """The dataclass's fields with their resolved annotations, in declaration order."""
        known = self._fields.get(cls)
        if known is None:
            hints = typing.get_type_hints(cls, localns=self._namespace)
            known = tuple(
                FieldInfo(f.name, hints[f.name],
                          f.default if f.default is not dataclasses.MISSING
                          else f.default_factory() if f.default_factory is not dataclasses.MISSING
                          else dataclasses.MISSING)
                for f in dataclasses.fields(cls)
            )
            self._fields[cls] = known
        return known

    def field(self, cls: type, name: str) -> FieldInfo | None:
        for f in self.fields(cls):
            if f.name == name:
                return f
        return None

    def bound(self, cls: type, name: str) -> Bound | None:
        return self._bounds.get((cls, name))

    def leaves(self, cls: type, prefix: str = "") -> list[tuple[str, FieldInfo, type]]:
        """Every leaf field under ``cls``: (dotted path, field, owning class); nested dataclasses
        (also optional ones) are walked, lists of tables are leaves."""
        out: list[tuple[str, FieldInfo, type]] = []
        for f in self.fields(cls):
            path = f"{prefix}{f.name}"
            inner = self.table_type(f.hint)
            if inner is not None:
                out.extend(self.leaves(inner, path + "."))
            else:
                out.append((path, f, cls))
        return out

    @staticmethod
    def table_type(hint: object) -> type | None:
        """The dataclass a field holds (``D`` or ``D | None``), or None for a leaf."""
        if _is_dataclass_type(hint):
            assert isinstance(hint, type)
            return hint
        args = _union_args(hint)
        if args is not None:
            tables = [a for a in args if _is_dataclass_type(a)]
            if len(tables) == 1 and all(a is type(None) or a is tables[0] for a in args):
                found = tables[0]
                assert isinstance(found, type)
                return found
        return None

    # ---- values in -------------------------------------------------------------------------

    def build(self, cls: type, data: object, path: str = "") -> object:
        """An instance of ``cls`` from a mapping (a file's table) or an instance (re-checked)."""
        if isinstance(data, cls):
            values = {f.name: getattr(data, f.name) for f in self.fields(cls)}
        elif isinstance(data, Mapping):
            names = {f.name for f in self.fields(cls)}
            for key in data:
                if key not in names:
                    raise ConfigError(f"unknown field (known: {', '.join(sorted(names))})",
                                      field=f"{path}{key}")
            start = self._table_defaults.get(cls)
            values = {f.name: getattr(start, f.name) for f in self.fields(cls)} if start is not None else {}
            values.update(data)
        else:
            raise _Mismatch(f"must be a table, got {_show(data)}", field=path.rstrip(".") or None)
        out: dict[str, object] = {}
        for f in self.fields(cls):
            where = f"{path}{f.name}"
            if f.name not in values:
                if f.default is dataclasses.MISSING:
                    raise ConfigError("is required", field=where)
                continue
            out[f.name] = self.value(cls, f, values[f.name], where)
        try:
            return cls(**out)
        except ConfigError as exc:
            raise exc.at(field=path.rstrip(".") or None) from None
        except (TypeError, ValueError) as exc:  # a class's own check (FaultPlan validates itself)
            raise ConfigError(str(exc), field=path.rstrip(".") or None) from None

    def value(self, owner: type, f: FieldInfo, value: object, path: str) -> object:
        """``value`` checked and converted for field ``f`` of ``owner`` (bounds and checks too)."""
        got = self._convert(f.hint, value, path)
        bound = self._bounds.get((owner, f.name))
        if bound is not None and isinstance(got, (int, float)) and not isinstance(got, bool):
            problem = bound.problem(got)
            if problem is not None:
                raise ConfigError(f"{problem}, got {_show(value)}", field=path)
        check = self._checks.get((owner, f.name))
        if check is not None and got is not None:
            problem = check(got)
            if problem is not None:
                raise ConfigError(problem, field=path)
        return got

    def _convert(self, hint: object, value: object, path: str) -> object:
        args = _union_args(hint)
        if args is not None:
            if value is None:
                if type(None) in args:
                    return None
                raise _Mismatch(f"must be {_kind_name(hint)}, got null", field=path)
            for alt in args:
                if alt is type(None):
                    continue
                try:
                    return self._convert(alt, value, path)
                except _Mismatch:
                    continue
            raise _Mismatch(f"must be {_kind_name(hint)}, got {_show(value)}", field=path)
        if hint is bool:
            if isinstance(value, bool):
                return value
        elif hint is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        elif hint is float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                if not math.isfinite(value):
                    raise ConfigError(f"must be a finite number, got {_show(value)}", field=path)
                return float(value)
        elif hint is str:
            if isinstance(value, str):
                return value
            if isinstance(value, os.PathLike):  # a path given as a Path
                return os.fspath(value)
        elif isinstance(hint, type) and issubclass(hint, enum.Enum):
            if isinstance(value, hint):
                return value
            if isinstance(value, str):
                for member in hint:
                    if member.value == value.strip().lower():
                        return member
        elif _is_dataclass_type(hint):
            assert isinstance(hint, type)
            form = self._text_forms.get(hint)
            if form is not None and isinstance(value, str):
                try:
                    return form[0](value)
                except ValueError as exc:
                    raise ConfigError(str(exc), field=path) from None
            return self.build(hint, value, path + ".")
        elif typing.get_origin(hint) is tuple:
            (item,) = [a for a in typing.get_args(hint) if a is not Ellipsis]
            if isinstance(value, (list, tuple)):
                return tuple(self._item(item, v, f"{path}[{i}]") for i, v in enumerate(value))
        elif hint is PythonObject:
            if value is not None and not isinstance(value, (bool, int, float, str, list, dict)):
                return value
            raise _Mismatch(f"must be a Python object (given from Python only), got {_show(value)}", field=path)
        raise _Mismatch(f"must be {_kind_name(hint)}, got {_show(value)}", field=path)

    def _item(self, item: object, value: object, path: str) -> object:
        if isinstance(item, type) and isinstance(value, item):
            return value
        return self._convert(item, value, path)

    def parse_text(self, owner: type, f: FieldInfo, text: str, path: str) -> object:
        """A flag's (or ``--vary``'s) text as a value of field ``f``: numbers, ``true``/``false``,
        enum values, ``none`` for an optional field; checked as :meth:`value` does."""
        return self.value(owner, f, self._from_text(f.hint, text, path), path)

    def _from_text(self, hint: object, text: str, path: str) -> object:
        t = text.strip()
        args = _union_args(hint)
        if args is not None:
            if type(None) in args and t.lower() in ("none", "null"):
                return None
            for alt in args:
                if alt is type(None) or alt is PythonObject:
                    continue
                try:
                    return self._from_text(alt, t, path)
                except ConfigError:
                    continue
            raise ConfigError(f"must be {_kind_name(hint)}, got {text!r}", field=path)
        try:
            if hint is int:
                return int(t)
            if hint is float:
                return float(t)
        except ValueError:
            raise ConfigError(f"must be {_kind_name(hint)}, got {text!r}", field=path) from None
        if hint is bool:
            low = t.lower()
            if low in ("true", "yes", "1", "on"):
                return True
            if low in ("false", "no", "0", "off"):
                return False
            raise ConfigError(f"must be true or false, got {text!r}", field=path)
        return t  # strings and enum values: checked by value()

    # ---- values out ------------------------------------------------------------------------

    def dump(self, value: object) -> JsonValue:
        """The file form of a dataclass instance: a table of its fields, each by its annotation
        (nested tables, enum values, lists, a Python object's text)."""
        assert dataclasses.is_dataclass(value) and not isinstance(value, type)
        return {f.name: self._dump(f.hint, getattr(value, f.name)) for f in self.fields(type(value))}

    def _dump(self, hint: object, value: object) -> JsonValue:
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, enum.Enum):
            v: JsonValue = value.value
            return v
        form = self._text_forms.get(type(value))
        if form is not None:
            return form[1](value)
        if self.table_type(hint) is not None:
            return self.dump(value)
        if typing.get_origin(hint) is tuple and isinstance(value, tuple):
            (item,) = [a for a in typing.get_args(hint) if a is not Ellipsis]
            return [self._dump(item, v) for v in value]
        return self._text_of(value)


def _show(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float, str)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, Mapping):
        return "a table"
    return f"a {type(value).__name__}"
