"""Turn a ``--router`` value into one router per pool, and check what users plug in.

Accepted values: ``round-robin`` (default), ``kv`` (the KV-aware router), or
``MODULE:CLASS`` naming a class that implements :class:`~.protocol.Router`; it is built as
``CLASS(context)`` with the pool's :class:`~.protocol.RouterContext` (a ``RouterConfig`` is
passed as a second argument when the class accepts one, i.e. subclasses of ``KvRouter``).
Every failure is a ``ValueError`` naming the value and what is wrong with it.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass

from .config import RouterConfig
from .kv_router import KvRouter
from .context import RouterContext
from .protocol import Router
from .round_robin import RoundRobin

__all__ = ["RouterSpec", "parse_router"]

_REQUIRED = ("route", "on_kv_events", "on_prefill_complete", "on_free", "add_worker", "remove_worker",
             "overlap_tokens")


@dataclass(frozen=True, slots=True)
class RouterSpec:
    """A parsed ``--router`` value: its report label and how to build each pool's router."""

    mode: str  # "round_robin", "kv_router" or "MODULE:CLASS"
    factory: type

    def build(self, context: RouterContext, config: RouterConfig) -> Router:
        if self.factory is RoundRobin:
            return RoundRobin(context)
        make: Callable[..., object] = self.factory
        if issubclass(self.factory, KvRouter):
            router = make(context, config)
        else:
            try:
                router = make(context)
            except Exception as exc:
                raise ValueError(f"router {self.mode}: building it for the {context.pool.value} pool failed: "
                                 f"{type(exc).__name__}: {exc}") from exc
        missing = [m for m in _REQUIRED if not callable(getattr(router, m, None))]
        if missing or not isinstance(getattr(router, "wants_kv_events", None), bool):
            what = ", ".join(missing) if missing else "wants_kv_events (a bool)"
            raise ValueError(f"router {self.mode} does not implement the Router protocol: missing {what}")
        assert isinstance(router, Router)
        return router


def parse_router(value: str) -> RouterSpec:
    """``round-robin`` | ``kv`` | ``MODULE:CLASS`` -> :class:`RouterSpec` (``ValueError`` if bad)."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"router must be 'round-robin', 'kv' or MODULE:CLASS, got {value!r}")
    text = value.strip()
    key = text.lower().replace("_", "-")
    if key in ("round-robin", "roundrobin", "rr"):
        return RouterSpec("round_robin", RoundRobin)
    if key in ("kv", "kv-router"):
        return RouterSpec("kv_router", KvRouter)
    if ":" not in text:
        raise ValueError(f"unknown router {value!r}: expected 'round-robin', 'kv' or MODULE:CLASS")
    module_name, _, class_name = text.partition(":")
    if not module_name or not class_name:
        raise ValueError(f"router {value!r}: expected MODULE:CLASS")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ValueError(f"router {value!r}: cannot import module {module_name!r}: {type(exc).__name__}: {exc}") from None
    obj = module
    for part in class_name.split("."):
        if not hasattr(obj, part):
            raise ValueError(f"router {value!r}: module {module_name!r} has no attribute {class_name!r}")
        obj = getattr(obj, part)
    if not inspect.isclass(obj):
        raise ValueError(f"router {value!r}: {class_name!r} is not a class")
    return RouterSpec(text, obj)
