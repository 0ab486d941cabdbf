"""Mutation proof: run the checker on a catalogue of deliberately broken coordinators.

A catalogue is a Python package whose ``MUTANTS`` attribute is a sequence of :class:`Mutant`:
by default the one shipped with dmocker (:mod:`dmocker.check.mutant_catalogue`, so that
``dmocker check --mutants`` works from any folder and in any install), or any folder given.  Each mutant is one plausible bug; the
checker *kills* it when some property fails in at least one order.  The kill table records,
per mutant and order, the first failing property and its counterexample length.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from dmocker.handoff import HandoffOrder, ProtocolSpec, load_spec

from dmocker.check.core import check
from dmocker.check.explore import DEFAULT_STEP_BOUND
from dmocker.check.target import Factory, TargetError, target_from_factory
from dmocker.check.values import DEFAULT_VALUES, ValueSet

#: The catalogue shipped in the package (imported as ``dmocker.check.mutant_catalogue``).
DEFAULT_CATALOGUE = Path(__file__).resolve().parent / "mutant_catalogue"
_DEFAULT_MODULE = "dmocker.check.mutant_catalogue"
#: Mutants are small; a bug that needs more states than this to show is a weak mutant.
MUTANT_MAX_STATES = 50_000


@dataclass(frozen=True, slots=True)
class Mutant:
    """One broken coordinator: ``expected`` is the property that should catch it."""

    name: str
    factory: Factory
    description: str
    expected: str
    historical: bool = False


@dataclass(frozen=True, slots=True)
class Kill:
    order: HandoffOrder
    property: str | None  # None: survived in this order
    length: int | None
    states: int
    seconds: float


@dataclass(frozen=True, slots=True)
class MutantResult:
    mutant: Mutant
    kills: tuple[Kill, ...]

    @property
    def killed(self) -> bool:
        return any(k.property is not None for k in self.kills)

    @property
    def properties(self) -> tuple[str, ...]:
        return tuple(k.property for k in self.kills if k.property is not None)


class CatalogueError(ValueError):
    """The catalogue directory cannot be loaded (CLI exit 2)."""


def load_catalogue(directory: str | Path = DEFAULT_CATALOGUE) -> tuple[Mutant, ...]:
    """Import ``directory/__init__.py`` as a package and return its ``MUTANTS``."""
    d = Path(directory)
    init = d / "__init__.py"
    if not init.is_file():
        raise CatalogueError(f"{d}: not a mutant catalogue (no __init__.py with MUTANTS)")
    if d.resolve() == DEFAULT_CATALOGUE:
        name = _DEFAULT_MODULE  # imported by its own name: one copy of its classes, whoever asks
    else:
        name = "_dmocker_mutants_" + re.sub(r"\W", "_", str(d.resolve()))
    module = sys.modules.get(name)
    if module is None and name == _DEFAULT_MODULE:
        module = importlib.import_module(name)
    elif module is None:
        spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(d)])
        if spec is None or spec.loader is None:
            raise CatalogueError(f"{init}: cannot be imported")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # noqa: BLE001 - report whatever the catalogue raised
            del sys.modules[name]
            raise CatalogueError(f"{init}: import failed: {type(exc).__name__}: {exc}") from None
    mutants = getattr(module, "MUTANTS", None)
    if not isinstance(mutants, (list, tuple)) or not all(isinstance(m, Mutant) for m in mutants):
        raise CatalogueError(f"{init}: MUTANTS must be a list of dmocker.check.mutants.Mutant")
    return tuple(mutants)


def run_mutant(
    mutant: Mutant,
    orders: Sequence[HandoffOrder] = (HandoffOrder.SOURCE_FIRST, HandoffOrder.DESTINATION_FIRST),
    *,
    spec: ProtocolSpec | None = None,
    values: ValueSet = DEFAULT_VALUES,
    max_states: int = MUTANT_MAX_STATES,
    step_bound: int = DEFAULT_STEP_BOUND,
) -> MutantResult:
    try:
        target = target_from_factory(mutant.factory, f"mutant:{mutant.name}")
    except TargetError as exc:
        raise CatalogueError(f"mutant {mutant.name}: {exc}") from None
    kills: list[Kill] = []
    for order in orders:
        t0 = time.perf_counter()
        report = check(target, (order,), spec=spec or load_spec(), values=values,
                       max_states=max_states, step_bound=step_bound)
        o = report.orders[0]
        first = report.first_failure()
        if first is None:
            kills.append(Kill(order, None, None, o.states, time.perf_counter() - t0))
        else:
            cex = first[1].counterexample
            kills.append(Kill(order, first[1].name, None if cex is None else cex.length, o.states,
                              time.perf_counter() - t0))
    return MutantResult(mutant, tuple(kills))


def kill_table(results: Sequence[MutantResult]) -> str:
    """The table ``dmocker check --mutants`` prints, with the kill rate on the last line."""
    orders = [k.order for k in results[0].kills] if results else []
    name_w = max([len(r.mutant.name) for r in results] + [6])
    head = f"{'mutant':<{name_w}}  hist  " + "  ".join(f"{o.value:<38}" for o in orders)
    lines = [head.rstrip(), "-" * len(head.rstrip())]
    for r in results:
        cells = []
        for k in r.kills:
            cell = "survived" if k.property is None else f"{k.property} ({k.length} step{'' if k.length == 1 else 's'})"
            cells.append(f"{cell:<38}")
        lines.append((f"{r.mutant.name:<{name_w}}  {'yes ' if r.mutant.historical else '    '}  " + "  ".join(cells)).rstrip())
    killed = sum(r.killed for r in results)
    total = len(results)
    hist = [r for r in results if r.mutant.historical]
    rate = 100.0 * killed / total if total else 0.0
    lines.append("")
    lines.append(
        f"killed {killed}/{total} mutants ({rate:.0f}%); historical reference bugs killed "
        f"{sum(r.killed for r in hist)}/{len(hist)}"
    )
    return "\n".join(lines) + "\n"
