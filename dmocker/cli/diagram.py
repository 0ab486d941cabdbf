"""``dmocker diagram``: draw the handoff protocol from the spec (thin edge over dmocker.diagrams).

Exit codes: 0 written; 1 ``--check-docs`` found stale docs; 2 bad input (unreadable or invalid
spec, conflicting options, Graphviz missing for SVG/PNG, binary output to a terminal).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from dmocker._atomic import write_atomic
from dmocker.handoff import ProtocolSpec, SpecError, load_spec
from dmocker.handoff import HandoffOrder
from .io import VerbRegistry

if TYPE_CHECKING:
    from dmocker.diagrams.model import Diagram

HELP = "draw the protocol as Mermaid, DOT, SVG or PNG (from the spec)"

DESCRIPTION = """\
Draw the handoff protocol of one order from the spec.

Views: 'flow' (default) is the happy path of the order plus where each failure leads (cleanup
states condensed per mode); 'regions' shows the lifecycle of each spec region with arrows
labelled 'event [guard] / emitted actions'; 'workers' draws the workers' own machines (the
source's hold, the destination's reservation, the transfer engine's KVPoll view, the heartbeat)
with their timers and faults; --explored draws every reachable product state of the compiled
table.  Mermaid and DOT are written by dmocker; SVG and PNG need Graphviz's 'dot'.

--update-docs regenerates the diagrams in docs/protocol.md and docs/diagrams/;
--check-docs exits 1 when they are stale.
"""


def add_parser(subparsers: VerbRegistry) -> None:
    """Register ``diagram`` on the top-level CLI."""
    parser = subparsers.add_parser(
        "diagram",
        help=HELP,
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    configure(parser)
    parser.set_defaults(func=run)


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the options (separate so tests can build a parser without the main CLI)."""
    parser.add_argument(
        "--order",
        choices=[o.value for o in HandoffOrder],
        default=HandoffOrder.SOURCE_FIRST.value,
        help="handoff order to draw (default: source-first)",
    )
    parser.add_argument(
        "--format",
        choices=["mermaid", "dot", "svg", "png"],
        default=None,
        help="output format (default: from the --out suffix .mmd/.dot/.svg/.png, else mermaid)",
    )
    parser.add_argument("--out", metavar="PATH", default=None, help="output file (default: stdout)")
    parser.add_argument(
        "--view",
        choices=["flow", "regions", "workers"],
        default=None,
        help="flow: happy path + cleanup (default); regions: one lifecycle per spec region; "
             "workers: the workers' own clocks (timers, faults, KVPoll states)",
    )
    parser.add_argument(
        "--explored",
        action="store_true",
        help="draw the reachable product-state graph of the compiled table instead",
    )
    parser.add_argument(
        "--coordinator",
        metavar="MODULE:CLASS",
        default=None,
        help="with --explored: draw the state graph the checker explores for this coordinator "
        "(any class with HandoffCoordinator's public API) instead of the compiled table",
    )
    parser.add_argument("--spec", metavar="PATH", default=None, help="spec file (default: spec/handoff.json)")
    parser.add_argument(
        "--update-docs",
        action="store_true",
        help="regenerate docs/protocol.md's Mermaid blocks and docs/diagrams/*.dot, *.svg",
    )
    parser.add_argument(
        "--check-docs", action="store_true", help="exit 1 when the generated docs are stale"
    )
    parser.add_argument(
        "--docs", metavar="DIR", default=None, help="docs directory for --update-docs/--check-docs"
    )


def _error(message: str) -> int:
    print(f"dmocker diagram: error: {message}", file=sys.stderr)
    return 2


