"""Compile the spec into a frozen, integer-indexed transition table (the hot path).

A product state is one state per region.  Compilation walks every product state reachable from
the initial one (BFS, events in spec order, so numbering is deterministic) and records, for each
(state, event), what the protocol does: ignore it, reject it with an error kind, or step to a new
state emitting actions, after the event's own transition *and* the progression rules fired to a
fixed point.  Data guards (``checks``) are carried as names: the coordinator evaluates them on
the payloads and rejects the input before anything changes if one fails.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Final, Union

from dmocker.handoff._spec import ProtocolSpec, SpecError, Transition, derived
from dmocker.handoff._types import Completion, HandoffErrorKind, HandoffOrder

IGNORE_TAG: Final = 0
REJECT_TAG: Final = 1
STEP_TAG: Final = 2
NA_TAG: Final = 3


@dataclass(frozen=True, slots=True)
class Ignore:
    """The input is accepted and changes nothing."""

    tag: int = IGNORE_TAG


@dataclass(frozen=True, slots=True)
class NotApplicable:
    """An outcome for an action that is not awaiting one: the journal answers before the table."""

    tag: int = NA_TAG


@dataclass(frozen=True, slots=True)
class Reject:
    kind: HandoffErrorKind
    transition: str
    tag: int = REJECT_TAG


@dataclass(frozen=True, slots=True)
class Step:
    """Move to ``next``; ``emits`` are action names in issue order; ``logs`` observable kinds."""

    next: int
    emits: tuple[str, ...]
    checks: tuple[tuple[str, HandoffErrorKind], ...]
    stores: tuple[str, ...]
    logs: tuple[str, ...]
    steps: tuple[str, ...]
    tag: int = STEP_TAG


Entry = Union[Ignore, NotApplicable, Reject, Step]
IGNORE: Final = Ignore()
NOT_APPLICABLE: Final = NotApplicable()

Config = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CompiledTable:
    """The reachable product machine of one order, as plain tuples."""

    order: HandoffOrder
    spec_version: str
    region_names: tuple[str, ...]
    configs: tuple[Config, ...]
    events: tuple[str, ...]
    rows: tuple[tuple[Entry, ...], ...]
    initial: int
    complete: tuple[bool, ...]
    completions: tuple[Completion | None, ...]
    pending: tuple[tuple[str, ...], ...]
    transition_ids: tuple[str, ...]

    @property
    def state_count(self) -> int:
        return len(self.configs)

    def event_index(self, name: str) -> int:
        return self.events.index(name)

    def entry(self, state: int, event: int) -> Entry:
        return self.rows[state][event]

    def region_states(self, state: int) -> dict[str, str]:
        return dict(zip(self.region_names, self.configs[state]))

    def state_label(self, state: int) -> str:
        return " ".join(f"{r}={s}" for r, s in zip(self.region_names, self.configs[state]))

    def is_complete(self, state: int) -> bool:
        return self.complete[state]

    def completion(self, state: int) -> Completion | None:
        return self.completions[state]

    def pending_actions(self, state: int) -> tuple[str, ...]:
        return self.pending[state]


def _matches(t: Transition, config: dict[str, str]) -> bool:
    # (both orders' tables are compiled at every spec load)
    for region, states in t.when:
        if config[region] not in states:
            return False
    return True


def _first_match(candidates: list[Transition], config: dict[str, str]) -> Transition | None:
    for t in candidates:
        if _matches(t, config):
            return t
    return None


class _Compiler:
    def __init__(self, spec: ProtocolSpec, order: HandoffOrder) -> None:
        self.spec = spec
        self.order = order
        self.regions = tuple(r.name for r in spec.regions)
        self.by_event: dict[str, list[Transition]] = {}
        for t in spec.transitions:
            if t.applies_to(order) and t.event is not None:
                self.by_event.setdefault(t.event, []).append(t)
        self.rules = [r for r in spec.rules if r.applies_to(order)]
        self.begin_cleanup = dict(spec.begin_cleanup_by_mode)
        self.used: set[str] = set()

    def pending_of(self, config: dict[str, str]) -> tuple[str, ...]:
        return tuple(
            a.name
            for a in self.spec.actions
            if a.pending is not None and config[a.pending[0]] == a.pending[1]
        )

    def entry(self, config: dict[str, str], event: str, pending: tuple[str, ...]) -> tuple[Entry, dict[str, str] | None]:
        """The table entry of ``event`` in ``config`` (``pending``: :meth:`pending_of` it)."""
        if "." in event:
            action_name, _, _kind = event.partition(".")
            if config["mode"] in self.spec.complete_modes:
                return IGNORE, None
            if action_name not in pending:
                return NOT_APPLICABLE, None
        chosen = _first_match(self.by_event.get(event, []), config)
        if chosen is None:
            if "." in event:
                return Reject(HandoffErrorKind.INVALID_OUTCOME, "input_precedence.unlisted_outcome"), None
            raise SpecError(
                f"{self.spec.path}: transitions: no transition for event {event!r} in state "
                f"{_label(self.regions, config)} ({self.order.value})"
            )
        self.used.add(chosen.id)
        if chosen.result == "ignore":
            return IGNORE, None
        if chosen.result == "reject":
            assert chosen.reject is not None
            return Reject(chosen.reject, chosen.id), None
        new = dict(config)
        new.update(chosen.set)
        if chosen.begin_cleanup:
            mode = self.begin_cleanup.get(new["mode"])
            if mode is None:
                raise SpecError(
                    f"{self.spec.path}: {chosen.element}: begin_cleanup has no entry for mode {new['mode']!r}"
                )
            new["mode"] = mode
        emits = list(chosen.emit)
        checks = [(c.guard, c.error) for c in chosen.checks]
        logs = [chosen.log] if chosen.log else []
        steps = [chosen.id]
        for _ in range(len(self.rules) + 1):
            rule = _first_match(self.rules, new)
            if rule is None:
                break
            self.used.add(rule.id)
            before = dict(new)
            new.update(rule.set)
            if new == before:
                raise SpecError(f"{self.spec.path}: {rule.element}: the rule does not change the state")
            emits.extend(rule.emit)
            checks.extend((c.guard, c.error) for c in rule.checks)
            if rule.log:
                logs.append(rule.log)
            steps.append(rule.id)
        else:
            raise SpecError(f"{self.spec.path}: rules: the rules do not reach a fixed point from "
                            f"{_label(self.regions, config)} on {event!r}")
        step = Step(-1, tuple(emits), tuple(checks), chosen.store, tuple(logs), tuple(steps))
        return step, new

    def compile(self) -> CompiledTable:
        events = self.spec.events
        initial = {r.name: r.initial for r in self.spec.regions}

        def key_of(c: dict[str, str]) -> Config:
            return tuple(c[r] for r in self.regions)

        index: dict[Config, int] = {key_of(initial): 0}
        configs: list[Config] = [key_of(initial)]
        raw_rows: list[list[tuple[Entry, Config | None]]] = []
        queue: deque[int] = deque([0])
        while queue:
            s = queue.popleft()
            config = dict(zip(self.regions, configs[s]))
            row: list[tuple[Entry, Config | None]] = []
            pending = self.pending_of(config)  # (once per state, not per outcome event)
            for event in events:
                entry, new = self.entry(config, event, pending)
                target: Config | None = None
                if new is not None:
                    target = key_of(new)
                    if target not in index:
                        index[target] = len(configs)
                        configs.append(target)
                        queue.append(index[target])
                row.append((entry, target))
            while len(raw_rows) <= s:
                raw_rows.append([])
            raw_rows[s] = row
        rows: list[tuple[Entry, ...]] = []
        for row in raw_rows:
            fixed: list[Entry] = []
            for entry, target in row:
                if isinstance(entry, Step) and target is not None:
                    entry = Step(index[target], entry.emits, entry.checks, entry.stores, entry.logs, entry.steps)
                fixed.append(entry)
            rows.append(tuple(fixed))
        by_mode = dict(self.spec.completion_by_mode)
        mode_at = self.regions.index("mode")
        return CompiledTable(
            order=self.order,
            spec_version=self.spec.spec_version,
            region_names=self.regions,
            configs=tuple(configs),
            events=events,
            rows=tuple(rows),
            initial=0,
            complete=tuple(c[mode_at] in self.spec.complete_modes for c in configs),
            completions=tuple(
                Completion(by_mode[c[mode_at]]) if c[mode_at] in by_mode else None for c in configs
            ),
            pending=tuple(self.pending_of(dict(zip(self.regions, c))) for c in configs),
            transition_ids=tuple(t.id for t in (*self.spec.transitions, *self.spec.rules) if t.applies_to(self.order)),
        )


def _label(regions: tuple[str, ...], config: dict[str, str]) -> str:
    return " ".join(f"{r}={config[r]}" for r in regions)


def compile_table(spec: ProtocolSpec, order: HandoffOrder) -> CompiledTable:
    """The compiled table of ``order`` (cached on the spec object)."""
    return derived(spec, ("table", order), lambda: _Compiler(spec, order).compile())


def validate_semantics(spec: ProtocolSpec) -> None:
    """Checks that need the state space: completeness, reachability, ways out, dead transitions."""
    used: set[str] = set()
    reached: dict[str, set[str]] = {r.name: set() for r in spec.regions}
    for order in HandoffOrder:
        compiler = _Compiler(spec, order)
        table = compiler.compile()  # always run: ``compiler.used`` is what this check reads
        derived(spec, ("table", order), lambda: table)
        used |= compiler.used
        mode_at = table.region_names.index("mode")
        for s, config in enumerate(table.configs):
            for region, state in zip(table.region_names, config):
                reached[region].add(state)
            if config[mode_at] in spec.final_modes:
                continue
            if not any(isinstance(e, Step) and e.next != s for e in table.rows[s]):
                raise SpecError(
                    f"{spec.path}: state {table.state_label(s)} ({order.value}): "
                    "not final and no input leads out of it"
                )
    for spec_region in spec.regions:
        for state in spec_region.states:
            if state not in reached[spec_region.name]:
                raise SpecError(f"{spec.path}: regions.{spec_region.name}.states.{state}: unreachable state")
    for t in (*spec.transitions, *spec.rules):
        if t.id not in used:
            raise SpecError(f"{spec.path}: {t.element}: never fires in any reachable state (shadowed or dead)")
