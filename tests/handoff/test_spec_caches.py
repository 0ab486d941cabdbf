"""Everything derived from a spec (tables, coordinator lookups, projections) belongs to that spec.

Derived data used to be cached by ``id(spec)``: once a spec was garbage-collected, a new spec
could get the same id and receive the old one's table.  Each spec below differs only in its
``spec_version`` (which the compiled table records), and garbage is collected between them so
that ids are reused.
"""

from __future__ import annotations

import gc
import json

from pathlib import Path

import pytest

from dmocker.conformance.projection import projection_for
from dmocker.handoff import (
    CompiledTable,
    HandoffCoordinator,
    HandoffOrder,
    ProtocolSpec,
    compile_table,
    default_spec_path,
    load_spec,
)

RAW = json.loads(default_spec_path().read_text(encoding="utf-8"))


@pytest.fixture
def make_spec(tmp_path: Path):  # type: ignore[no-untyped-def]
    def make(version: str) -> ProtocolSpec:
        path = tmp_path / f"{version}.json"
        path.write_text(json.dumps(dict(RAW, spec_version=version)), encoding="utf-8")
        return load_spec(path)

    return make


@pytest.mark.slow  # a full collection per spec, over the whole test session's heap
def test_each_spec_gets_its_own_table_after_garbage_collection(make_spec) -> None:  # type: ignore[no-untyped-def]
    wrong: list[str] = []
    for n in range(50):
        version = f"test-{n}"
        spec = make_spec(version)
        for order in HandoffOrder:
            if compile_table(spec, order).spec_version != version:
                wrong.append(f"compile_table {version} {order.value}")
            coordinator = HandoffCoordinator("h", order, spec=spec)
            if coordinator.table.spec_version != version:
                wrong.append(f"coordinator {version} {order.value}")
        del spec, coordinator
        gc.collect()
    assert wrong == []


@pytest.mark.slow
def test_projection_follows_its_spec(make_spec) -> None:  # type: ignore[no-untyped-def]
    for n in range(20):
        spec = make_spec(f"p-{n}")
        projection = projection_for(HandoffOrder.SOURCE_FIRST, spec)
        assert projection is projection_for(HandoffOrder.SOURCE_FIRST, spec)  # still cached per spec
        del spec, projection
        gc.collect()


def test_derived_data_is_cached_per_spec_object(make_spec) -> None:  # type: ignore[no-untyped-def]
    spec = make_spec("same")
    assert compile_table(spec, HandoffOrder.SOURCE_FIRST) is compile_table(spec, HandoffOrder.SOURCE_FIRST)
    a = HandoffCoordinator("a", HandoffOrder.SOURCE_FIRST, spec=spec)
    b = HandoffCoordinator("b", HandoffOrder.SOURCE_FIRST, spec=spec)
    assert a.table is b.table


@pytest.mark.slow
def test_collected_specs_free_their_tables(make_spec) -> None:  # type: ignore[no-untyped-def]
    def live_tables() -> int:
        HandoffCoordinator("h", HandoffOrder.SOURCE_FIRST)  # the last-used lookup: the default spec
        gc.collect()
        return sum(type(o) is CompiledTable for o in gc.get_objects())

    before = live_tables()
    for n in range(30):
        spec = make_spec(f"freed-{n}")
        for order in HandoffOrder:
            HandoffCoordinator("h", order, spec=spec)
            projection_for(order, spec)
        del spec
    # no global cache keeps a dropped spec's tables alive: only load_spec's few recent specs
    assert live_tables() - before <= 8 * len(HandoffOrder)


@pytest.mark.slow
def test_loaded_specs_cache_is_bounded(make_spec) -> None:  # type: ignore[no-untyped-def]
    def live_specs() -> int:
        gc.collect()
        return sum(type(o) is ProtocolSpec for o in gc.get_objects())

    before = live_specs()
    for n in range(30):
        assert make_spec(f"file-{n}").spec_version == f"file-{n}"
    assert live_specs() - before <= 8  # load_spec keeps only the most recent few
