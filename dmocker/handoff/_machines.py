"""The spec as python-statemachine charts: one parallel region per spec region, one chart per order.

This is the readable, independent interpretation of the spec (SCXML semantics as implemented
by python-statemachine): each spec transition becomes chart transitions in the regions it sets,
guarded by its ``when`` conditions and by the negation of every earlier transition of the same
event ("first match wins"); progression rules become eventless transitions, likewise
prioritised, which the chart fires to a fixed point within the macrostep.  Ignored inputs are
internal self-transitions; rejected inputs raise :class:`HandoffError` from the transition.

It runs a few thousand events per second, so the hot paths use the compiled table instead; a
test walks both over the whole reachable graph and proves they agree.  The machine does not
evaluate data guards: ``send(event, failing=frozenset(...))`` says which guards fail, and the
guards met along the macrostep are recorded in ``checks``.
"""

from __future__ import annotations

from typing import Callable

from statemachine import State, StateChart

from dmocker.handoff._spec import ProtocolSpec, Transition
from dmocker.handoff._types import HandoffError, HandoffErrorKind, HandoffOrder


def event_id(name: str) -> str:
    """Chart event id of a spec event (python-statemachine treats dots as descriptors)."""
    return name.replace(".", "__")


def state_id(region: str, state: str) -> str:
    return f"{region}__{state}"


