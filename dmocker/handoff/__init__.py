"""Public API of the handoff protocol: value types, the spec, the compiled table, the monitor and
the coordinator.

Drivers and consumers (replay, checker, Hypothesis kit, conformance, diagrams, CLI, benches)
import only from here.  The modules that implement it are private by name (``_spec``,
``_table``, ``_coordinator``, ...) and may change shape freely; a test fails if a consumer
package imports one of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dmocker.handoff._coordinator import HandoffCoordinator
from dmocker.handoff._eventlog import EventLogWriter
from dmocker.handoff._registry import ACTION_CLASSES, FACT_CLASSES, terminal_fact_classes
from dmocker.handoff._spec import (
    OBSERVABLE_SIDES,
    EngineEntry,
    Invariant,
    WorkerKind,
    ProtocolSpec,
    Region,
    SpecError,
    Transition,
    derived,
)
from dmocker.handoff._spec_load import default_spec_path, has_workers, load_spec, load_workers, order_for_engine, success_outcomes
from dmocker.handoff._table import STEP_TAG, CompiledTable, NotApplicable, Reject, Step, compile_table
from dmocker.handoff._types import (
    Action,
    ActivateDestination,
    CancelDestination,
    CancelSource,
    Canceled,
    Complete,
    Completion,
    DestinationReserved,
    Fact,
    TerminalFact,
    Failed,
    HandoffError,
    HandoffErrorKind,
    HandoffId,
    HandoffOrder,
    IssuedAction,
    Outcome,
    OutcomeKind,
    ReleaseSource,
    ReserveDestination,
    SourceHeld,
    StartTransfer,
    SubmitPrefill,
    TimedOut,
    TransferCompleted,
    TransferTiming,
    TransferTimingMode,
)

if TYPE_CHECKING:
    from dmocker.handoff._fair import DueFact, FairEnvironment, fair_environment
    from dmocker.handoff._machines import HandoffChart
    from dmocker.handoff._monitor import InvariantError, Monitor, MonitorState, StepEvent, Violation
    from dmocker.handoff._workers import (
        ClockProperty,
        Configuration,
        Guard,
        Machine,
        MoveKind,
        PropertyKind,
        Rule,
        WorkerState,
        WorkersSpec,
        parse_workers,
    )

#: Names imported on first use (module ``__getattr__``): the invariant monitor, the fair
#: environment and the workers' machines serve the checker, the Hypothesis kit, the fuzzer, the
#: diagrams and monitored coordinators, and a replay with the built-in coordinator loads none.
_LAZY = {
    "DueFact": "_fair", "FairEnvironment": "_fair", "fair_environment": "_fair",
    "InvariantError": "_monitor", "Monitor": "_monitor", "MonitorState": "_monitor",
    "StepEvent": "_monitor", "Violation": "_monitor",
    **{name: "_workers" for name in ("ClockProperty", "Configuration", "Guard", "Machine", "MoveKind",
                                     "PropertyKind", "Rule", "WorkerState", "WorkersSpec", "parse_workers")},
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def build_chart(spec: ProtocolSpec, order: HandoffOrder) -> type[HandoffChart]:
    """The python-statemachine chart class of ``order``, generated from the spec.

    Imported on first use: python-statemachine is only needed by whoever builds a chart.
    """
    from dmocker.handoff._machines import build_chart as _build

    return _build(spec, order)


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
    "has_workers",
    "load_workers",
    "parse_workers",
    "ACTION_CLASSES",
    "FACT_CLASSES",
    "TerminalFact",
    "terminal_fact_classes",
    "OBSERVABLE_SIDES",
    "Action",
    "ActivateDestination",
    "CancelDestination",
    "CancelSource",
    "Canceled",
    "CompiledTable",
    "Complete",
    "Completion",
    "DestinationReserved",
    "DueFact",
    "EngineEntry",
    "EventLogWriter",
    "Fact",
    "FairEnvironment",
    "Failed",
    "HandoffCoordinator",
    "HandoffError",
    "HandoffErrorKind",
    "HandoffId",
    "HandoffOrder",
    "Invariant",
    "WorkerKind",
    "InvariantError",
    "IssuedAction",
    "Monitor",
    "MonitorState",
    "NotApplicable",
    "Outcome",
    "OutcomeKind",
    "ProtocolSpec",
    "Region",
    "Reject",
    "ReleaseSource",
    "ReserveDestination",
    "STEP_TAG",
    "SourceHeld",
    "SpecError",
    "StartTransfer",
    "Step",
    "StepEvent",
    "SubmitPrefill",
    "TimedOut",
    "TransferCompleted",
    "TransferTiming",
    "TransferTimingMode",
    "Transition",
    "Violation",
    "build_chart",
    "compile_table",
    "default_spec_path",
    "derived",
    "fair_environment",
    "load_spec",
    "order_for_engine",
    "success_outcomes",
]
