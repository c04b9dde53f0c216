"""Run by ``tests/unit/test_launcher.py`` through ``flamestream-python -m``: prints, as JSON,
the jemalloc options it was started with and the page faults of allocating a 64 MiB Arrow
buffer twice in jemalloc (the second time: are the first one's pages reused?)."""

from __future__ import annotations

import json
import os
import resource

import numpy as np
import pyarrow as pa


def faults_of_a_buffer(pool: pa.MemoryPool) -> int:
    """Minor page faults while a fresh 64 MiB buffer of ``pool`` is filled, then freed."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    buffer = pa.allocate_buffer(64 * 2**20, memory_pool=pool)
    np.frombuffer(buffer, np.uint8)[:] = 1
    del buffer
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


if __name__ == "__main__":
    pool = pa.jemalloc_memory_pool()
    faults = [faults_of_a_buffer(pool) for _ in range(2)]
    print(json.dumps({"conf": os.environ.get("JE_ARROW_MALLOC_CONF"), "faults": faults}))
