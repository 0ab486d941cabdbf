"""Sweep axes: parse ``1,2,4`` / ``1..8`` / ``10..40:10`` values and expand the cartesian product.

Why a fixed axis order: a configuration's position in the sweep (and so its row in
``sweep.json``) must not depend on the order flags were typed, the backend or the job count.
Axes are expanded in :data:`AXES` order, each axis's values in the order given; the last axis
varies fastest.
"""

from __future__ import annotations

import enum
import itertools
import math
from dataclasses import dataclass
from typing import TypeAlias, Union

__all__ = ["AXES", "Axis", "AxisKind", "ConfigValue", "GridError", "parse_axis", "expand", "config_label"]

ConfigValue: TypeAlias = Union[int, float, str]
"""One swept value (an int, a float or a name)."""


class GridError(ValueError):
    """A sweep axis that cannot be parsed (the message names the flag)."""


class AxisKind(enum.Enum):
    INT = "int"
    FLOAT = "float"
    NAME = "name"


@dataclass(frozen=True, slots=True)
class Axis:
    """A sweepable replay keyword: its ``dmocker.replay.run`` name, value kind and lower bound."""

    key: str
    kind: AxisKind
    minimum: float | None = None
    exclusive_minimum: bool = False

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")


#: Every sweepable keyword, in expansion order (the replay's keyword names).
AXES: tuple[Axis, ...] = (
    Axis("engine", AxisKind.NAME),
    Axis("router", AxisKind.NAME),
    Axis("prefill_workers", AxisKind.INT, 1),
    Axis("decode_workers", AxisKind.INT, 1),
    Axis("block_size", AxisKind.INT, 1),
    Axis("num_gpu_blocks", AxisKind.INT, 1),
    Axis("max_num_batched_tokens", AxisKind.INT, 1),
    Axis("kv_transfer_bandwidth", AxisKind.FLOAT, 0.0),
    Axis("rate", AxisKind.FLOAT, 0.0, exclusive_minimum=True),
    Axis("arrival_speedup_ratio", AxisKind.FLOAT, 0.0, exclusive_minimum=True),
)

_MAX_VALUES = 10_000  # per axis: a typo like 1..1000000 fails fast instead of filling memory


def _number(axis: Axis, text: str) -> int | float:
    t = text.strip()
    try:
        value: int | float = int(t) if axis.kind is AxisKind.INT else float(t)
    except ValueError:
        what = "an integer" if axis.kind is AxisKind.INT else "a number"
        raise GridError(f"{axis.flag}: {t!r} is not {what}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise GridError(f"{axis.flag}: {t!r} is not a finite number")
    lo = axis.minimum
    if lo is not None and (value < lo or (axis.exclusive_minimum and value == lo)):
        bound = f"> {lo:g}" if axis.exclusive_minimum else f">= {lo:g}"
        raise GridError(f"{axis.flag}: {t} must be {bound}")
    return value


def _range(axis: Axis, text: str) -> list[ConfigValue]:
    """``a..b`` (integers, step 1) or ``a..b:step`` (inclusive of ``b`` when it falls on a step)."""
    body, _, step_text = text.partition(":")
    lo_text, _, hi_text = body.partition("..")
    if not lo_text.strip() or not hi_text.strip():
        raise GridError(f"{axis.flag}: bad range {text!r} (expected A..B or A..B:STEP)")
    lo, hi = _number(axis, lo_text), _number(axis, hi_text)
    if hi < lo:
        raise GridError(f"{axis.flag}: bad range {text!r}: the end is below the start")
    if step_text.strip():
        try:
            step: int | float = int(step_text) if axis.kind is AxisKind.INT else float(step_text)
        except ValueError:
            raise GridError(f"{axis.flag}: bad range step {step_text!r}") from None
    elif axis.kind is AxisKind.INT:
        step = 1
    else:
        raise GridError(f"{axis.flag}: a range of numbers needs a step, e.g. {lo_text}..{hi_text}:{hi_text}")
    if not (isinstance(step, int) or math.isfinite(step)) or step <= 0:
        raise GridError(f"{axis.flag}: bad range step {step_text!r} (must be > 0)")
    count = int(math.floor((hi - lo) / step + 1e-9)) + 1
    if count > _MAX_VALUES:
        raise GridError(f"{axis.flag}: range {text!r} has {count} values (at most {_MAX_VALUES})")
    if axis.kind is AxisKind.INT:
        return [int(lo) + i * int(step) for i in range(count)]
    # Computed from the start each time (no accumulated error), rounded to 9 significant digits.
    return [float(f"{lo + i * step:.9g}") for i in range(count)]


def parse_axis(axis: Axis, text: str) -> tuple[ConfigValue, ...]:
    """Parse one flag's value: comma-separated items, each a value or a range."""
    if not text.strip():
        raise GridError(f"{axis.flag}: empty value")
    values: list[ConfigValue] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise GridError(f"{axis.flag}: empty item in {text!r}")
        if axis.kind is AxisKind.NAME:
            values.append(item.lower())
        elif ".." in item:
            values.extend(_range(axis, item))
        else:
            values.append(_number(axis, item))
    seen: list[ConfigValue] = []
    for v in values:
        if v in seen:
            raise GridError(f"{axis.flag}: value {v!r} is given twice in {text!r}")
        seen.append(v)
    return tuple(values)


def expand(axes: dict[str, tuple[ConfigValue, ...]]) -> list[dict[str, ConfigValue]]:
    """The cartesian product of the given axes, in :data:`AXES` order (last varies fastest)."""
    known = [a.key for a in AXES]
    unknown = sorted(k for k in axes if k not in known)
    if unknown:
        raise GridError(f"not a sweepable key: {', '.join(unknown)} (sweepable: {', '.join(known)})")
    keys = [k for k in known if k in axes]
    return [dict(zip(keys, combo)) for combo in itertools.product(*(axes[k] for k in keys))]


_SHORT = {"prefill_workers": "P", "decode_workers": "D"}


def config_label(config: dict[str, ConfigValue]) -> str:
    """A short human label: ``2P+3D vllm bw=25`` (the P/D split first, then the rest)."""
    parts: list[str] = []
    if "prefill_workers" in config or "decode_workers" in config:
        parts.append("+".join(f"{config[k]}{s}" for k, s in _SHORT.items() if k in config))
    for k, v in config.items():
        if k in _SHORT:
            continue
        parts.append(str(v) if k in ("engine", "router") else f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}")
    return " ".join(parts) if parts else "(base)"
