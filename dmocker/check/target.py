"""The coordinator under check: how to load it, build it, copy it and identify its states.

The checker treats the coordinator as a black box with the public API of
:class:`dmocker.handoff.HandoffCoordinator`.  Two things it needs beyond that API, and how it
gets them:

State identity.  If the instance has a ``snapshot()`` method, its (hashable) result is the
state's identity: two coordinators with equal snapshots must behave identically on every future
input.  Otherwise the checker computes a *structural key*: a canonical tuple of every attribute
reachable from the instance (dicts and instance attributes in insertion order, which Python
guarantees and code may observe; sets sorted by ``repr``, since their iteration order follows
the per-process string hash and must not make the state count vary between runs; floats by
``repr`` so NaN equals itself, enums by name, objects by class and attributes).  Attributes that
are the very same object in two freshly built instances (class-level caches, compiled tables)
are treated as shared constants and left out of the key.

Copying.  Exploring a state means feeding it each possible input, so the state is copied before
inputs that change it.  A class that defines ``__deepcopy__`` is copied with
:func:`copy.deepcopy`.  Otherwise a structural clone copies containers and plain objects
attribute by attribute (slots, the attributes a mypyc-compiled class lists in
``__mypyc_attrs__``, then ``__dict__``), shares immutable values (numbers, strings, enums, tuples of those,
frozen dataclasses) and the shared constants above, and falls back to ``copy.deepcopy`` for
anything else.  A copy keeps every order a program can observe: instance attributes and dict
entries in insertion order, lists as they are, sets copied with ``set.copy`` (CPython copies
the hash table as it is, so the copy iterates in the same order; the one exception, a set
that had elements removed and is laid out afresh, is an order Python itself never promises).
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import importlib
import inspect
import os
import sys
from dataclasses import dataclass
from typing import Callable, Hashable, Protocol, cast, runtime_checkable

from dmocker.handoff import Fact, HandoffCoordinator, HandoffOrder, Outcome

from dmocker.check.values import InitialConfig

REQUIRED_METHODS = ("start", "on_fact", "on_action_outcome")
REQUIRED_PROPERTIES = ("is_complete", "completion")
DEFAULT_TARGET = "dmocker.handoff:HandoffCoordinator"


class TargetError(ValueError):
    """The coordinator cannot be checked (bad import path, wrong API); the CLI exits 2."""


@runtime_checkable
class CoordinatorLike(Protocol):
    """The public API the checker drives (structural; any class with these members)."""

    fallback_transfer_delay_ms: float

    def start(self) -> object: ...

    def on_fact(self, fact: Fact) -> object: ...

    def on_action_outcome(self, action_id: int, outcome: Outcome) -> object: ...

    @property
    def is_complete(self) -> object: ...

    @property
    def completion(self) -> object: ...


#: Anything called as ``factory(handoff_id, order, fallback_transfer_delay_ms=...)``; validated at load.
Factory = Callable[..., object]

_ATOMIC: frozenset[type] = frozenset({int, float, str, bytes, bool, type(None), complex, range})


_SLOTS: dict[type, tuple[str, ...]] = {}


def _slot_names(cls: type) -> tuple[str, ...]:
    found = _SLOTS.get(cls)
    if found is not None:
        return found
    names: list[str] = []
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        if isinstance(slots, str):
            slots = (slots,)
        # A class compiled by mypyc keeps its attributes in a C struct, listed here (it has no
        # __slots__ and no __dict__ of its own): dmocker's coordinator is one.
        slots = (*slots, *klass.__dict__.get("__mypyc_attrs__", ()))
        for s in slots:
            if s not in ("__dict__", "__weakref__") and s not in names:
                names.append(s)
    result = tuple(names)
    _SLOTS[cls] = result
    return result


_FIELDS: dict[type, tuple[str, ...] | None] = {}


def _dataclass_fields(cls: type) -> tuple[str, ...] | None:
    """Field names of a dataclass type (cached), None for other types."""
    try:
        return _FIELDS[cls]
    except KeyError:
        pass
    names = tuple(f.name for f in dataclasses.fields(cls)) if dataclasses.is_dataclass(cls) else None
    _FIELDS[cls] = names
    return names


def _is_frozen_dataclass(value: object) -> bool:
    params = getattr(type(value), "__dataclass_params__", None)
    return params is not None and bool(getattr(params, "frozen", False))


_MISSING = object()


def _attributes(obj: object) -> list[tuple[str, object]]:
    """Slot (or mypyc struct) and ``__dict__`` attributes, slots first, dict entries in
    insertion order."""
    get = object.__getattribute__
    out = [(name, v) for name in _slot_names(type(obj)) if (v := getattr(obj, name, _MISSING)) is not _MISSING]
    try:
        d = get(obj, "__dict__")
    except AttributeError:
        return out
    if isinstance(d, dict) and d:
        out.extend(d.items())
    return out


class _Cloner:
    """Structural clone and structural key, skipping the shared constants."""

    def __init__(self, shared: frozenset[int]) -> None:
        self._shared = shared

    def clone(self, value: object, memo: dict[int, object]) -> object:
        t = type(value)
        if t in _ATOMIC or isinstance(value, enum.Enum):
            return value
        vid = id(value)
        if vid in self._shared:
            return value
        found = memo.get(vid)
        if found is not None:
            return found
        if t is dict:
            assert isinstance(value, dict)
            new_d: dict[object, object] = {}
            memo[vid] = new_d
            for k, v in value.items():
                new_d[k] = self.clone(v, memo)
            return new_d
        if t is list:
            assert isinstance(value, list)
            new_l: list[object] = []
            memo[vid] = new_l
            new_l.extend(self.clone(v, memo) for v in value)
            return new_l
        if t is tuple:
            assert isinstance(value, tuple)
            items = tuple(self.clone(v, memo) for v in value)
            return value if all(a is b for a, b in zip(items, value)) else items
        if t is set:
            assert isinstance(value, set)
            return value.copy()
        if t is frozenset or _is_frozen_dataclass(value):
            return value
        if hasattr(t, "__deepcopy__") or t.__module__ == "builtins":
            return copy.deepcopy(value, memo)
        new = t.__new__(t)
        memo[vid] = new
        for name, v in _attributes(value):
            object.__setattr__(new, name, self.clone(v, memo))
        return new

    def key(self, value: object) -> Hashable:
        t = type(value)
        if t is float:
            return ("f", repr(value))
        if t in _ATOMIC:
            return value
        if isinstance(value, enum.Enum):
            return ("e", type(value).__qualname__, value.name)
        if id(value) in self._shared:
            return ("shared",)
        if t is dict:
            assert isinstance(value, dict)
            return ("d", tuple((self.key(k), self.key(v)) for k, v in value.items()))
        if t is list or t is tuple:
            assert isinstance(value, (list, tuple))
            return (t.__name__, tuple(self.key(v) for v in value))
        if t is set or t is frozenset:
            assert isinstance(value, (set, frozenset))
            return ("s", tuple(sorted((self.key(v) for v in value), key=repr)))
        names = _dataclass_fields(t)
        if names is not None:
            return (t.__qualname__, tuple((n, self.key(getattr(value, n))) for n in names))
        return (t.__qualname__, tuple((n, self.key(v)) for n, v in _attributes(value)))


@dataclass(frozen=True)
class Target:
    """A loadable coordinator class plus the strategies used to copy and identify its states."""

    name: str
    factory: Factory
    snapshot_mode: str
    clone_mode: str
    cloner: _Cloner
    #: False when ``fallback_transfer_delay_ms`` is only a constructor keyword (all the public API
    #: promises): roots that assign it after construction are then skipped (see :func:`usable_roots`).
    assignable_fallback: bool = True

    def root_skip_reason(self, config: InitialConfig) -> str | None:
        """Why ``config`` cannot be used with this coordinator (None: it can)."""
        if config.after_construction is not None and not self.assignable_fallback:
            return (
                f"needs fallback_transfer_delay_ms = {config.after_construction!r} assigned after construction, "
                "and the coordinator has no assignable fallback_transfer_delay_ms attribute "
                "(the public API only promises the constructor keyword)"
            )
        return None

    def make(self, handoff_id: str, order: HandoffOrder, config: InitialConfig) -> CoordinatorLike:
        obj = cast(CoordinatorLike, self.factory(handoff_id, order, fallback_transfer_delay_ms=config.fallback_transfer_delay_ms))
        if config.after_construction is not None:
            obj.fallback_transfer_delay_ms = config.after_construction
        return obj

    def snapshot_function(self) -> Callable[[CoordinatorLike], Hashable]:
        """The fastest callable computing :meth:`snapshot` (hot loop of the search)."""
        if self.snapshot_mode == "snapshot()":
            return lambda obj: obj.snapshot()  # type: ignore[attr-defined]
        return self.cloner.key

    def snapshot(self, obj: CoordinatorLike) -> Hashable:
        if self.snapshot_mode == "snapshot()":
            result: Hashable = obj.snapshot()  # type: ignore[attr-defined]
            return result
        return self.cloner.key(obj)

    def clone(self, obj: CoordinatorLike) -> CoordinatorLike:
        if self.clone_mode == "deepcopy":
            return copy.deepcopy(obj)
        cloned = self.cloner.clone(obj, {})
        assert isinstance(cloned, type(obj))
        return cloned


def _find_shared(a: object, b: object, out: set[int], depth: int) -> None:
    """Objects reachable by the same attribute path that are identical in two fresh instances."""
    for (na, va), (nb, vb) in zip(_attributes(a), _attributes(b)):
        if na != nb or type(va) in _ATOMIC or isinstance(va, enum.Enum):
            continue
        if va is vb:
            out.add(id(va))
        elif (
            depth > 0
            and type(va) is type(vb)
            and type(va).__module__ != "builtins"
            and not _is_frozen_dataclass(va)
        ):
            _find_shared(va, vb, out, depth - 1)


def target_from_factory(factory: Factory, name: str | None = None) -> Target:
    """Validate ``factory`` (usually a class) against the coordinator API and wrap it.

    Raises :class:`TargetError` naming the first missing method or property, or the exception
    construction raised.
    """
    label = name or f"{getattr(factory, '__module__', '?')}:{getattr(factory, '__qualname__', repr(factory))}"
    if not callable(factory):
        raise TargetError(f"{label}: not a class or callable")
    if inspect.isclass(factory):
        for method in REQUIRED_METHODS:
            if not callable(getattr(factory, method, None)):
                raise TargetError(f"{label}: missing method {method}() of the coordinator API")
    try:
        a = factory("h", HandoffOrder.SOURCE_FIRST, fallback_transfer_delay_ms=0.0)
        b = factory("h", HandoffOrder.SOURCE_FIRST, fallback_transfer_delay_ms=0.0)
    except Exception as exc:  # noqa: BLE001 - any failure is a bad target, reported verbatim
        raise TargetError(
            f"{label}: cannot construct it as {label}(handoff_id, order, fallback_transfer_delay_ms=0.0): "
            f"{type(exc).__name__}: {exc}"
        ) from None
    for method in REQUIRED_METHODS:
        if not callable(getattr(a, method, None)):
            raise TargetError(f"{label}: missing method {method}() of the coordinator API")
    for prop in REQUIRED_PROPERTIES:
        try:
            getattr(a, prop)
        except AttributeError:
            raise TargetError(f"{label}: missing property {prop} of the coordinator API") from None
    try:
        setattr(a, "fallback_transfer_delay_ms", getattr(a, "fallback_transfer_delay_ms"))
        assignable_fallback = True
    except AttributeError:  # constructor keyword only: the roots that assign later are skipped
        assignable_fallback = False
    shared: set[int] = set()
    _find_shared(a, b, shared, depth=3)
    for order in HandoffOrder:  # per-order caches (a compiled table per order) are shared too
        try:
            c = factory("h", order, fallback_transfer_delay_ms=0.0)
            d = factory("h", order, fallback_transfer_delay_ms=0.0)
        except Exception as exc:  # noqa: BLE001
            raise TargetError(f"{label}: cannot construct it for order {order.value}: {type(exc).__name__}: {exc}") from None
        _find_shared(c, d, shared, depth=3)
    cloner = _Cloner(frozenset(shared))
    snap = getattr(a, "snapshot", None)
    snapshot_mode = "structural key"
    if callable(snap):
        try:
            hash(snap())
        except Exception as exc:  # noqa: BLE001
            raise TargetError(f"{label}: snapshot() must return a hashable value: {type(exc).__name__}: {exc}") from None
        snapshot_mode = "snapshot()"
    clone_mode = "deepcopy" if hasattr(type(a), "__deepcopy__") else "structural clone"
    return Target(label, factory, snapshot_mode, clone_mode, cloner, assignable_fallback)


def load_target(text: str | None) -> Target:
    """Resolve ``package.module:Class`` (default: our HandoffCoordinator).

    The current directory is put on ``sys.path`` first, so ``dmocker check --coordinator
    mypkg.coord:C`` works from the project root as ``python -m`` would.
    """
    if text is None or text == DEFAULT_TARGET:
        return target_from_factory(HandoffCoordinator, DEFAULT_TARGET)
    module_name, sep, attr = text.partition(":")
    if not sep or not module_name or not attr:
        raise TargetError(f"--coordinator {text!r}: expected package.module:Class")
    # Like `python -m`, make the current directory importable (the console script does not).
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - import errors of user code come in every shape
        raise TargetError(f"--coordinator {text!r}: cannot import module {module_name!r}: {type(exc).__name__}: {exc}") from None
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise TargetError(f"--coordinator {text!r}: module {module_name!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise TargetError(f"--coordinator {text!r}: {attr!r} is not a class")
    return target_from_factory(obj, text)
