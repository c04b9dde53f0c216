"""What a Spark Python worker sets up once, at its first flamestream task.

Every task entry point (front reads, sink writes, the stage, keyed, loop, route and channel
functions) calls :func:`setup_worker` first. Outside a task (a driver, a test) it does
nothing: the process and the objects in it are the user's.

1. **Freeze what the worker holds.** Spark's reused Python workers run a full collection
   after every task (``pyspark.daemon``). Once pyspark, pyarrow and flamestream are imported
   a worker holds about 100,000 tracked objects that live as long as it does, and each
   collection re-scanned them: 30-60 ms of CPU a task, a fifth of a small batch's on a
   2-core machine. ``gc.freeze`` moves them to the permanent generation, which collections
   skip; reference counting still frees them. What is frozen is the imported modules,
   pyspark's state and the first task's own objects; a reference cycle among the latter
   stays uncollected, once per worker.
2. **Arrow allocates with jemalloc.** pyarrow's default pool on Linux is mimalloc, which
   hands a freed large block's pages back to the operating system at once: the next batch's
   columns of the same size are faulted in again, page by page. jemalloc keeps freed pages
   for a while and reuses them. A keyed task of word count releasing every update (3 M
   shuffled rows, in process, its first batch) took 6.2-7.1 s with mimalloc and 3.9-4.0 s
   with jemalloc, and peaked 0.2 GB lower. A pool the user chose with
   ``ARROW_DEFAULT_MEMORY_POOL`` is kept, and so is the default where pyarrow was built
   without jemalloc. jemalloc as pyarrow configures it still unmaps a freed block of many
   megabytes at once; ``flamestream-python`` starts workers with jemalloc options that keep
   all freed pages (``python_env.ARROW_JEMALLOC_CONF``: jemalloc reads them when pyarrow loads,
   too early for this function).
"""

from __future__ import annotations

import gc
import os

import pyarrow as pa
from pyspark import TaskContext

#: pyarrow's own variable: set, it names the pool the user wants, and we keep it
POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"

_done = False


def setup_worker() -> None:
    """In a Spark task's Python worker, once: freeze its objects, choose Arrow's pool."""
    global _done
    if _done or TaskContext.get() is None:
        return
    _done = True
    gc.freeze()
    use_jemalloc()


def use_jemalloc() -> bool:
    """Make jemalloc Arrow's default pool (see the module); whether it now is.

    Buffers already allocated keep the pool that allocated them, so switching at any point
    is safe.
    """
    if os.environ.get(POOL_VARIABLE):
        return bool(pa.default_memory_pool().backend_name == "jemalloc")
    try:
        pool = pa.jemalloc_memory_pool()
    except NotImplementedError:  # a pyarrow built without it
        return False
    pa.set_memory_pool(pool)
    return True
