"""Freezing a process's startup heap out of the garbage collector's full passes."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from shadowtutor.heap import freeze_startup_heap, startup_heap_frozen


class Cycle:
    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def unfrozen() -> Iterator[None]:
    yield
    gc.unfreeze()


@pytest.mark.usefixtures("unfrozen")
def test_garbage_is_collected_first_and_the_live_objects_leave_the_collectors_passes() -> None:
    garbage, alive = Cycle(), Cycle()
    collected = weakref.ref(garbage)
    del garbage  # unreachable, in a cycle: the collector's to free, not to keep for ever
    frozen = freeze_startup_heap()
    assert collected() is None
    assert frozen > 10_000 and gc.get_freeze_count() > 10_000  # this interpreter's modules and the test's objects
    assert not any(o is alive for o in gc.get_objects())  # no pass scans it any more


def test_frozen_for_a_block_only() -> None:
    with startup_heap_frozen() as frozen:
        assert frozen > 10_000 and gc.get_freeze_count() > 10_000
    assert gc.get_freeze_count() == 0
