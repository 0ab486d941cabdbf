"""The declarative handoff protocol (``spec/handoff.json``) as values: :class:`ProtocolSpec` and
its parts.

The spec file is the single source of truth: the compiled table, the python-statemachine
machines, the checker's invariants, the conformance projection and the diagrams are all derived
from a :class:`ProtocolSpec`.  Reading the file is :mod:`dmocker.handoff._spec_load`'s job; it
checks the structure (names, shapes) in :mod:`dmocker.handoff._spec_parse` and the semantics
that need the state space (reachability, ways out, completeness, transitions that never fire) in
:mod:`dmocker.handoff._table`, all reported through the same :class:`SpecError` naming the file
and the element.  This module depends on none of them, so they all build on it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Hashable, Mapping, Sequence, TypeAlias, TypeVar, Union, cast

from dmocker.handoff._types import HandoffErrorKind, HandoffOrder

JsonValue: TypeAlias = Union[None, bool, int, float, str, Sequence["JsonValue"], Mapping[str, "JsonValue"]]

#: Names of the data guards an implementation must evaluate (documented in spec/README.md).
KNOWN_GUARDS = ("bandwidth_valid", "full_prompt_delay_valid", "scheduled_delay_valid")
#: Data slots a transition may store from the fact it handles.
KNOWN_STORES = ("transfer_timing", "transferable_prompt_tokens")
#: Each invariant kind and its parameters (name -> shape).  Shapes: ``atom`` (one atom),
#: ``atoms`` (a list of atoms), ``atom?`` (an optional atom), ``count`` (an integer >= 0),
#: ``action`` (an action name), ``sides`` (acquiring action -> list of cleaning actions).
#: The monitor (:mod:`dmocker.handoff._monitor`) gives each kind its meaning; spec/README.md
#: documents both.
INVARIANT_PARAMS: Mapping[str, Mapping[str, str]] = {
    "precedes": {"first": "atom", "then": "atom"},
    "precedes_all": {"first": "atoms", "then": "atom"},
    "at_most_between": {"atom": "atom", "count": "count", "reset": "atom?"},
    "once_between": {"atoms": "atoms", "reset": "atom"},
    "after_only": {"after": "atom", "allowed": "atoms"},
    "delay_finite_nonnegative": {"action": "action"},
    "rejection_atomic": {},
    "clean_at_cancel": {"sides": "sides"},
    "responds": {"trigger": "atom", "response": "atom"},
}
KNOWN_INVARIANT_KINDS = tuple(INVARIANT_PARAMS)
#: Atoms that name no action or fact (see spec/README.md, ``invariants``).
#: Where an observable kind happens (``observable.sides``): the event log's ``worker`` field
#: names a prefill worker for ``source`` kinds and a decode worker for ``destination`` kinds.
OBSERVABLE_SIDES = ("source", "destination", "none")
FIXED_ATOMS = ("complete:success", "complete:canceled", "fact_after_success:terminal")


def invariant_shape_problems(kind: str, params: Mapping[str, object]) -> list[str]:
    """What is wrong with an invariant's parameters for its kind (empty: nothing).

    Shapes only; whether the atoms name real actions and facts is checked by the loader, which
    knows the spec's names.  Shared by the loader and by :class:`dmocker.handoff._monitor.Monitor`
    (which may be given hand-built invariants).
    """
    shapes = INVARIANT_PARAMS.get(kind)
    if shapes is None:
        return [f"unknown invariant kind {kind!r} (known: {', '.join(KNOWN_INVARIANT_KINDS)})"]
    problems = [f"unknown parameter {k!r} for kind {kind!r}" for k in params if k not in shapes]
    for name, shape in shapes.items():
        value = params.get(name)
        if value is None:
            if not shape.endswith("?"):
                problems.append(f"missing parameter {name!r}")
        elif shape in ("atom", "atom?", "action") and not isinstance(value, str):
            problems.append(f"parameter {name!r} must be a string, got {value!r}")
        elif shape == "atoms" and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            problems.append(f"parameter {name!r} must be a list of strings, got {value!r}")
        elif shape == "count" and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            problems.append(f"parameter {name!r} must be an integer >= 0, got {value!r}")
        elif shape == "sides" and not (
            isinstance(value, Mapping)
            and all(isinstance(v, list) and all(isinstance(c, str) for c in v) for v in value.values())
        ):
            problems.append(f"parameter {name!r} must map each acquiring action to a list of action names")
    return problems


class SpecError(ValueError):
    """The spec file is malformed; the message names the file and the element."""


@dataclass(frozen=True, slots=True)
class Region:
    """One region of the product state machine: its states (with their docs), the initial one."""

    name: str
    doc: str
    initial: str
    states: tuple[str, ...]
    state_docs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Check:
    """A guard a transition checks before it fires, and the error it raises when the guard fails."""

    guard: str
    error: HandoffErrorKind


@dataclass(frozen=True, slots=True)
class Transition:
    """A transition (``event`` set) or a progression rule (``event`` None).

    ``when`` maps regions to the states they must be in (a missing region matches any state).
    ``result`` is ``"step"``, ``"ignore"`` or ``"reject"``.
    """

    id: str
    event: str | None
    orders: tuple[HandoffOrder, ...]
    when: tuple[tuple[str, tuple[str, ...]], ...]
    result: str
    reject: HandoffErrorKind | None
    set: tuple[tuple[str, str], ...]
    emit: tuple[str, ...]
    checks: tuple[Check, ...]
    store: tuple[str, ...]
    log: str | None
    begin_cleanup: bool
    doc: str
    element: str

    def applies_to(self, order: HandoffOrder) -> bool:
        return order in self.orders


@dataclass(frozen=True, slots=True)
class ActionSpec:
    """An action the coordinator issues: its side, what it acquires or cleans up, the outcomes allowed."""

    name: str
    side: str
    acquires: bool
    cleanup: bool
    pending: tuple[str, str] | None
    allowed: tuple[str, ...]
    clears_journal: bool


#: How a request can end when a terminal fact ends its handoff.
REQUEST_ENDS: tuple[str, ...] = ("failed", "canceled")


@dataclass(frozen=True, slots=True)
class FaultSpec:
    """A fault kind a replay can inject: it delivers its terminal fact to a request."""

    #: the kind's name (``--fault-NAME-rate``, the key in the summary's ``faults_injected``)
    name: str
    #: why the request ended (the key in the summary's ``failures_by_cause``)
    cause: str
    doc: str = ""


@dataclass(frozen=True, slots=True)
class FactSpec:
    """A fact the environment reports: whether it is terminal, and the payload fields it carries."""

    name: str
    terminal: bool
    #: the payload fields the fact carries besides its handoff id (names of the fact class's fields)
    payload: tuple[str, ...] = ()
    #: a terminal fact: how the request ends when it ends the handoff (one of :data:`REQUEST_ENDS`)
    request_ends: str | None = None
    #: the fault that delivers this terminal fact in a replay, if any
    fault: FaultSpec | None = None


@dataclass(frozen=True, slots=True)
class EngineEntry:
    """An engine as the spec names it (``engines``): the handoff order it speaks and, for an
    engine dmocker mocks, the mock's default KV block size in tokens (None: no mock)."""

    name: str
    order: HandoffOrder
    default_block_size: int | None = None


