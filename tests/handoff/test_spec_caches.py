"""Everything derived from a spec (tables, coordinator lookups, projections) belongs to that spec.

Derived data used to be cached by ``id(spec)``: once a spec was garbage-collected, a new spec
could get the same id and receive the old one's table.  Each spec below differs only in its
``spec_version`` (which the compiled table records), and garbage is collected between them so
that ids are reused.
"""

from __future__ import annotations

import gc
import json

from dmocker.conformance.projection import projection_for
from dmocker.handoff import HandoffCoordinator, HandoffOrder
from dmocker.handoff.spec import default_spec_path, parse_spec
from dmocker.handoff.table import CompiledTable, compile_table

RAW = json.loads(default_spec_path().read_text(encoding="utf-8"))


def _spec(version: str):  # type: ignore[no-untyped-def]
    doc = dict(RAW, spec_version=version)
    return parse_spec(doc, f"<spec {version}>")


def test_each_spec_gets_its_own_table_after_garbage_collection() -> None:
    wrong: list[str] = []
    for n in range(50):
        version = f"test-{n}"
        spec = _spec(version)
        for order in HandoffOrder:
            if compile_table(spec, order).spec_version != version:
                wrong.append(f"compile_table {version} {order.value}")
            coordinator = HandoffCoordinator("h", order, spec=spec)
            if coordinator.table.spec_version != version:
                wrong.append(f"coordinator {version} {order.value}")
        del spec, coordinator
        gc.collect()
    assert wrong == []


def test_projection_follows_its_spec() -> None:
    for n in range(20):
        spec = _spec(f"p-{n}")
        projection = projection_for(HandoffOrder.SOURCE_FIRST, spec)
        assert projection is projection_for(HandoffOrder.SOURCE_FIRST, spec)  # still cached per spec
        del spec, projection
        gc.collect()


def test_derived_data_is_cached_per_spec_object() -> None:
    spec = _spec("same")
    assert compile_table(spec, HandoffOrder.SOURCE_FIRST) is compile_table(spec, HandoffOrder.SOURCE_FIRST)
    a = HandoffCoordinator("a", HandoffOrder.SOURCE_FIRST, spec=spec)
    b = HandoffCoordinator("b", HandoffOrder.SOURCE_FIRST, spec=spec)
    assert a.table is b.table


def test_collected_specs_free_their_tables() -> None:
    def live_tables() -> int:
        HandoffCoordinator("h", HandoffOrder.SOURCE_FIRST)  # the last-used lookup: the default spec
        gc.collect()
        return sum(type(o) is CompiledTable for o in gc.get_objects())

    before = live_tables()
    for n in range(10):
        spec = _spec(f"freed-{n}")
        for order in HandoffOrder:
            HandoffCoordinator("h", order, spec=spec)
            projection_for(order, spec)
        del spec
    assert live_tables() <= before  # no global cache keeps a collected spec's tables alive


def test_loaded_specs_cache_is_bounded(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from dmocker.handoff import load_spec
    from dmocker.handoff.spec import _CACHE, _CACHE_SIZE

    for n in range(_CACHE_SIZE + 3):
        path = tmp_path / f"spec{n}.json"
        path.write_text(json.dumps(dict(RAW, spec_version=f"file-{n}")), encoding="utf-8")
        assert load_spec(path).spec_version == f"file-{n}"
    assert len(_CACHE) <= _CACHE_SIZE