class HandoffChart(StateChart):  # type: ignore[type-arg]
    """Base class of the generated charts: strict (no swallowed errors, no silent events)."""

    catch_errors_as_events = False
    allow_event_without_transition = False

    emitted: list[str]
    logs: list[str]
    checks: list[str]
    failing: frozenset[str]

    def region_states(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for value in self.configuration_values:
            text = str(value)
            if "__" in text:
                region, _, state = text.partition("__")
                out[region] = state
        return out

    def position(self, region_states: dict[str, str]) -> None:
        """Put the chart in the given configuration (one state per region), e.g. to probe it."""
        from statemachine.orderedset import OrderedSet

        values = ["handoff"]
        for region, state in region_states.items():
            values.extend([f"region_{region}", state_id(region, state)])
        self.configuration = OrderedSet(self.states_map[v] for v in values)

    def deliver(self, event: str, failing: frozenset[str] = frozenset()) -> list[str]:
        """Send a spec event; return the emitted action names. Raises HandoffError on rejection."""
        self.emitted = []
        self.logs = []
        self.checks = []
        self.failing = failing
        self.send(event_id(event))
        return list(self.emitted)


def build_chart(spec: ProtocolSpec, order: HandoffOrder) -> type[HandoffChart]:
    """Generate the chart class of ``order`` from the spec."""
    states: dict[tuple[str, str], State] = {}
    regions: list[State] = []
    for region in spec.regions:
        children = []
        for name in region.states:
            st = State(name, value=state_id(region.name, name), initial=(name == region.initial))
            st._set_id(state_id(region.name, name))
            states[(region.name, name)] = st
            children.append(st)
        compound = State(region.name, value=f"region_{region.name}", states=children)
        compound._set_id(f"region_{region.name}")
        regions.append(compound)

    def in_config(machine: HandoffChart, t: Transition) -> bool:
        values = machine.configuration_values
        return all(any(state_id(r, s) in values for s in allowed) for r, allowed in t.when)

    def guard(t: Transition, earlier: tuple[Transition, ...]) -> Callable[[HandoffChart], bool]:
        def cond(machine: HandoffChart) -> bool:
            return in_config(machine, t) and not any(in_config(machine, e) for e in earlier)

        return cond

    def effect(t: Transition, emit: bool) -> Callable[[HandoffChart], None]:
        def on(machine: HandoffChart) -> None:
            for check in t.checks:
                machine.checks.append(check.guard)
                if check.guard in machine.failing:
                    raise HandoffError(check.error, f"{t.id}: guard {check.guard} failed")
            if emit:
                machine.emitted.extend(t.emit)
                if t.log:
                    machine.logs.append(t.log)

        return on

    def raiser(kind: HandoffErrorKind, tid: str) -> Callable[[HandoffChart], None]:
        def on(machine: HandoffChart) -> None:
            raise HandoffError(kind, f"{tid}: rejected")

        return on

    mode_states = spec.region("mode").states
    begin_cleanup = dict(spec.begin_cleanup_by_mode)

    def add_step(t: Transition, earlier: tuple[Transition, ...], event: str | None) -> None:
        cond = guard(t, earlier)
        sets = list(t.set)
        if t.begin_cleanup:
            sets.append(("mode", "__begin_cleanup__"))
        for i, (region, target) in enumerate(sets):
            allowed = dict(t.when).get(region, spec.region(region).states)
            for source in allowed:
                dest = begin_cleanup.get(source) if target == "__begin_cleanup__" else target
                if dest is None:
                    continue
                kwargs: dict[str, object] = {"cond": cond, "on": effect(t, emit=(i == 0))}
                if event is not None:
                    kwargs["event"] = event_id(event)
                if dest == source:
                    states[(region, source)].to(None, **kwargs)  # targetless: nothing is exited
                else:
                    states[(region, source)].to(states[(region, dest)], **kwargs)

    by_event: dict[str, list[Transition]] = {}
    for t in spec.transitions:
        if t.applies_to(order) and t.event is not None:
            by_event.setdefault(t.event, []).append(t)
    for event in spec.events:
        chosen = by_event.get(event, [])
        prelude: list[Transition] = []
        if "." in event:
            action_name = event.partition(".")[0]
            pending = spec.action(action_name).pending
            # Input precedence: outcomes are ignored once complete; unlisted kinds are invalid.
            prelude.append(_synthetic("outcome_after_complete", event, {"mode": spec.complete_modes}, "ignore"))
            if pending is not None:
                chosen = [
                    _with_when(t, pending) for t in chosen
                ] + [_synthetic("unlisted_outcome", event, {pending[0]: (pending[1],)}, "reject")]
        ordered = [*prelude, *chosen]
        for i, t in enumerate(ordered):
            earlier = tuple(ordered[:i])
            if t.result == "step":
                add_step(t, earlier, event)
            else:
                cond = guard(t, earlier)
                on = raiser(t.reject or HandoffErrorKind.INVALID_OUTCOME, t.id) if t.result == "reject" else None
                for mode in mode_states:
                    kwargs2: dict[str, object] = {"cond": cond, "event": event_id(event)}
                    if on is not None:
                        kwargs2["on"] = on
                    states[("mode", mode)].to(None, **kwargs2)
    rules = [r for r in spec.rules if r.applies_to(order)]
    for i, rule in enumerate(rules):
        add_step(rule, tuple(rules[:i]), None)

    root = State("handoff", value="handoff", parallel=True, states=regions)
    root._set_id("handoff")
    name = "".join(part.capitalize() for part in order.value.split("-")) + "Handoff"
    cls = type(name, (HandoffChart,), {"handoff": root, "__doc__": f"The {order.value} handoff chart."})
    return cls


def _synthetic(tid: str, event: str, when: dict[str, tuple[str, ...]], result: str) -> Transition:
    from dmocker.handoff._spec import Transition as T

    return T(
        id=tid,
        event=event,
        orders=tuple(HandoffOrder),
        when=tuple(when.items()),
        result=result,
        reject=HandoffErrorKind.INVALID_OUTCOME if result == "reject" else None,
        set=(),
        emit=(),
        checks=(),
        store=(),
        log=None,
        begin_cleanup=False,
        doc="input precedence",
        element=tid,
    )


def _with_when(t: Transition, pending: tuple[str, str]) -> Transition:
    """An outcome transition only applies while its action awaits an outcome."""
    from dataclasses import replace

    when = dict(t.when)
    when.setdefault(pending[0], (pending[1],))
    return replace(t, when=tuple(when.items()))
