"""Load and validate the declarative handoff protocol (``spec/handoff.json``).

The spec file is the single source of truth: the compiled table, the python-statemachine
machines, the checker's invariants, the conformance projection and the diagrams are all derived
from the :class:`ProtocolSpec` this module returns.  Validation here is structural (names,
shapes); the semantic checks that need the state space (reachability, ways out, completeness,
transitions that never fire) run in :mod:`dmocker.handoff._table` and are reported through the
same :class:`SpecError` naming the file and the element.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Hashable, Mapping, Sequence, TypeAlias, TypeVar, Union, cast

from dmocker.handoff._registry import class_problems
from dmocker.handoff._types import Completion, HandoffErrorKind, HandoffOrder, OutcomeKind

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


@dataclass(frozen=True, slots=True)
class FactSpec:
    """A fact the environment reports: whether it is terminal, and the payload fields it carries."""

    name: str
    terminal: bool
    #: the payload fields the fact carries besides its handoff id (names of the fact class's fields)
    payload: tuple[str, ...] = ()


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
    #: What consumers derive from this spec (compiled tables, projections), see :func:`derived`.
    #: Held by the spec itself, so it lives and dies with it; never part of equality or repr.
    _derived: dict[Hashable, object] = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    @property
    def terminal_facts(self) -> tuple[str, ...]:
        """The facts that end the handoff (``terminal: true``), in spec order."""
        return tuple(f.name for f in self.facts if f.terminal)

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
    through :mod:`importlib.resources` (imported only then: with its readers it is ~25 M
    instructions of start-up that every replay would pay).
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
    from dmocker.handoff._table import validate_semantics

    validate_semantics(spec)
    _CACHE[key] = spec
    while len(_CACHE) > _CACHE_SIZE:
        del _CACHE[next(iter(_CACHE))]
    return spec


def _read_json(path: Path) -> object:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecError(f"{path}: line {exc.lineno} column {exc.colno}: invalid JSON: {exc.msg}") from None


class _Ctx:
    """Error helper: every message names the file and the element."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, element: str, message: str) -> SpecError:
        return SpecError(f"{self.path}: {element}: {message}")

    def obj(self, value: object, element: str) -> dict[str, object]:
        if not isinstance(value, dict):
            raise self.fail(element, f"expected an object, got {type(value).__name__}")
        return value

    def get(self, obj: dict[str, object], key: str, element: str) -> object:
        if key not in obj:
            raise self.fail(element, f"missing field {key!r}")
        return obj[key]

    def string(self, value: object, element: str) -> str:
        if not isinstance(value, str):
            raise self.fail(element, f"expected a string, got {type(value).__name__}")
        return value

    def strings(self, value: object, element: str) -> tuple[str, ...]:
        if isinstance(value, str):
            return (value,)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(element, "expected a string or a list of strings")
        return tuple(value)

    def boolean(self, value: object, element: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(element, f"expected true or false, got {value!r}")
        return value


def parse_spec(raw: object, path: str = "<spec>") -> ProtocolSpec:
    """Turn the JSON document into a typed spec, checking every name it uses."""
    ctx = _Ctx(path)
    top = ctx.obj(raw, "document")
    version = ctx.string(ctx.get(top, "spec_version", "document"), "spec_version")

    orders_raw = ctx.obj(ctx.get(top, "orders", "document"), "orders")
    order_names = {o.value for o in HandoffOrder}
    for name in orders_raw:
        if name not in order_names:
            raise ctx.fail(f"orders.{name}", f"unknown order (expected {sorted(order_names)})")

    regions: list[Region] = []
    for rname, rraw in ctx.obj(ctx.get(top, "regions", "document"), "regions").items():
        el = f"regions.{rname}"
        robj = ctx.obj(rraw, el)
        states_obj = ctx.obj(ctx.get(robj, "states", el), f"{el}.states")
        if not states_obj:
            raise ctx.fail(f"{el}.states", "a region needs at least one state")
        initial = ctx.string(ctx.get(robj, "initial", el), f"{el}.initial")
        if initial not in states_obj:
            raise ctx.fail(f"{el}.initial", f"unknown state {initial!r}")
        regions.append(
            Region(
                name=rname,
                doc=str(robj.get("doc", "")),
                initial=initial,
                states=tuple(states_obj),
                state_docs=tuple(str(v) for v in states_obj.values()),
            )
        )
    region_states = {r.name: r.states for r in regions}
    if "mode" not in region_states:
        raise ctx.fail("regions", "a region named 'mode' is required")

    def check_state(region: str, state: str, element: str) -> None:
        if region not in region_states:
            raise ctx.fail(element, f"unknown region {region!r}")
        if state not in region_states[region]:
            raise ctx.fail(element, f"unknown state {state!r} in region {region!r}")

    facts: list[FactSpec] = []
    for fname, fraw in ctx.obj(ctx.get(top, "facts", "document"), "facts").items():
        fobj = ctx.obj(fraw, f"facts.{fname}")
        payload = tuple(ctx.obj(fobj.get("payload", {}), f"facts.{fname}.payload"))
        facts.append(FactSpec(fname, ctx.boolean(fobj.get("terminal", False), f"facts.{fname}.terminal"), payload))
    outcome_kinds = ctx.strings(ctx.get(top, "outcome_kinds", "document"), "outcome_kinds")
    if "Failed" not in outcome_kinds:
        raise ctx.fail("outcome_kinds", "the 'Failed' outcome kind is required")

    error_names = {k.name: k for k in HandoffErrorKind}
    errors_obj = ctx.obj(ctx.get(top, "errors", "document"), "errors")
    errors: list[HandoffErrorKind] = []
    for ename in errors_obj:
        if ename not in error_names:
            raise ctx.fail(f"errors.{ename}", f"unknown error kind (known: {sorted(error_names)})")
        errors.append(error_names[ename])

    def error_kind(value: object, element: str) -> HandoffErrorKind:
        name = ctx.string(value, element)
        if name not in errors_obj:
            raise ctx.fail(element, f"unknown error {name!r} (declare it under 'errors')")
        return error_names[name]

    guards_obj = ctx.obj(ctx.get(top, "guards", "document"), "guards")
    for gname in guards_obj:
        if gname not in KNOWN_GUARDS:
            raise ctx.fail(f"guards.{gname}", f"unknown guard (implementations know {list(KNOWN_GUARDS)})")

    actions: list[ActionSpec] = []
    for aname, araw in ctx.obj(ctx.get(top, "actions", "document"), "actions").items():
        el = f"actions.{aname}"
        aobj = ctx.obj(araw, el)
        pending_raw = aobj.get("pending")
        pending: tuple[str, str] | None = None
        if pending_raw is not None:
            pobj = ctx.obj(pending_raw, f"{el}.pending")
            if len(pobj) != 1:
                raise ctx.fail(f"{el}.pending", "name exactly one region and state")
            ((pregion, pstate),) = pobj.items()
            check_state(pregion, ctx.string(pstate, f"{el}.pending"), f"{el}.pending")
            pending = (pregion, str(pstate))
        allowed = ctx.strings(aobj.get("allowed", []), f"{el}.allowed")
        for kind in allowed:
            if kind not in outcome_kinds:
                raise ctx.fail(f"{el}.allowed", f"unknown outcome kind {kind!r}")
        actions.append(
            ActionSpec(
                name=aname,
                side=ctx.string(aobj.get("side", ""), f"{el}.side"),
                acquires=ctx.boolean(aobj.get("acquires", False), f"{el}.acquires"),
                cleanup=ctx.boolean(aobj.get("cleanup", False), f"{el}.cleanup"),
                pending=pending,
                allowed=allowed,
                clears_journal=ctx.boolean(aobj.get("clears_journal", False), f"{el}.clears_journal"),
            )
        )
    action_names = {a.name for a in actions}
    fact_names = {f.name for f in facts}
    problems = class_problems([a.name for a in actions], [f.name for f in facts])
    if problems:
        raise ctx.fail("actions/facts", "; ".join(problems))

    observable = ctx.obj(ctx.get(top, "observable", "document"), "observable")
    kinds = ctx.strings(ctx.get(observable, "kinds", "observable"), "observable.kinds")
    details = ctx.strings(observable.get("completed_details", []), "observable.completed_details")
    sides_obj = ctx.obj(ctx.get(observable, "sides", "observable"), "observable.sides")
    for kind, side in sides_obj.items():
        if kind not in kinds:
            raise ctx.fail(f"observable.sides.{kind}", "unknown observable kind")
        if side not in OBSERVABLE_SIDES:
            raise ctx.fail(f"observable.sides.{kind}", f"unknown side {side!r} (one of {list(OBSERVABLE_SIDES)})")
    missing_sides = [kind for kind in kinds if kind not in sides_obj]
    if missing_sides:
        raise ctx.fail("observable.sides", f"no side for {missing_sides}")
    sides = tuple((kind, str(sides_obj[kind])) for kind in kinds)
    completion_kind = ctx.string(ctx.get(observable, "completion_kind", "observable"), "observable.completion_kind")
    if completion_kind not in kinds:
        raise ctx.fail("observable.completion_kind", f"unknown observable kind {completion_kind!r}")
    for detail in details:
        if detail not in {c.value for c in Completion}:
            raise ctx.fail("observable.completed_details", f"unknown completion {detail!r}")

    def parse_transition(raw_t: object, element: str, is_rule: bool, events: set[str]) -> Transition:
        tobj = ctx.obj(raw_t, element)
        tid = ctx.string(ctx.get(tobj, "id", element), f"{element}.id")
        element = f"{element} (id {tid!r})"
        event: str | None = None
        if not is_rule:
            event = ctx.string(ctx.get(tobj, "event", element), f"{element}.event")
            if event not in events:
                raise ctx.fail(element, f"unknown event {event!r}")
        elif "event" in tobj:
            raise ctx.fail(element, "rules fire on their own and take no 'event'")
        orders_list = ctx.strings(tobj.get("orders", list(orders_raw)), f"{element}.orders")
        orders: list[HandoffOrder] = []
        for name in orders_list:
            if name not in orders_raw:
                raise ctx.fail(f"{element}.orders", f"unknown order {name!r}")
            orders.append(HandoffOrder(name))
        when: list[tuple[str, tuple[str, ...]]] = []
        for region, states in ctx.obj(tobj.get("when", {}), f"{element}.when").items():
            values = ctx.strings(states, f"{element}.when.{region}")
            for state in values:
                check_state(region, state, f"{element}.when.{region}")
            when.append((region, values))
        modes_set = [("ignore" in tobj), ("reject" in tobj)]
        if modes_set[0] and modes_set[1]:
            raise ctx.fail(element, "a transition cannot both ignore and reject")
        result = "ignore" if modes_set[0] else "reject" if modes_set[1] else "step"
        if is_rule and result != "step":
            raise ctx.fail(element, "a rule must change the state")
        reject = error_kind(tobj["reject"], f"{element}.reject") if result == "reject" else None
        sets: list[tuple[str, str]] = []
        for region, raw_state in ctx.obj(tobj.get("set", {}), f"{element}.set").items():
            target = ctx.string(raw_state, f"{element}.set.{region}")
            check_state(region, target, f"{element}.set.{region}")
            sets.append((region, target))
        emit = ctx.strings(tobj.get("emit", []), f"{element}.emit")
        for name in emit:
            if name not in action_names:
                raise ctx.fail(f"{element}.emit", f"unknown action {name!r}")
        checks: list[Check] = []
        checks_raw = tobj.get("checks", [])
        if not isinstance(checks_raw, list):
            raise ctx.fail(f"{element}.checks", "expected a list")
        for i, craw in enumerate(checks_raw):
            cel = f"{element}.checks[{i}]"
            cobj = ctx.obj(craw, cel)
            guard = ctx.string(ctx.get(cobj, "guard", cel), f"{cel}.guard")
            if guard not in guards_obj:
                raise ctx.fail(cel, f"unknown guard {guard!r}")
            checks.append(Check(guard, error_kind(ctx.get(cobj, "else", cel), f"{cel}.else")))
        store = ctx.strings(tobj.get("store", []), f"{element}.store")
        for name in store:
            if name not in KNOWN_STORES:
                raise ctx.fail(f"{element}.store", f"unknown data slot {name!r}")
        log = tobj.get("log")
        if log is not None:
            log = ctx.string(log, f"{element}.log")
            if log not in kinds:
                raise ctx.fail(f"{element}.log", f"unknown observable kind {log!r}")
        if result != "step" and (sets or emit or checks or store or log):
            raise ctx.fail(element, f"an {result} transition cannot set, emit, check, store or log")
        if result == "step" and not sets:
            raise ctx.fail(element, "a step must set at least one region")
        return Transition(
            id=tid,
            event=event,
            orders=tuple(orders),
            when=tuple(when),
            result=result,
            reject=reject,
            set=tuple(sets),
            emit=emit,
            checks=tuple(checks),
            store=store,
            log=log,
            begin_cleanup=ctx.boolean(tobj.get("begin_cleanup", False), f"{element}.begin_cleanup"),
            doc=str(tobj.get("doc", "")),
            element=element,
        )

    provisional_events = {"start", *fact_names}
    for action in actions:
        if action.pending is not None:
            provisional_events.update(f"{action.name}.{kind}" for kind in outcome_kinds)
    transitions_raw = ctx.get(top, "transitions", "document")
    rules_raw = ctx.get(top, "rules", "document")
    if not isinstance(transitions_raw, list) or not isinstance(rules_raw, list):
        raise ctx.fail("document", "'transitions' and 'rules' must be lists")
    transitions = tuple(
        parse_transition(t, f"transitions[{i}]", False, provisional_events)
        for i, t in enumerate(transitions_raw)
    )
    rules = tuple(parse_transition(t, f"rules[{i}]", True, provisional_events) for i, t in enumerate(rules_raw))
    seen_ids: dict[str, str] = {}
    for t in (*transitions, *rules):
        if t.id in seen_ids:
            raise ctx.fail(t.element, f"duplicate id (also {seen_ids[t.id]})")
        seen_ids[t.id] = t.element
    seen_shapes: dict[tuple[object, ...], str] = {}
    for t in (*transitions, *rules):
        for order in t.orders:
            shape = (t.event, order, tuple(sorted((r, tuple(sorted(s))) for r, s in t.when)))
            if shape in seen_shapes:
                raise ctx.fail(
                    t.element,
                    f"duplicate transition: same event, order and conditions as {seen_shapes[shape]}",
                )
            seen_shapes[shape] = t.element

    completion = ctx.obj(ctx.get(top, "completion", "document"), "completion")
    by_mode = ctx.obj(ctx.get(completion, "by_mode", "completion"), "completion.by_mode")
    for mode, result_name in by_mode.items():
        check_state("mode", mode, "completion.by_mode")
        if result_name not in ("success", "canceled"):
            raise ctx.fail("completion.by_mode", f"unknown completion {result_name!r}")
    complete_modes = ctx.strings(ctx.get(completion, "complete_modes", "completion"), "completion.complete_modes")
    final_modes = ctx.strings(ctx.get(completion, "final_modes", "completion"), "completion.final_modes")
    for mode in (*complete_modes, *final_modes):
        check_state("mode", mode, "completion")

    bc = ctx.obj(ctx.get(top, "begin_cleanup", "document"), "begin_cleanup")
    bc_modes = ctx.obj(ctx.get(bc, "by_mode", "begin_cleanup"), "begin_cleanup.by_mode")
    for src, dst in bc_modes.items():
        check_state("mode", src, "begin_cleanup.by_mode")
        check_state("mode", ctx.string(dst, "begin_cleanup.by_mode"), "begin_cleanup.by_mode")

    lifecycles_obj = ctx.obj(ctx.get(top, "lifecycles", "document"), "lifecycles")
    lifecycles = tuple(
        (HandoffOrder(name), ctx.strings(lifecycles_obj.get(name, []), f"lifecycles.{name}"))
        for name in orders_raw
    )

    invariants: list[Invariant] = []
    invariants_raw = top.get("invariants", [])
    if not isinstance(invariants_raw, list):
        raise ctx.fail("invariants", "expected a list")
    for i, iraw in enumerate(invariants_raw):
        el = f"invariants[{i}]"
        iobj = ctx.obj(iraw, el)
        iid = ctx.string(ctx.get(iobj, "id", el), f"{el}.id")
        if any(inv.id == iid for inv in invariants):
            raise ctx.fail(f"{el}.id", f"duplicate invariant id {iid!r}")
        kind = ctx.string(ctx.get(iobj, "kind", el), f"{el}.kind")
        inv_orders = tuple(HandoffOrder(o) for o in ctx.strings(iobj.get("orders", list(orders_raw)), f"{el}.orders"))
        params = {k: v for k, v in iobj.items() if k not in ("id", "kind", "orders", "doc")}
        problems = invariant_shape_problems(kind, params)
        if problems:
            raise ctx.fail(f"{el} (id {iid!r})", "; ".join(problems))
        _check_invariant_atoms(ctx, f"{el} (id {iid!r})", kind, params, action_names, fact_names, outcome_kinds)
        invariants.append(Invariant(iid, kind, inv_orders, str(iobj.get("doc", "")), params))  # type: ignore[arg-type]

    return ProtocolSpec(
        path=path,
        spec_version=version,
        doc=str(top.get("doc", "")),
        regions=tuple(regions),
        facts=tuple(facts),
        outcome_kinds=outcome_kinds,
        actions=tuple(actions),
        errors=tuple(errors),
        guards=tuple(guards_obj),
        transitions=transitions,
        rules=rules,
        completion_by_mode=tuple((m, str(c)) for m, c in by_mode.items()),
        complete_modes=complete_modes,
        final_modes=final_modes,
        begin_cleanup_by_mode=tuple((m, str(d)) for m, d in bc_modes.items()),
        lifecycles=lifecycles,
        observable_kinds=kinds,
        completed_details=details,
        invariants=tuple(invariants),
        observable_sides=sides,
        completion_kind=completion_kind,
    )


def _check_invariant_atoms(
    ctx: _Ctx,
    element: str,
    kind: str,
    params: dict[str, object],
    actions: set[str],
    facts: set[str],
    outcome_kinds: Sequence[str],
) -> None:
    """Every atom and action an invariant mentions must exist (shapes are already checked).

    Atoms: ``issue:A`` and ``answer:A:K`` (A an action, K an outcome kind), ``fact:F`` (F a
    fact), and the fixed ones in :data:`FIXED_ATOMS`.
    """
    for key, shape in INVARIANT_PARAMS[kind].items():
        value = params.get(key)
        if value is None:
            continue
        if shape == "action":
            if value not in actions:
                raise ctx.fail(element, f"{key}: unknown action {value!r}")
            continue
        if shape == "sides":
            assert isinstance(value, dict)
            for acquire, cleaners in value.items():
                for name in [acquire, *cleaners]:
                    if name not in actions:
                        raise ctx.fail(element, f"{key}: unknown action {name!r}")
            continue
        if shape == "count":
            continue
        for atom in value if isinstance(value, list) else [value]:
            head, _, rest = str(atom).partition(":")
            parts = rest.split(":")
            if atom in FIXED_ATOMS:
                continue
            if head == "issue" and len(parts) == 1:
                if parts[0] not in actions:
                    raise ctx.fail(element, f"{key}: unknown action {parts[0]!r} in {atom!r}")
            elif head == "fact" and len(parts) == 1:
                if parts[0] not in facts:
                    raise ctx.fail(element, f"{key}: unknown fact {parts[0]!r} in {atom!r}")
            elif head == "answer" and len(parts) == 2:
                if parts[0] not in actions:
                    raise ctx.fail(element, f"{key}: unknown action {parts[0]!r} in {atom!r}")
                if parts[1] not in outcome_kinds:
                    raise ctx.fail(element, f"{key}: unknown outcome kind {parts[1]!r} in {atom!r}")
            else:
                raise ctx.fail(
                    element,
                    f"{key}: unknown atom {atom!r} (expected issue:A, fact:F, answer:A:K or one of "
                    + ", ".join(FIXED_ATOMS) + ")",
                )
