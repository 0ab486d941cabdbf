"""``collect_rarely`` (dmocker/replay/gc_quiet.py): a run changes the cyclic collector's
settings only while it runs, and leaves a caller's own settings alone."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from dmocker.replay import ReplayConfig, run
from dmocker.replay.gc_quiet import YOUNG_THRESHOLD, collect_rarely


@pytest.fixture(autouse=True)
def _restore_gc() -> Iterator[None]:
    threshold, enabled = gc.get_threshold(), gc.isenabled()
    yield
    gc.set_threshold(*threshold)
    gc.unfreeze()
    (gc.enable if enabled else gc.disable)()


def test_settings_hold_during_the_call_and_are_restored_after() -> None:
    gc.set_threshold(700, 10, 10)
    seen: list[tuple[tuple[int, int, int], int]] = []

    @collect_rarely
    def body() -> str:
        seen.append((gc.get_threshold(), gc.get_freeze_count()))
        return "done"

    assert body() == "done"
    assert seen[0][0] == (YOUNG_THRESHOLD, 10, 10)
    assert seen[0][1] > 0  # what existed before the call is frozen
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_restored_when_the_call_raises() -> None:
    gc.set_threshold(700, 10, 10)

    @collect_rarely
    def body() -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError):
        body()
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_a_caller_that_disabled_the_collector_or_froze_objects_is_left_alone() -> None:
    gc.set_threshold(700, 10, 10)
    gc.disable()
    seen: list[tuple[int, int, int]] = []

    @collect_rarely
    def body() -> None:
        seen.append(gc.get_threshold())

    body()
    assert seen == [(700, 10, 10)]
    assert not gc.isenabled()

    gc.enable()
    gc.freeze()
    frozen = gc.get_freeze_count()
    body()
    assert seen[-1] == (YOUNG_THRESHOLD, 10, 10)
    assert gc.get_freeze_count() == frozen  # the caller's frozen objects stay frozen


def test_nested_calls_keep_the_outer_settings() -> None:
    gc.set_threshold(700, 10, 10)
    inner: list[int] = []

    @collect_rarely
    def child() -> None:
        inner.append(gc.get_threshold()[0])

    @collect_rarely
    def parent() -> None:
        child()
        inner.append(gc.get_threshold()[0])

    parent()
    assert inner == [YOUNG_THRESHOLD, YOUNG_THRESHOLD]
    assert gc.get_threshold() == (700, 10, 10)


def test_a_replay_leaves_the_process_settings_as_they_were() -> None:
    gc.set_threshold(700, 10, 10)
    report = run(ReplayConfig.from_values({"synthetic": 30, "prefill_workers": 1, "decode_workers": 1}))
    assert report.summary["completed_requests"] == 30
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


_IMPORT_PROBE = """
import gc, sys
passes = []
gc.callbacks.append(lambda phase, info: passes.append(info["generation"]) if phase == "start" else None)
if sys.argv[1] == "off":
    gc.disable()
import dmocker.replay
print(len(passes), gc.isenabled(), gc.get_freeze_count(), gc.get_count()[0] < 700)
"""


@pytest.mark.parametrize("collector", ["on", "off"])
def test_importing_the_replay_runs_no_collection_and_leaves_the_setting(collector: str) -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _IMPORT_PROBE, collector], capture_output=True, text=True,
                         check=True).stdout.split()
    # no pass over the import's objects (~60 without the pause; one may come from compiling a
    # stale .pyc before the package runs), none owed right after it, the caller's setting kept,
    # nothing left frozen
    assert int(out[0]) <= 1
    assert out[1:] == [str(collector == "on"), "0", "True"]