@dataclass(frozen=True, slots=True)
class WorkerKind:
    """An event-log kind a worker writes on its own (its timer fired, a fault hit it), not a
    coordinator step: it moves no coordinator state, may appear only while the coordinator is
    in a state ``when`` admits, and precedes the ``fact`` it delivers (None: it delivers none)."""

    name: str
    side: str
    orders: tuple[HandoffOrder, ...]
    fact: str | None
    #: the move of the spec's ``workers`` section it reports (``workers.moves``), or ""
    move: str
    #: region -> the states it may be in, for the regions the kind constrains
    when: tuple[tuple[str, tuple[str, ...]], ...]
    doc: str
    sources: tuple[str, ...]

    def holds_in(self, states: Mapping[str, str]) -> bool:
        """Whether a coordinator in ``states`` (region -> state) may see this kind now."""
        return all(states[region] in allowed for region, allowed in self.when)

    def describe_when(self) -> str:
        """``when`` as a reader sees it: ``mode in [active] and source in [held]``."""
        return " and ".join(f"{region} in [{', '.join(allowed)}]" for region, allowed in self.when)


@dataclass(frozen=True, slots=True)
class Invariant:
    """A safety property the monitor checks on every step, with its parameters."""

    id: str
    kind: str
    orders: tuple[HandoffOrder, ...]
    doc: str
    params: Mapping[str, JsonValue]


