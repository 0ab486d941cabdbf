"""The workers' own clocks (``spec/handoff.json`` ``workers``) as values, and what they do.

The coordinator's spec says what the coordinator does with facts; this section says where facts
come from: small machines for the source worker's hold, the destination worker's reservation,
the transfer engine's view (KVPoll) and the heartbeat channel.  They answer the coordinator's
commands (first matching ``commands`` entry per action) and move on their own (``moves``:
progress, timers that *may fire now*, faults, the client).  Timer values are parameters: a
configuration says which timers exist and what they are guaranteed to outlast, and the guards
of the timer moves read it.  Nothing here models wall time.

The composition with a coordinator (exploration, properties) is the checker's job
(:mod:`dmocker.check.clocks`); this module only reads the section and evaluates its guards.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Mapping

from dmocker.handoff._spec import SpecError
from dmocker.handoff._types import HandoffOrder, OutcomeKind

#: A configuration of the worker machines: one state name per machine, in machine order.
WorkerState = tuple[str, ...]


class MoveKind(enum.Enum):
    PROGRESS = "progress"  # a worker gets on with its job
    TIMER = "timer"  # a worker's own clock: may fire now
    FAULT = "fault"  # the world breaks something
    CLIENT = "client"  # the client cancels


class PropertyKind(enum.Enum):
    MOVE_REQUIRES = "move_requires"  # a move only fires when `when` holds
    COMMAND_REQUIRES = "command_requires"  # a command is only carried out when `when` holds
    STALL_FREES = "stall_frees"  # with only `moves`, every held block ends freed
    COMPLETE_AGREES = "complete_agrees"  # at Complete, the workers' states agree with the completion
    FAIR_COMPLETES = "fair_completes"  # with `moves` in priority order, Complete is reached


#: A condition: machine -> the states it may be in.
Condition = tuple[tuple[int, frozenset[str]], ...]
#: A parameter condition: parameter -> the values it may have.
ParamCondition = tuple[tuple[str, frozenset[str]], ...]


@dataclass(frozen=True, slots=True)
class Guard:
    """``when`` (machine states) and ``if`` (configuration parameters), both conjunctions."""

    when: Condition
    params: ParamCondition

    def holds(self, state: WorkerState, config: Mapping[str, str]) -> bool:
        return all(state[m] in allowed for m, allowed in self.when) and all(
            config[p] in allowed for p, allowed in self.params
        )


@dataclass(frozen=True, slots=True)
class Rule:
    """One ``commands`` or ``moves`` entry: enabled when its guard holds and no ``unless`` does."""

    name: str  # the action for a command, the move id for a move
    guard: Guard
    unless: tuple[Guard, ...]
    set: tuple[tuple[int, str], ...]
    fact: str | None  # moves: the fact delivered to the coordinator
    reply: OutcomeKind | None  # commands: the outcome reported for the action
    kind: MoveKind | None  # moves only
    doc: str

    def enabled(self, state: WorkerState, config: Mapping[str, str]) -> bool:
        return self.guard.holds(state, config) and not any(u.holds(state, config) for u in self.unless)

    def apply(self, state: WorkerState) -> WorkerState:
        if not self.set:
            return state
        out = list(state)
        for m, value in self.set:
            out[m] = value
        return tuple(out)


@dataclass(frozen=True, slots=True)
class Machine:
    name: str
    doc: str
    initial: str
    states: tuple[str, ...]
    docs: Mapping[str, str]
    kvpoll: Mapping[str, str]  # state -> SGLang KVPoll value, where the spec gives one


@dataclass(frozen=True, slots=True)
class Configuration:
    name: str
    doc: str
    orders: tuple[HandoffOrder, ...]
    parameters: Mapping[str, str]
    expect_failing: tuple[str, ...]  # the properties this configuration is known to break
    sources: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ClockProperty:
    id: str
    kind: PropertyKind
    doc: str
    guard: Guard | None  # move_requires / command_requires
    subject: str | None  # the move or action it judges
    moves: tuple[str, ...]  # stall_frees / fair_completes: move kinds or ids, in priority order
    success: tuple[Guard, ...]  # complete_agrees
    canceled: tuple[Guard, ...]


@dataclass(frozen=True, slots=True)
class WorkersSpec:
    machines: tuple[Machine, ...]
    held: tuple[tuple[int, frozenset[str]], ...]  # machine -> states that hold blocks
    parameters: Mapping[str, tuple[str, ...]]
    parameter_docs: Mapping[str, str]
    configurations: Mapping[str, Configuration]
    commands: tuple[Rule, ...]
    moves: tuple[Rule, ...]
    properties: tuple[ClockProperty, ...]

    @property
    def initial(self) -> WorkerState:
        return tuple(m.initial for m in self.machines)

    def machine_index(self, name: str) -> int:
        for i, m in enumerate(self.machines):
            if m.name == name:
                return i
        raise KeyError(name)

    def command(self, action: str, state: WorkerState, config: Mapping[str, str]) -> Rule | None:
        """The first command entry for ``action`` enabled in ``state`` (None: the worker ignores it)."""
        for rule in self.commands:
            if rule.name == action and rule.enabled(state, config):
                return rule
        return None

    def enabled_moves(self, state: WorkerState, config: Mapping[str, str]) -> list[Rule]:
        """Per move id, its first enabled variant, in spec order."""
        seen: set[str] = set()
        out: list[Rule] = []
        for rule in self.moves:
            if rule.name in seen:
                continue
            if rule.enabled(state, config):
                seen.add(rule.name)
                out.append(rule)
        return out

    def holding(self, state: WorkerState) -> list[str]:
        """The machines whose state holds blocks, as ``machine=state``."""
        return [f"{self.machines[m].name}={state[m]}" for m, states in self.held if state[m] in states]

    def describe(self, state: WorkerState) -> str:
        return " ".join(f"{m.name}={s}" for m, s in zip(self.machines, state))

    def with_moves(self, moves: tuple[Rule, ...]) -> WorkersSpec:
        return dataclasses.replace(self, moves=moves)

    def with_commands(self, commands: tuple[Rule, ...]) -> WorkersSpec:
        return dataclasses.replace(self, commands=commands)


# --- parsing ---------------------------------------------------------------------------------


class _Ctx:
    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, element: str, message: str) -> SpecError:
        return SpecError(f"{self.path}: workers.{element}: {message}")

    def obj(self, raw: object, element: str) -> dict[str, object]:
        if not isinstance(raw, dict):
            raise self.fail(element, "expected an object")
        return raw

    def text(self, raw: object, element: str) -> str:
        if not isinstance(raw, str):
            raise self.fail(element, "expected a string")
        return raw

    def texts(self, raw: object, element: str) -> tuple[str, ...]:
        if isinstance(raw, str):
            return (raw,)
        if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
            raise self.fail(element, "expected a string or a list of strings")
        return tuple(raw)


def _condition(ctx: _Ctx, raw: object, element: str, machines: tuple[Machine, ...]) -> Condition:
    out: list[tuple[int, frozenset[str]]] = []
    names = [m.name for m in machines]
    for mname, sraw in ctx.obj(raw, element).items():
        if mname not in names:
            raise ctx.fail(element, f"unknown machine {mname!r}")
        i = names.index(mname)
        states = ctx.texts(sraw, f"{element}.{mname}")
        for s in states:
            if s not in machines[i].states:
                raise ctx.fail(element, f"unknown state {s!r} of machine {mname!r}")
        out.append((i, frozenset(states)))
    return tuple(out)


def _params(ctx: _Ctx, raw: object, element: str, parameters: Mapping[str, tuple[str, ...]]) -> ParamCondition:
    out: list[tuple[str, frozenset[str]]] = []
    for pname, vraw in ctx.obj(raw, element).items():
        if pname not in parameters:
            raise ctx.fail(element, f"unknown parameter {pname!r}")
        values = ctx.texts(vraw, f"{element}.{pname}")
        for v in values:
            if v not in parameters[pname]:
                raise ctx.fail(element, f"unknown value {v!r} of parameter {pname!r}")
        out.append((pname, frozenset(values)))
    return tuple(out)


def _guard(ctx: _Ctx, obj: Mapping[str, object], element: str, machines: tuple[Machine, ...],
           parameters: Mapping[str, tuple[str, ...]]) -> Guard:
    return Guard(
        _condition(ctx, obj.get("when", {}), f"{element}.when", machines),
        _params(ctx, obj.get("if", {}), f"{element}.if", parameters),
    )


def parse_workers(raw: object, path: str, facts: frozenset[str], actions: frozenset[str],
                  order_names: Mapping[str, HandoffOrder]) -> WorkersSpec:
    """Read and check the ``workers`` section; every name it uses must be declared."""
    ctx = _Ctx(path)
    top = ctx.obj(raw, "")
    machines: list[Machine] = []
    for name, mraw in ctx.obj(top.get("machines"), "machines").items():
        el = f"machines.{name}"
        mobj = ctx.obj(mraw, el)
        states_raw = ctx.obj(mobj.get("states"), f"{el}.states")
        docs: dict[str, str] = {}
        kvpoll: dict[str, str] = {}
        for s, sraw in states_raw.items():
            if isinstance(sraw, dict):
                docs[s] = ctx.text(sraw.get("doc"), f"{el}.states.{s}.doc")
                if "kvpoll" in sraw:
                    kvpoll[s] = ctx.text(sraw["kvpoll"], f"{el}.states.{s}.kvpoll")
            else:
                docs[s] = ctx.text(sraw, f"{el}.states.{s}")
        initial = ctx.text(mobj.get("initial"), f"{el}.initial")
        if initial not in states_raw:
            raise ctx.fail(f"{el}.initial", f"unknown state {initial!r}")
        machines.append(Machine(name, ctx.text(mobj.get("doc", ""), f"{el}.doc"), initial, tuple(states_raw), docs, kvpoll))
    mt = tuple(machines)

    parameters: dict[str, tuple[str, ...]] = {}
    parameter_docs: dict[str, str] = {}
    for pname, praw in ctx.obj(top.get("parameters"), "parameters").items():
        pobj = ctx.obj(praw, f"parameters.{pname}")
        parameters[pname] = ctx.texts(pobj.get("values"), f"parameters.{pname}.values")
        parameter_docs[pname] = ctx.text(pobj.get("doc", ""), f"parameters.{pname}.doc")

    held = _condition(ctx, top.get("held", {}), "held", mt)

    def rule(robj: dict[str, object], el: str, is_move: bool) -> Rule:
        guard = _guard(ctx, robj, el, mt, parameters)
        unless_raw = robj.get("unless", [])
        if not isinstance(unless_raw, list):
            raise ctx.fail(f"{el}.unless", "expected a list")
        unless = tuple(_guard(ctx, ctx.obj(u, f"{el}.unless[{i}]"), f"{el}.unless[{i}]", mt, parameters)
                       for i, u in enumerate(unless_raw))
        sets = _condition(ctx, robj.get("set", {}), f"{el}.set", mt)
        for m, values in sets:
            if len(values) != 1:
                raise ctx.fail(f"{el}.set", f"machine {mt[m].name!r} must be set to one state")
        fact = robj.get("fact")
        if fact is not None and (not is_move or fact not in facts):
            raise ctx.fail(f"{el}.fact", f"unknown fact {fact!r}")
        reply: OutcomeKind | None = None
        kind: MoveKind | None = None
        if is_move:
            name = ctx.text(robj.get("id"), f"{el}.id")
            try:
                kind = MoveKind(ctx.text(robj.get("kind"), f"{el}.kind"))
            except ValueError:
                raise ctx.fail(f"{el}.kind", f"unknown move kind (known: {[k.value for k in MoveKind]})") from None
        else:
            name = ctx.text(robj.get("action"), f"{el}.action")
            if name not in actions:
                raise ctx.fail(f"{el}.action", f"unknown action {name!r}")
            try:
                reply = OutcomeKind(ctx.text(robj.get("reply"), f"{el}.reply"))
            except ValueError:
                raise ctx.fail(f"{el}.reply", "unknown outcome kind") from None
        return Rule(name, guard, unless, tuple((m, next(iter(v))) for m, v in sets),
                    fact if isinstance(fact, str) else None, reply, kind, str(robj.get("doc", "")))

    def rules(key: str, is_move: bool) -> tuple[Rule, ...]:
        raw_list = top.get(key)
        if not isinstance(raw_list, list):
            raise ctx.fail(key, "expected a list")
        return tuple(rule(ctx.obj(r, f"{key}[{i}]"), f"{key}[{i}]", is_move) for i, r in enumerate(raw_list))

    commands = rules("commands", False)
    moves = rules("moves", True)
    move_ids = {m.name for m in moves}

    configurations: dict[str, Configuration] = {}
    props_raw = top.get("properties")
    if not isinstance(props_raw, list):
        raise ctx.fail("properties", "expected a list")
    properties: list[ClockProperty] = []
    for i, praw in enumerate(props_raw):
        el = f"properties[{i}]"
        pobj = ctx.obj(praw, el)
        try:
            kind = PropertyKind(ctx.text(pobj.get("kind"), f"{el}.kind"))
        except ValueError:
            raise ctx.fail(f"{el}.kind", f"unknown property kind (known: {[k.value for k in PropertyKind]})") from None
        subject = pobj.get("move", pobj.get("action"))
        if kind is PropertyKind.MOVE_REQUIRES and subject not in move_ids:
            raise ctx.fail(f"{el}.move", f"unknown move {subject!r}")
        if kind is PropertyKind.COMMAND_REQUIRES and subject not in actions:
            raise ctx.fail(f"{el}.action", f"unknown action {subject!r}")
        moves_sel = ctx.texts(pobj.get("moves", []), f"{el}.moves")
        for sel in moves_sel:
            if sel not in move_ids and sel not in {k.value for k in MoveKind}:
                raise ctx.fail(f"{el}.moves", f"{sel!r} is neither a move id nor a move kind")

        def guards(key: str, pel: str = el, pdict: dict[str, object] = pobj) -> tuple[Guard, ...]:
            raw_g = pdict.get(key, [])
            if not isinstance(raw_g, list):
                raise ctx.fail(f"{pel}.{key}", "expected a list")
            return tuple(Guard(_condition(ctx, g, f"{pel}.{key}[{j}]", mt), ()) for j, g in enumerate(raw_g))

        needs_guard = kind in (PropertyKind.MOVE_REQUIRES, PropertyKind.COMMAND_REQUIRES)
        properties.append(ClockProperty(
            ctx.text(pobj.get("id"), f"{el}.id"), kind, ctx.text(pobj.get("doc", ""), f"{el}.doc"),
            _guard(ctx, pobj, el, mt, parameters) if needs_guard else None,
            subject if isinstance(subject, str) else None, moves_sel, guards("success"), guards("canceled"),
        ))
    prop_ids = {p.id for p in properties}

    for cname, craw in ctx.obj(top.get("configurations"), "configurations").items():
        el = f"configurations.{cname}"
        cobj = ctx.obj(craw, el)
        values = {k: ctx.text(v, f"{el}.parameters.{k}") for k, v in ctx.obj(cobj.get("parameters"), f"{el}.parameters").items()}
        if set(values) != set(parameters):
            raise ctx.fail(f"{el}.parameters", f"must set exactly {sorted(parameters)}")
        for k, v in values.items():
            if v not in parameters[k]:
                raise ctx.fail(f"{el}.parameters.{k}", f"unknown value {v!r}")
        orders: list[HandoffOrder] = []
        for o in ctx.texts(cobj.get("orders"), f"{el}.orders"):
            if o not in order_names:
                raise ctx.fail(f"{el}.orders", f"unknown order {o!r}")
            orders.append(order_names[o])
        expect = ctx.texts(cobj.get("expect", []), f"{el}.expect")
        for e in expect:
            if e not in prop_ids:
                raise ctx.fail(f"{el}.expect", f"unknown property {e!r}")
        configurations[cname] = Configuration(
            cname, ctx.text(cobj.get("doc", ""), f"{el}.doc"), tuple(orders), values, expect,
            ctx.texts(cobj.get("sources", []), f"{el}.sources"),
        )

    return WorkersSpec(mt, held, parameters, parameter_docs, configurations, commands, moves, tuple(properties))


__all__ = [
    "ClockProperty",
    "Configuration",
    "Guard",
    "Machine",
    "MoveKind",
    "PropertyKind",
    "Rule",
    "WorkerState",
    "WorkersSpec",
    "parse_workers",
]
