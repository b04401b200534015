"""A long-running process's startup heap, kept out of the cyclic garbage collector's full passes."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


def freeze_startup_heap() -> int:
    """Collect garbage, then move every object alive now into the collector's permanent generation;
    returns how many objects that generation holds.

    A process calls it once, when its imports and models are loaded. A full pass of the collector
    otherwise scans them all (some 400,000 objects once torch is imported) and pauses whichever
    thread triggered it for a few hundred milliseconds, every few batches of the distillation
    engine. Frozen objects are still freed by reference counting; only reference cycles among them
    are never collected, so a process that replaces its startup objects (reloading its models)
    should not rely on this to free them.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


@contextlib.contextmanager
def startup_heap_frozen() -> Iterator[int]:
    """:func:`freeze_startup_heap` for the block (a command run inside a longer-lived process, a
    benchmark that measures as the server runs), yielding the objects frozen; they go back to the
    collector after it."""
    try:
        yield freeze_startup_heap()
    finally:
        gc.unfreeze()
