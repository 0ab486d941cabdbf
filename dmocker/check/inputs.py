"""Environment inputs (what the checker may do to a coordinator) and their JSON form.

An input is one call on the coordinator's public API.  Counterexamples are lists of inputs, so
they have a stable, language-neutral JSON spelling: floats that JSON cannot hold (NaN, +-inf)
are written as the strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, TypeAlias, Union, cast

from dmocker.handoff import (
    FACT_CLASSES,
    DestinationReserved,
    Fact,
    IssuedAction,
    Outcome,
    OutcomeKind,
    SourceHeld,
    StartTransfer,
    TransferTiming,
    TransferTimingMode,
)

JsonScalar: TypeAlias = Union[str, int, float, bool, None]
Json: TypeAlias = Union[JsonScalar, list["Json"], dict[str, "Json"]]


@dataclass(frozen=True, slots=True)
class Start:
    """``coordinator.start()`` (possibly again)."""


@dataclass(frozen=True, slots=True)
class DeliverFact:
    """``coordinator.on_fact(fact)``."""

    fact: Fact


@dataclass(frozen=True, slots=True)
class DeliverOutcome:
    """``coordinator.on_action_outcome(action_id, outcome)``."""

    action_id: int
    outcome: Outcome


EnvInput: TypeAlias = Union[Start, DeliverFact, DeliverOutcome]



class InputFormatError(ValueError):
    """A counterexample file whose steps cannot be decoded; the message names the field."""


def float_to_json(value: float | None) -> Json:
    if value is None:
        return None
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    return float(value)


def float_from_json(value: object, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool):
        raise InputFormatError(f"{where}: expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if value == "NaN":
        return math.nan
    if value == "Infinity":
        return math.inf
    if value == "-Infinity":
        return -math.inf
    raise InputFormatError(f"{where}: expected a number or 'NaN'/'Infinity'/'-Infinity', got {value!r}")


def describe_input(inp: EnvInput) -> str:
    """One short line, as printed in counterexamples."""
    if isinstance(inp, Start):
        return "start()"
    if isinstance(inp, DeliverFact):
        return f"on_fact({describe_fact(inp.fact)})"
    msg = f", {inp.outcome.message!r}" if inp.outcome.message else ""
    return f"on_action_outcome({inp.action_id}, {inp.outcome.kind.value}{msg})"


def describe_fact(fact: Fact) -> str:
    name = type(fact).__name__
    if isinstance(fact, SourceHeld):
        t = fact.transfer_timing
        parts = [t.mode.value, f"prompt={t.full_prompt_tokens}"]
        if t.kv_bytes_per_token is not None:
            parts.append(f"kv_bytes={t.kv_bytes_per_token}")
        if t.bandwidth_gb_s is not None:
            parts.append(f"bw={t.bandwidth_gb_s!r}")
        if t.state_bytes:
            parts.append(f"state_bytes={t.state_bytes}")
        return f"{name}({fact.handoff_id!r}, {' '.join(parts)})"
    if isinstance(fact, DestinationReserved):
        return f"{name}({fact.handoff_id!r}, tokens={fact.transferable_prompt_tokens})"
    return f"{name}({fact.handoff_id!r})"


def describe_issued(issued: IssuedAction) -> str:
    action = issued.action
    if isinstance(action, StartTransfer):
        return f"#{issued.id} StartTransfer(delay_ms={action.delay_ms!r})"
    return f"#{issued.id} {type(action).__name__}"


def input_to_json(inp: EnvInput) -> dict[str, Json]:
    if isinstance(inp, Start):
        return {"input": "start"}
    if isinstance(inp, DeliverOutcome):
        return {
            "input": "outcome",
            "action_id": inp.action_id,
            "kind": inp.outcome.kind.value,
            "message": inp.outcome.message,
        }
    fact = inp.fact
    out: dict[str, Json] = {"input": "fact", "fact": type(fact).__name__, "handoff_id": _id_to_json(fact.handoff_id)}
    if isinstance(fact, SourceHeld):
        t = fact.transfer_timing
        out["transfer_timing"] = {
            "mode": t.mode.value,
            "full_prompt_tokens": t.full_prompt_tokens,
            "kv_bytes_per_token": t.kv_bytes_per_token,
            "bandwidth_gb_s": float_to_json(t.bandwidth_gb_s),
            "state_bytes": t.state_bytes,
        }
    elif isinstance(fact, DestinationReserved):
        out["transferable_prompt_tokens"] = fact.transferable_prompt_tokens
    return out


def _id_to_json(value: object) -> Json:
    if isinstance(value, (str, int)) and not isinstance(value, bool):
        return value
    return repr(value)


def _int(obj: dict[str, object], key: str, where: str, optional: bool = False) -> int | None:
    value = obj.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputFormatError(f"{where}.{key}: expected an integer, got {value!r}")
    return value


def input_from_json(raw: object, where: str) -> EnvInput:
    """Decode one step; ``where`` (e.g. ``file.json: steps[3]``) prefixes every error."""
    if not isinstance(raw, dict):
        raise InputFormatError(f"{where}: expected an object, got {type(raw).__name__}")
    kind = raw.get("input")
    if kind == "start":
        return Start()
    if kind == "outcome":
        action_id = _int(raw, "action_id", where)
        assert action_id is not None
        kind_text = raw.get("kind")
        try:
            okind = OutcomeKind(kind_text)
        except ValueError:
            raise InputFormatError(
                f"{where}.kind: unknown outcome kind {kind_text!r} (expected one of "
                + ", ".join(k.value for k in OutcomeKind)
                + ")"
            ) from None
        message = raw.get("message", "")
        if not isinstance(message, str):
            raise InputFormatError(f"{where}.message: expected a string, got {message!r}")
        return DeliverOutcome(action_id, Outcome(okind, message))
    if kind == "fact":
        name = raw.get("fact")
        cls = FACT_CLASSES.get(name) if isinstance(name, str) else None
        if cls is None:
            raise InputFormatError(f"{where}.fact: unknown fact {name!r} (expected one of {', '.join(FACT_CLASSES)})")
        hid = raw.get("handoff_id")
        if hid is None:
            raise InputFormatError(f"{where}.handoff_id: missing")
        if cls is SourceHeld:
            t = raw.get("transfer_timing")
            tw = f"{where}.transfer_timing"
            if not isinstance(t, dict):
                raise InputFormatError(f"{tw}: expected an object, got {t!r}")
            try:
                mode = TransferTimingMode(t.get("mode"))
            except ValueError:
                raise InputFormatError(f"{tw}.mode: unknown mode {t.get('mode')!r}") from None
            full = _int(t, "full_prompt_tokens", tw)
            assert full is not None
            kv = _int(t, "kv_bytes_per_token", tw, optional=True)
            state = _int(t, "state_bytes", tw, optional=True)
            bw = float_from_json(t.get("bandwidth_gb_s"), f"{tw}.bandwidth_gb_s")
            return DeliverFact(SourceHeld(hid, TransferTiming(mode, full, kv, bw, state or 0)))
        if cls is DestinationReserved:
            tokens = _int(raw, "transferable_prompt_tokens", where)
            assert tokens is not None
            return DeliverFact(DestinationReserved(hid, tokens))
        fact: Fact = cast(Callable[[object], Fact], cls)(hid)  # the payload-free facts
        return DeliverFact(fact)
    raise InputFormatError(f"{where}.input: expected 'start', 'fact' or 'outcome', got {kind!r}")
