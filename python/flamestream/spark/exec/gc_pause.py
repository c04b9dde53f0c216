"""Python's cyclic garbage collector: paused while a batch runs, and kept off what never dies.

A batch makes and keeps hundreds of thousands of small containers (items, tuples, state
entries) and frees them at its end. The collector, triggered by their allocation, kept
re-scanning them all: about 40% of a keyed stage's time and 30% of a first stage's. Nothing
the steps make needs it (no reference cycles), and reference counting frees the batch's
objects as before; the collector runs again as soon as the batch is done (:func:`gc_paused`).

Spark's reused Python workers run a full collection after every task (``pyspark.daemon``).
Once pyspark, pyarrow and flamestream are imported a worker holds about 100,000 tracked
objects that live as long as it does, and each collection re-scanned them: 30-60 ms of CPU a
task, a fifth of a small batch's on a 2-core machine. :func:`freeze_worker` moves what a
worker holds at its first flamestream task to the permanent generation (``gc.freeze``), which
collections skip; reference counting still frees those objects.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark import TaskContext

_frozen = False


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic collector off meanwhile (as it was before, after; nesting is fine)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def freeze_worker() -> None:
    """In a Spark task's Python worker, once: freeze what the worker holds (see above).

    Outside a task (a driver, a test) it does nothing: there the objects alive are the
    user's, and freezing them would keep their reference cycles from being collected. In a
    worker, what is frozen is the imported modules, pyspark's state and the first task's
    own objects; a cycle among the latter stays uncollected, once per worker.
    """
    global _frozen
    if _frozen or TaskContext.get() is None:
        return
    _frozen = True
    gc.freeze()
