"""Sweep axes: parse ``1,2,4`` / ``1..8`` / ``10..40:10`` values and expand the cartesian product.

An axis is any field of the replay's configuration, named as ``ReplayConfig.with_values`` takes
it: a flag name (``prefill_workers``; ``max_num_seqs`` sets both pools) or a dotted path
(``decode.max_num_seqs``); its kind and lower bound are the field's.  :data:`AXES` are the
fields with a sweep flag of their own (``--prefill-workers 1..4``); any other is given with
``--vary NAME=VALUES``.

Why a fixed axis order: a configuration's position in the sweep (and so its row in
``sweep.json``) must not depend on the order flags were typed, the backend or the job count.
Axes are expanded in :data:`AXES` order, then the others in the configuration's field order,
each axis's values in the order given; the last axis varies fastest.
"""

from __future__ import annotations

import enum
import itertools
import math
from dataclasses import dataclass
from typing import TypeAlias, Union

from dmocker.replay.config import ConfigError, axis_field, field_paths, resolve_name

__all__ = ["AXES", "Axis", "AxisKind", "ConfigValue", "GridError", "axis_for", "parse_axis", "expand",
           "config_label", "gpu_shapes", "SHAPE_KEYS"]

ConfigValue: TypeAlias = Union[bool, int, float, str]
"""One swept value (a number, a name or a switch)."""


class GridError(ValueError):
    """A sweep axis that cannot be parsed (the message names the flag)."""


class AxisKind(enum.Enum):
    INT = "int"
    FLOAT = "float"
    BOOL = "bool"
    NAME = "name"


@dataclass(frozen=True, slots=True)
class Axis:
    """A swept configuration field: its name, value kind, lower bound and how it was given."""

    key: str
    kind: AxisKind
    minimum: float | None = None
    exclusive_minimum: bool = False
    vary: bool = False  # given as ``--vary KEY=...`` (else by its own flag)

    @property
    def flag(self) -> str:
        return f"--vary {self.key}" if self.vary else "--" + self.key.replace("_", "-")


#: The fields with a sweep flag of their own, in expansion order (their flag names).
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
_BY_KEY = {a.key: a for a in AXES}


def axis_for(name: str) -> Axis:
    """The axis of configuration field ``name`` (a flag name or a dotted path), as ``--vary``
    gives it; :class:`GridError` when there is no such field or it cannot be swept."""
    try:
        paths = resolve_name(name)
    except ConfigError as exc:
        raise GridError(f"--vary {name}: {exc.detail}") from None
    try:
        kind_name, bound = axis_field(paths[0])
    except ConfigError as exc:
        raise GridError(f"--vary {name}: {exc.detail}") from None
    kind = AxisKind(kind_name)
    if bound is None:
        return Axis(name, kind, vary=True)
    return Axis(name, kind, bound.minimum, bound.exclusive, vary=True)

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
            values.append(item.lower() if axis.key == "engine" else item)
        elif axis.kind is AxisKind.BOOL:
            low = item.lower()
            if low not in ("true", "false"):
                raise GridError(f"{axis.flag}: {item!r} is not true or false")
            values.append(low == "true")
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


def axis_order(key: str) -> tuple[int, int]:
    """Where axis ``key`` expands: :data:`AXES` first, then by the field's place in the config."""
    if key in _BY_KEY:
        return (0, AXES.index(_BY_KEY[key]))
    try:
        first = resolve_name(key)[0]
    except ConfigError:
        raise GridError(f"--vary {key}: no such configuration field or flag name") from None
    order = field_paths()
    return (1, order.index(first) if first in order else len(order))


def expand(axes: dict[str, tuple[ConfigValue, ...]]) -> list[dict[str, ConfigValue]]:
    """The cartesian product of the given axes, in :func:`axis_order` (last varies fastest)."""
    keys = sorted(axes, key=axis_order)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(axes[k] for k in keys))]


#: The fields a cluster shape sets (``--gpus``): none of them may be swept beside it.
SHAPE_KEYS = ("mode", "workers", "prefill_workers", "decode_workers")


def gpu_shapes(counts: tuple[ConfigValue, ...], gpus_per_worker: int = 1) -> list[dict[str, ConfigValue]]:
    """For each GPU count N (``gpus_per_worker`` GPUs a worker: the tensor-parallel size), its
    N / gpus_per_worker workers aggregated, then every prefill/decode split of them (1P first),
    so one sweep compares them at equal cost."""
    shapes: list[dict[str, ConfigValue]] = []
    for g in counts:
        if isinstance(g, bool) or not isinstance(g, int) or g % gpus_per_worker or g // gpus_per_worker < 2:
            raise GridError(f"--gpus: a GPU count must be a multiple of the {gpus_per_worker} GPU(s) of a worker "
                            f"that makes at least 2 workers (one prefill, one decode), got {g!r}")
        n = g // gpus_per_worker
        shapes.append({"mode": "agg", "workers": n})
        shapes.extend({"mode": "disagg", "prefill_workers": p, "decode_workers": n - p} for p in range(1, n))
    return shapes


_SHORT = {"prefill_workers": "P", "decode_workers": "D"}
_SAME = {"cluster.prefill_workers": "prefill_workers", "cluster.decode_workers": "decode_workers",
         "cluster.engine": "engine", "router.name": "router", "cluster.mode": "mode", "cluster.workers": "workers"}


def config_label(config: dict[str, ConfigValue]) -> str:
    """A short human label: ``2P+3D vllm bw=25`` (the P/D split first, then the rest)."""
    config = {_SAME.get(k, k): v for k, v in config.items()}
    parts: list[str] = []
    if config.get("mode") == "agg":  # one pool: its size, and no P/D split
        parts.append(f"{config.get('workers', '?')} agg")
        config = {k: v for k, v in config.items() if k not in SHAPE_KEYS}
    else:  # the aggregated pool's size means nothing to a disaggregated cluster
        config.pop("mode", None)
        config.pop("workers", None)
    if "prefill_workers" in config or "decode_workers" in config:
        parts.append("+".join(f"{config[k]}{s}" for k, s in _SHORT.items() if k in config))
    for k, v in config.items():
        if k in _SHORT:
            continue
        if k in ("engine", "router"):
            parts.append(str(v))
        else:
            parts.append(f"{k}={v:g}" if isinstance(v, float) else f"{k}={str(v).lower() if isinstance(v, bool) else v}")
    return " ".join(parts) if parts else "(base)"