def _explored_coordinator(spec: ProtocolSpec, target_text: str, order: HandoffOrder) -> "Diagram":
    """The checker's explored state graph of a (user) coordinator, as a diagram."""
    from dmocker.check import explore, load_target
    from dmocker.check.target import TargetError
    from dmocker.diagrams.graph import diagram_from_graph
    from dmocker.handoff import Monitor

    try:
        target = load_target(target_text)
    except TargetError as exc:
        raise ValueError(str(exc)) from None
    exploration = explore(target, order, Monitor.for_order(spec, order), stop_at_first=False)
    graph = exploration.graph()
    for node, data in graph.nodes(data=True):
        completion = data.get("completion")
        suffix = f"\ncomplete: {completion}" if completion else ""
        data.setdefault("label", f"state {node} (depth {data.get('depth', '?')}){suffix}")
    title = f"{target_text}, {order.value}: explored state graph ({graph.number_of_nodes()} states)"
    return diagram_from_graph(graph, title=title)


def run(args: argparse.Namespace) -> int:
    """Carry out ``dmocker diagram``; returns the exit code."""
    # Imported here so `dmocker --help` stays fast and networkx loads only when drawing.
    from dmocker.diagrams import docs
    from dmocker.diagrams.render import GraphvizFailed, GraphvizMissing
    from dmocker.diagrams.views import OutputFormat, View, build_diagram, output

    try:
        spec: ProtocolSpec = load_spec(args.spec)
    except SpecError as exc:
        return _error(str(exc))
    docs_dir = Path(args.docs) if args.docs else None

    if args.update_docs or args.check_docs:
        if args.out is not None or args.format is not None or args.explored:
            return _error("--update-docs/--check-docs take no --out, --format or --explored")
        if args.update_docs:
            try:
                written = docs.update(spec, docs_dir)
            except docs.DocsError as exc:
                return _error(str(exc))
            except GraphvizMissing as exc:
                return _error(f"Mermaid and DOT updated, SVGs not: {exc}")
            except GraphvizFailed as exc:
                return _error(str(exc))
            for path in written:
                print(f"wrote {path}")
        if args.check_docs:
            problems = docs.stale(spec, docs_dir)
            for problem in problems:
                print(problem, file=sys.stderr)
            if problems:
                print("run `dmocker diagram --update-docs` to regenerate", file=sys.stderr)
                return 1
            print("docs diagrams are current")
        return 0

    fmt = OutputFormat(args.format) if args.format else None
    if fmt is None and args.out not in (None, "-"):
        fmt = OutputFormat.from_suffix(Path(args.out).suffix)
        if fmt is None:
            return _error(
                f"--out {args.out}: cannot tell the format from the suffix "
                "(use .mmd, .dot, .svg or .png, or give --format)"
            )
    fmt = fmt or OutputFormat.MERMAID
    to_stdout = args.out in (None, "-")
    if to_stdout and fmt is OutputFormat.PNG and sys.stdout.isatty():
        return _error("PNG output is binary: give --out FILE.png or redirect stdout")

    if args.explored and args.view is not None:
        return _error("--explored draws the whole product; it takes no --view")
    view = View.EXPLORED if args.explored else View(args.view or "flow")
    if args.coordinator is not None:
        if not args.explored:
            return _error("--coordinator draws an explored graph: add --explored")
        try:
            diagram = _explored_coordinator(spec, args.coordinator, HandoffOrder.parse(args.order))
        except ValueError as exc:
            return _error(str(exc))
    else:
        diagram = build_diagram(spec, HandoffOrder.parse(args.order), view)
    try:
        data = output(diagram, fmt)
    except (GraphvizMissing, GraphvizFailed) as exc:
        return _error(str(exc))
    if to_stdout:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
        return 0
    try:
        write_atomic(args.out, data)
    except OSError as exc:
        return _error(f"--out {args.out}: cannot write: {exc.strerror or exc}")
    print(f"wrote {args.out} ({fmt.value}, {view.value}, {args.order})", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point (``python -m dmocker.cli.diagram``) until the main CLI wires it."""
    parser = argparse.ArgumentParser(prog="dmocker diagram", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
