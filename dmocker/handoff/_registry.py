"""The one registry of action and fact classes: spec name -> Python class.

The spec names the actions and facts; this module says which class carries each one.  Every
consumer that turns a name into a class or back (the coordinator, the checker, the Hypothesis
kit, the replay) reads it here, and the spec loader checks it against the spec: every spec
action and fact has a class and every class a spec entry (:func:`class_problems`), so a name
added on one side only fails at load instead of somewhere downstream.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Final, get_args

from dmocker.handoff._types import (
    Action,
    ActivateDestination,
    CancelDestination,
    CancelSource,
    Canceled,
    Complete,
    DestinationReserved,
    Fact,
    Failed,
    ReleaseSource,
    ReserveDestination,
    SourceHeld,
    StartTransfer,
    SubmitPrefill,
    TerminalFact,
    TimedOut,
    TransferCompleted,
)

_ACTIONS: tuple[type[Action], ...] = (
    SubmitPrefill,
    ReserveDestination,
    StartTransfer,
    ActivateDestination,
    ReleaseSource,
    CancelSource,
    CancelDestination,
    Complete,
)
_FACTS: tuple[type[Fact], ...] = (SourceHeld, DestinationReserved, TransferCompleted, Failed, TimedOut, Canceled)

#: Action name (as the spec spells it) -> its class.  A class is named after its spec entry.
ACTION_CLASSES: Final[Mapping[str, type[Action]]] = MappingProxyType({cls.__name__: cls for cls in _ACTIONS})
#: Fact name -> its class.
FACT_CLASSES: Final[Mapping[str, type[Fact]]] = MappingProxyType({cls.__name__: cls for cls in _FACTS})
#: Class -> spec name (actions and facts).
NAME_OF_CLASS: Final[Mapping[type, str]] = MappingProxyType(
    {**{cls: name for name, cls in ACTION_CLASSES.items()}, **{cls: name for name, cls in FACT_CLASSES.items()}}
)


def class_problems(actions: Sequence[str], facts: Sequence[str]) -> list[str]:
    """What differs between the spec's action and fact names and the registry (empty: none)."""
    problems: list[str] = []
    for what, names, registry in (("action", actions, ACTION_CLASSES), ("fact", facts, FACT_CLASSES)):
        missing = [n for n in names if n not in registry]
        extra = [n for n in registry if n not in names]
        if missing:
            problems.append(f"spec {what}s without a class in dmocker.handoff: {missing}")
        if extra:
            problems.append(f"{what} classes of dmocker.handoff the spec does not declare: {extra}")
    return problems


def terminal_fact_classes(terminal_facts: Sequence[str]) -> tuple[type[TerminalFact], ...]:
    """The classes of the spec's terminal facts (``ProtocolSpec.terminal_facts``), in its order.

    ValueError when the spec calls terminal a fact that :data:`TerminalFact` does not list."""
    known: tuple[type[TerminalFact], ...] = get_args(TerminalFact)
    out: list[type[TerminalFact]] = []
    for name in terminal_facts:
        match = [cls for cls in known if cls.__name__ == name]
        if not match:
            raise ValueError(f"terminal fact {name!r} of the spec is not a TerminalFact of dmocker.handoff")
        out.append(match[0])
    return tuple(out)


__all__ = ["ACTION_CLASSES", "FACT_CLASSES", "NAME_OF_CLASS", "class_problems", "terminal_fact_classes"]
