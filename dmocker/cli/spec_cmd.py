"""``dmocker spec validate FILE`` and ``dmocker spec show --order ORDER``."""

from __future__ import annotations

import argparse

from dmocker.cli.io import error
from dmocker.handoff import HandoffOrder, SpecError, compile_table, has_workers, load_spec, load_workers
from dmocker.handoff import Reject, Step
from .io import VerbRegistry


def add_parser(subparsers: VerbRegistry) -> None:
    p = subparsers.add_parser("spec", help="validate or show the handoff protocol spec")
    sub = p.add_subparsers(dest="spec_command", required=True)
    v = sub.add_parser("validate", help="check a spec file (names, reachability, ways out, duplicates)")
    v.add_argument("file", nargs="?", help="spec file (default: $DMOCKER_SPEC if set, else dmocker's spec/handoff.json)")
    v.set_defaults(func=run_validate)
    s = sub.add_parser("show", help="print the protocol of one order, region by region and rule by rule")
    s.add_argument("--order", choices=[o.value for o in HandoffOrder], default="source-first")
    s.add_argument("--spec", help="spec file (default: $DMOCKER_SPEC if set, else dmocker's spec/handoff.json)")
    s.add_argument("--table", action="store_true", help="also print every reachable product state")
    s.set_defaults(func=run_show)


def run_validate(args: argparse.Namespace) -> int:
    try:
        spec = load_spec(args.file)
    except SpecError as exc:
        return error(str(exc))
    counts = ", ".join(f"{o.value}: {compile_table(spec, o).state_count} states" for o in HandoffOrder)
    print(f"{spec.path}: valid (spec_version {spec.spec_version}; {len(spec.transitions)} transitions, "
          f"{len(spec.rules)} rules, {len(spec.invariants)} invariants; {counts})")
    if has_workers(spec):
        try:
            workers = load_workers(args.file)
        except SpecError as exc:
            return error(str(exc))
        print(f"  workers: {len(workers.machines)} machines, {len(workers.commands)} commands, {len(workers.moves)} moves, "
              f"{len(workers.properties)} properties, {len(workers.configurations)} configurations")
    return 0


def run_show(args: argparse.Namespace) -> int:
    try:
        spec = load_spec(args.spec)
    except SpecError as exc:
        return error(str(exc))
    order = HandoffOrder(args.order)
    table = compile_table(spec, order)
    print(f"handoff protocol {spec.spec_version}, order {order.value}")
    print(f"lifecycle: {' -> '.join(spec.lifecycle(order))}")
    print("\nregions:")
    for region in spec.regions:
        print(f"  {region.name} (initial {region.initial}): {region.doc}")
        for state, doc in zip(region.states, region.state_docs):
            print(f"    {state:<18} {doc}")
    print("\ntransitions (first match wins per event):")
    for t in spec.transitions:
        if not t.applies_to(order):
            continue
        when = ", ".join(f"{r} in {{{', '.join(s)}}}" for r, s in t.when) or "always"
        if t.result == "ignore":
            effect = "ignore"
        elif t.result == "reject":
            effect = f"reject {t.reject.name if t.reject else ''}"
        else:
            effect = "set " + ", ".join(f"{r}={s}" for r, s in t.set)
            if t.begin_cleanup:
                effect += ", begin cleanup"
            if t.emit:
                effect += " / emit " + ", ".join(t.emit)
            if t.checks:
                effect += " [" + ", ".join(f"{c.guard} else {c.error.name}" for c in t.checks) + "]"
        print(f"  {t.id:<32} on {t.event:<28} when {when}: {effect}")
    print("\nprogression rules (fired to a fixed point, first match wins):")
    for r in spec.rules:
        if r.applies_to(order):
            when = ", ".join(f"{k} in {{{', '.join(s)}}}" for k, s in r.when)
            print(f"  {r.id:<36} when {when}: emit {', '.join(r.emit)}")
    print(f"\ninvariants: {', '.join(i.id for i in spec.invariants_for(order))}")
    print(f"reachable product states: {table.state_count}")
    if args.table:
        for s in range(table.state_count):
            print(f"\n  [{s}] {table.state_label(s)}")
            for e, event in enumerate(table.events):
                entry = table.entry(s, e)
                if isinstance(entry, Step):
                    print(f"      {event:<30} -> [{entry.next}] {' '.join(entry.emits)}")
                elif isinstance(entry, Reject):
                    print(f"      {event:<30} !! {entry.kind.name}")
    return 0