@dataclass(frozen=True, slots=True)
class ProtocolSpec:
    """The whole protocol as read from the spec file (``spec/handoff.json``): the one source every
    machine, table, checker, fuzzer, diagram and replay derives from."""

    path: str
    spec_version: str
    doc: str
    regions: tuple[Region, ...]
    facts: tuple[FactSpec, ...]
    outcome_kinds: tuple[str, ...]
    actions: tuple[ActionSpec, ...]
    errors: tuple[HandoffErrorKind, ...]
    guards: tuple[str, ...]
    transitions: tuple[Transition, ...]
    rules: tuple[Transition, ...]
    completion_by_mode: tuple[tuple[str, str], ...]
    complete_modes: tuple[str, ...]
    final_modes: tuple[str, ...]
    begin_cleanup_by_mode: tuple[tuple[str, str], ...]
    lifecycles: tuple[tuple[HandoffOrder, tuple[str, ...]], ...]
    observable_kinds: tuple[str, ...]
    completed_details: tuple[str, ...]
    invariants: tuple[Invariant, ...]
    #: observable kind -> the side it happens on (one of :data:`OBSERVABLE_SIDES`)
    observable_sides: tuple[tuple[str, str], ...] = ()
    #: the observable kind that carries the completion in ``detail`` (one of ``completed_details``)
    completion_kind: str = "completed"
    #: the engines event logs and engine arguments name, in spec order (``engines``)
    engines: tuple[EngineEntry, ...] = ()
    #: the kinds workers log on their own clocks (``observable.worker_kinds``), in spec order
    worker_kinds: tuple[WorkerKind, ...] = ()
    #: What consumers derive from this spec (compiled tables, projections), see :func:`derived`.
    #: Held by the spec itself, so it lives and dies with it; never part of equality or repr.
    _derived: dict[Hashable, object] = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    @property
    def terminal_facts(self) -> tuple[str, ...]:
        """The facts that end the handoff (``terminal: true``), in spec order."""
        return tuple(f.name for f in self.facts if f.terminal)

    @property
    def fault_facts(self) -> tuple[FactSpec, ...]:
        """The terminal facts a replay's faults deliver (those with a ``fault``), in spec order."""
        return tuple(f for f in self.facts if f.fault is not None)

    @property
    def log_kinds(self) -> tuple[str, ...]:
        """Every kind an event log may carry: the coordinator's, then the workers' own."""
        return self.observable_kinds + tuple(k.name for k in self.worker_kinds)

    def worker_kind(self, name: str) -> WorkerKind | None:
        """The worker kind named ``name``, or None when it is not one."""
        for kind in self.worker_kinds:
            if kind.name == name:
                return kind
        return None

    def kinds_on_side(self, side: str) -> tuple[str, ...]:
        """The observable kinds that happen on ``side`` (``source``, ``destination`` or ``none``)."""
        if side not in OBSERVABLE_SIDES:
            raise KeyError(side)
        return tuple(kind for kind, s in self.observable_sides if s == side)

    @property
    def events(self) -> tuple[str, ...]:
        """Every input the coordinator can receive, in a fixed order."""
        names = ["start", *(f.name for f in self.facts)]
        for action in self.actions:
            if action.pending is not None:
                names.extend(f"{action.name}.{kind}" for kind in self.outcome_kinds)
        return tuple(names)

    def region(self, name: str) -> Region:
        for region in self.regions:
            if region.name == name:
                return region
        raise KeyError(name)

    def action(self, name: str) -> ActionSpec:
        for action in self.actions:
            if action.name == name:
                return action
        raise KeyError(name)

    def success_outcome(self, action: str) -> str:
        """The outcome kind a healthy environment answers ``action`` with: its first allowed one."""
        allowed = self.action(action).allowed
        if not allowed:
            raise KeyError(f"{action} takes no outcome")
        return allowed[0]

    def engine(self, name: str) -> EngineEntry:
        """The entry of engine ``name`` (case and surrounding blanks ignored); a ValueError
        naming the known engines for any other name."""
        key = name.strip().lower() if isinstance(name, str) else None
        for entry in self.engines:
            if entry.name == key:
                return entry
        known = ", ".join(e.name for e in self.engines) or f"none (the spec {self.path} has no 'engines' table)"
        raise ValueError(f"unknown engine {name!r}: expected one of {known}")

    def lifecycle(self, order: HandoffOrder) -> tuple[str, ...]:
        return dict(self.lifecycles)[order]

    def invariants_for(self, order: HandoffOrder) -> tuple[Invariant, ...]:
        return tuple(inv for inv in self.invariants if order in inv.orders)


_T = TypeVar("_T")


def derived(spec: ProtocolSpec, key: Hashable, build: Callable[[], _T]) -> _T:
    """``build()``, computed once per spec object and ``key`` and stored on the spec.

    Why on the spec and not in a module-level dict keyed by ``id(spec)``: an id is reused once
    its object is garbage-collected, so a new spec could be handed an old spec's table.  The
    store is bounded by the keys consumers use (a few per order) and freed with the spec.
    ``key`` must say who derived the value, e.g. ``("table", order)``.
    """
    store = spec._derived
    try:
        return cast(_T, store[key])
    except KeyError:
        value = store[key] = build()
        return value
