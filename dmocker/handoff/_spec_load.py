"""Load and validate the declarative handoff protocol (``spec/handoff.json``).

The loader finds the file (``$DMOCKER_SPEC`` or the package's copy), reads its JSON, builds the
:class:`~dmocker.handoff._spec.ProtocolSpec` (structural checks: :mod:`dmocker.handoff._spec_parse`)
and validates its semantics on the compiled tables (:mod:`dmocker.handoff._table`); every
problem is a :class:`~dmocker.handoff._spec.SpecError` naming the file and the element.  Loaded
specs are cached by path.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from dmocker.handoff._spec import ProtocolSpec, SpecError
from dmocker.handoff._spec_parse import parse_spec
from dmocker.handoff._table import validate_semantics
from dmocker.handoff._types import HandoffOrder, OutcomeKind

if TYPE_CHECKING:
    from dmocker.handoff._workers import WorkersSpec


def success_outcomes(spec: ProtocolSpec | None = None) -> dict[str, OutcomeKind]:
    """Action name -> the outcome a healthy environment answers it with (first allowed in the spec)."""
    the_spec = spec if spec is not None else load_spec()
    return {a.name: OutcomeKind(a.allowed[0]) for a in the_spec.actions if a.allowed}


def default_spec_path() -> Path:
    """Where the protocol lives: ``$DMOCKER_SPEC``, else the package's own copy (see :func:`spec_file`)."""
    override = os.environ.get("DMOCKER_SPEC")
    if override:
        return Path(override)
    return spec_file("handoff.json")


#: The package data folder holding the protocol files (``handoff.json``, ``event-log.schema.json``).
SPEC_PACKAGE_DIR = "_spec"


def spec_file(name: str) -> Path:
    """A protocol file shipped with the package.

    ``dmocker/_spec`` is a symbolic link to the repository's ``spec/`` (the one source), so a
    checkout or an editable install reads ``spec/`` itself, and a wheel carries copies made at
    build time.  Never searched for elsewhere: a ``spec/`` folder that happens to sit above the
    install is not ours.  A package on disk is read from its folder; one inside a zip archive
    through :mod:`importlib.resources` (imported only then: with its readers it would weigh on
    every replay's start-up).
    """
    on_disk = Path(__file__).parent.parent / SPEC_PACKAGE_DIR / name
    if on_disk.is_file():
        return on_disk
    from importlib import resources

    resource = resources.files("dmocker").joinpath(SPEC_PACKAGE_DIR, name)
    if not resource.is_file():
        raise SpecError(
            f"{resource}: the spec file {name!r} is missing from the installed package (a broken install?); "
            "reinstall dmocker or set DMOCKER_SPEC"
        )
    if isinstance(resource, Path):
        return resource
    # a package inside a zip archive: extract it once for the life of the process
    return Path(_EXTRACTED.enter_context(resources.as_file(resource)))


_EXTRACTED = contextlib.ExitStack()
atexit.register(_EXTRACTED.close)


#: Specs loaded by path, most recently used last; bounded (a long-lived process that loads many
#: spec files keeps only the last few, each with what was derived from it).
_CACHE: dict[str, ProtocolSpec] = {}
_CACHE_SIZE = 8


def load_spec(path: str | os.PathLike[str] | None = None) -> ProtocolSpec:
    """Read, validate and cache the protocol spec (the default one unless ``path`` is given)."""
    resolved = Path(path) if path is not None else default_spec_path()
    key = str(resolved.resolve()) if resolved.exists() else str(resolved)
    cached = _CACHE.pop(key, None)
    if cached is not None:
        _CACHE[key] = cached
        return cached
    spec = parse_spec(_read_json(resolved), str(resolved))
    # Semantic validation (reachability etc.) needs the compiled tables; it raises SpecError.
    validate_semantics(spec)
    _CACHE[key] = spec
    while len(_CACHE) > _CACHE_SIZE:
        del _CACHE[next(iter(_CACHE))]
    return spec


def order_for_engine(name: str) -> HandoffOrder:
    """The handoff order engine ``name`` speaks, from the spec's ``engines`` table (case and
    surrounding blanks ignored); unknown engines are a ValueError."""
    return load_spec().engine(name).order


def _read_json(path: Path) -> object:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"{path}: line {exc.lineno} column {exc.colno}: invalid JSON: {exc.msg}") from None


_WORKERS_CACHE: dict[str, WorkersSpec] = {}


def has_workers(spec: ProtocolSpec) -> bool:
    """Whether the spec file has a ``workers`` section (other implementations may leave it out)."""
    top = _read_json(Path(spec.path))
    return isinstance(top, dict) and "workers" in top


def load_workers(path: str | os.PathLike[str] | None = None) -> WorkersSpec:
    """The spec's ``workers`` section (the workers' own clocks), read and checked against the
    protocol it sits in (facts, actions and orders it names must be the protocol's)."""
    # the workers' machines are read only by the clock checker, the fuzzer and the diagrams: a
    # replay or a conformance check starts without them
    from dmocker.handoff._workers import parse_workers

    spec = load_spec(path)
    cached = _WORKERS_CACHE.get(spec.path)
    if cached is not None:
        return cached
    top = _read_json(Path(spec.path))
    raw = top.get("workers") if isinstance(top, dict) else None
    if raw is None:
        raise SpecError(f"{spec.path}: no 'workers' section")
    workers = parse_workers(
        raw, spec.path, frozenset(f.name for f in spec.facts), frozenset(a.name for a in spec.actions),
        {o.value: o for o in HandoffOrder},
    )
    _WORKERS_CACHE[spec.path] = workers
    return workers
