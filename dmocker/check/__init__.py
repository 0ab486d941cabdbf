"""Exhaustive checking of handoff coordinators (``dmocker check``).

Explores every state of a coordinator composed with an adversarial environment (breadth-first,
networkx graph), checks the spec's safety invariants on the fly and decides deadlock freedom,
termination under fairness and cleanup liveness on the finished graph.  See docs/checker.md.

Typical use::

    from dmocker.check import check, load_target
    report = check(load_target("mypkg.coord:MyCoordinator"))
    assert report.exit_code == 0, report.first_failure()
"""

from dmocker.check.core import CheckReport, OrderReport, PropertyResult, Status, check, check_order
from dmocker.check.counterexample import Counterexample, load_counterexample, run_steps
from dmocker.check.explore import DEFAULT_MAX_STATES, DEFAULT_STEP_BOUND, Exploration, explore
from dmocker.check.inputs import DeliverFact, DeliverOutcome, EnvInput, Start
from dmocker.check.invariants import API_CONTRACT, Monitor, SafetyProperty, Violation, safety_properties
from dmocker.check.mutants import Mutant, MutantResult, kill_table, load_catalogue, run_mutant
from dmocker.check.report import render_json, render_junit, render_text
from dmocker.check.target import Target, TargetError, load_target, target_from_factory
from dmocker.check.values import DEFAULT_VALUES, InitialConfig, ValueSet

__all__ = [
    "API_CONTRACT",
    "CheckReport",
    "Counterexample",
    "DEFAULT_MAX_STATES",
    "DEFAULT_STEP_BOUND",
    "DEFAULT_VALUES",
    "DeliverFact",
    "DeliverOutcome",
    "EnvInput",
    "Exploration",
    "InitialConfig",
    "Monitor",
    "Mutant",
    "MutantResult",
    "OrderReport",
    "PropertyResult",
    "SafetyProperty",
    "Start",
    "Status",
    "Target",
    "TargetError",
    "ValueSet",
    "Violation",
    "check",
    "check_order",
    "explore",
    "kill_table",
    "load_catalogue",
    "load_counterexample",
    "load_target",
    "render_json",
    "render_junit",
    "render_text",
    "run_mutant",
    "run_steps",
    "safety_properties",
    "target_from_factory",
]
