"""Run a replay with CPython's cyclic garbage collector out of the way.

Why: a replay allocates and frees millions of small objects (passes, actions, events) and keeps
tens of thousands alive (requests in flight, the imported modules).  With the default thresholds
(700, 10, 10) the collector runs a young-generation pass every 700 net allocations and a full pass
over every live object every few hundred thousand (a measurable share of a run:
docs/performance.md), and it finds nothing: the replay's own objects form no reference cycles (``gc.collect()`` after a run finds ~30 objects, the report's).

So for the duration of a run the objects that exist before it (modules, classes, the spec) are
moved to the permanent generation (``gc.freeze``: never traversed again) and the young
generation's threshold is raised.  The collector stays enabled: a user's coordinator or router
that does create cycles still has them collected, just less often.  Both settings are restored
afterwards, so a caller's process is left as it was.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from typing import ParamSpec, TypeVar

__all__ = ["YOUNG_THRESHOLD", "collect_rarely"]

YOUNG_THRESHOLD = 50_000  # net allocations between young-generation passes during a run

_P = ParamSpec("_P")
_R = TypeVar("_R")


def collect_rarely(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """``fn`` with the objects that exist before it frozen and the young threshold raised while
    it runs.  A nested call, a caller that disabled the collector and a caller's own frozen
    objects are left alone."""

    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        before = gc.get_threshold()
        if not gc.isenabled() or before[0] >= YOUNG_THRESHOLD:
            return fn(*args, **kwargs)  # disabled by the caller, or already inside a run
        freeze = gc.get_freeze_count() == 0  # a caller's own frozen objects stay frozen
        if freeze:
            gc.freeze()
        gc.set_threshold(YOUNG_THRESHOLD, before[1], before[2])
        try:
            return fn(*args, **kwargs)
        finally:
            gc.set_threshold(*before)
            if freeze:
                gc.unfreeze()

    return wrapper
