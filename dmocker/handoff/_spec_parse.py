"""Parsing the protocol spec's JSON into :class:`~dmocker.handoff._spec.ProtocolSpec`.

Why apart: the element-by-element checks, each naming the file and the element, are most of
the spec code; the value classes (``_spec``) and the loader (``_spec_load``) read better without them.
"""

from __future__ import annotations

from typing import Sequence

from dmocker.handoff._registry import class_problems
from dmocker.handoff._spec import (
    FIXED_ATOMS,
    INVARIANT_PARAMS,
    KNOWN_GUARDS,
    KNOWN_STORES,
    OBSERVABLE_SIDES,
    REQUEST_ENDS,
    ActionSpec,
    Check,
    EngineEntry,
    FactSpec,
    FaultSpec,
    Invariant,
    ProtocolSpec,
    Region,
    SpecError,
    Transition,
    WorkerKind,
    invariant_shape_problems,
)
from dmocker.handoff._types import Completion, HandoffErrorKind, HandoffOrder

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


def _fact_ending(ctx: _Ctx, fobj: dict[str, object], element: str, terminal: bool) -> tuple[str | None, FaultSpec | None]:
    """A fact's ``request_ends`` and ``fault``: required and optional on a terminal fact, absent otherwise."""
    if not terminal:
        for key in ("request_ends", "fault"):
            if key in fobj:
                raise ctx.fail(f"{element}.{key}", "only a terminal fact ends a request")
        return None, None
    ends = ctx.string(ctx.get(fobj, "request_ends", element), f"{element}.request_ends")
    if ends not in REQUEST_ENDS:
        raise ctx.fail(f"{element}.request_ends", f"expected one of {list(REQUEST_ENDS)}, got {ends!r}")
    if "fault" not in fobj:
        return ends, None
    fault = ctx.obj(fobj["fault"], f"{element}.fault")
    unknown = sorted(set(fault) - {"name", "cause", "doc"})
    if unknown:
        raise ctx.fail(f"{element}.fault", f"unknown fields {unknown}")
    name = ctx.string(ctx.get(fault, "name", f"{element}.fault"), f"{element}.fault.name")
    cause = ctx.string(ctx.get(fault, "cause", f"{element}.fault"), f"{element}.fault.cause")
    for what, value in (("name", name), ("cause", cause)):
        if not value.replace("_", "").isalnum() or not value.islower():
            raise ctx.fail(f"{element}.fault.{what}", f"expected a lower-case identifier, got {value!r}")
    doc = ctx.string(fault.get("doc", ""), f"{element}.fault.doc")
    return ends, FaultSpec(name, cause, doc)


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
        terminal = ctx.boolean(fobj.get("terminal", False), f"facts.{fname}.terminal")
        facts.append(FactSpec(fname, terminal, payload, *_fact_ending(ctx, fobj, f"facts.{fname}", terminal)))
    fault_names = [f.fault.name for f in facts if f.fault is not None]
    if len(set(fault_names)) != len(fault_names):
        raise ctx.fail("facts", f"fault names must be unique, got {fault_names}")
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
    worker_kinds = _parse_worker_kinds(ctx, observable.get("worker_kinds", {}), kinds, orders_raw,
                                       fact_names, region_states)

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
        engines=_parse_engines(ctx, top.get("engines", {}), orders_raw),
        worker_kinds=worker_kinds,
    )


def _parse_worker_kinds(ctx: _Ctx, raw: object, kinds: tuple[str, ...], orders: dict[str, object],
                        facts: set[str], region_states: dict[str, tuple[str, ...]]) -> tuple[WorkerKind, ...]:
    """``observable.worker_kinds`` (optional): name -> ``{"move"?, "side", "orders"?, "fact", "when",
    "doc", "sources"}``; a name is new (not a coordinator kind), ``when`` names declared regions and
    states, ``fact`` a declared fact or null."""
    known = ("move", "side", "orders", "fact", "when", "doc", "sources")
    out: list[WorkerKind] = []
    for name, value in ctx.obj(raw, "observable.worker_kinds").items():
        if name == "doc":
            continue
        el = f"observable.worker_kinds.{name}"
        if name in kinds:
            raise ctx.fail(el, "a worker kind is not also a coordinator kind (observable.kinds)")
        obj = ctx.obj(value, el)
        unknown = sorted(set(obj) - set(known))
        if unknown:
            raise ctx.fail(el, f"unknown field {unknown[0]!r} (known: {', '.join(map(repr, known))})")
        side = ctx.string(ctx.get(obj, "side", el), f"{el}.side")
        if side not in OBSERVABLE_SIDES:
            raise ctx.fail(f"{el}.side", f"unknown side {side!r} (one of {list(OBSERVABLE_SIDES)})")
        order_names = ctx.strings(obj.get("orders", list(orders)), f"{el}.orders")
        for order in order_names:
            if order not in orders:
                raise ctx.fail(f"{el}.orders", f"unknown order {order!r} (declared: {sorted(orders)})")
        fact_raw = ctx.get(obj, "fact", el)
        fact = None if fact_raw is None else ctx.string(fact_raw, f"{el}.fact")
        if fact is not None and fact not in facts:
            raise ctx.fail(f"{el}.fact", f"unknown fact {fact!r}")
        when: list[tuple[str, tuple[str, ...]]] = []
        for region, states_raw in ctx.obj(ctx.get(obj, "when", el), f"{el}.when").items():
            states = ctx.strings(states_raw, f"{el}.when.{region}")
            if region not in region_states:
                raise ctx.fail(f"{el}.when", f"unknown region {region!r}")
            for state in states:
                if state not in region_states[region]:
                    raise ctx.fail(f"{el}.when.{region}", f"unknown state {state!r}")
            when.append((region, states))
        move = ctx.string(obj.get("move", ""), f"{el}.move")
        out.append(WorkerKind(name=name, side=side, orders=tuple(HandoffOrder(o) for o in order_names), fact=fact, move=move,
                              when=tuple(when), doc=ctx.string(ctx.get(obj, "doc", el), f"{el}.doc"),
                              sources=ctx.strings(obj.get("sources", []), f"{el}.sources")))
    return tuple(out)


def _parse_engines(ctx: _Ctx, raw: object, orders: dict[str, object]) -> tuple[EngineEntry, ...]:
    """The ``engines`` table (optional): name -> ``{"order", "default_block_size"?}``.

    Names are lower case (lookups ignore case), each speaks a declared order, and a default
    block size, when given, is a positive number of tokens."""
    entries: list[EngineEntry] = []
    for name, value in ctx.obj(raw, "engines").items():
        if name == "doc":
            continue
        el = f"engines.{name}"
        if not name or name != name.strip().lower():
            raise ctx.fail(el, "an engine name is lower case, without surrounding blanks")
        obj = ctx.obj(value, el)
        unknown = sorted(set(obj) - {"order", "default_block_size"})
        if unknown:
            raise ctx.fail(el, f"unknown field {unknown[0]!r} (known: 'order', 'default_block_size')")
        order = ctx.string(ctx.get(obj, "order", el), f"{el}.order")
        if order not in orders:
            raise ctx.fail(f"{el}.order", f"unknown order {order!r} (declared: {sorted(orders)})")
        block = obj.get("default_block_size")
        if block is not None and (isinstance(block, bool) or not isinstance(block, int) or block <= 0):
            raise ctx.fail(f"{el}.default_block_size", f"expected a positive integer (tokens), got {block!r}")
        entries.append(EngineEntry(name, HandoffOrder(order), block))
    return tuple(entries)


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
