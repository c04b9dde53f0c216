"""Spark's Python processes for flamestream: which interpreter, and what it leaves to know it by.

What the launcher (:mod:`flamestream.launcher`, the ``flamestream-python`` command), the
session set-up (:mod:`flamestream.session`) and a query's source runner agree on: the
launcher's name and where it is installed (:func:`worker_python`), the mark it leaves in the
processes it runs (:data:`LAUNCHED`), the allocator settings those processes start with
(:data:`ARROW_JEMALLOC_CONF`) and the Spark confs they want (:data:`RECOMMENDED_CONF`).

A leaf: it imports only ``os`` and ``sys``, so that the launcher, which every Python process
Spark starts runs first, and the library modules importing these names never import each
other (the launcher is a command, not a library).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # ``typing`` takes 16 ms to import, in every process Spark starts
if TYPE_CHECKING:
    from typing import Any

#: The launcher's command name, installed beside the interpreter (``flamestream.launcher``).
LAUNCHER = "flamestream-python"
#: The environment variable pyarrow's bundled jemalloc reads its options from, and ours for
#: Spark's Python processes: freed pages are kept for reuse, never handed back
ARROW_JEMALLOC_CONF = ("JE_ARROW_MALLOC_CONF", "dirty_decay_ms:-1,muzzy_decay_ms:-1")
#: The environment variable marking a Spark process run by the launcher (value: the module).
#: Not set when the launcher only hands its arguments to the interpreter (a script, ``-c``, a
#: module that does not connect back): a driver started so is the user's, and the Spark JVM it
#: starts (which inherits its environment) may well start its own processes without us.
LAUNCHED = "FLAMESTREAM_LAUNCHED"

#: The Spark settings flamestream's Python processes want, for a session's ``config`` (or
#: ``spark-defaults.conf``) before its SparkContext starts:
#: ``spark.python.unix.domain.socket.enabled`` has the JVM and its Python workers talk over a
#: Unix socket instead of TCP on localhost. Over TCP each Python task of a small micro-batch
#: waited ~40 ms for nothing (a front's read task of 2,000 rows: ~55 ms, ~15 ms so); every
#: stage of a graph is such a task (docs/benchmarks.md, "Python workers over Unix sockets").
RECOMMENDED_CONF: dict[str, Any] = {"spark.python.unix.domain.socket.enabled": "true"}


def worker_python() -> str:
    """The ``flamestream-python`` beside this interpreter if installed, else this interpreter.

    What ``PYSPARK_PYTHON`` and ``PYSPARK_DRIVER_PYTHON`` should name for Spark's workers and
    data source runners (``flamestream.configure`` sets both).
    """
    beside = os.path.join(os.path.dirname(sys.executable), LAUNCHER)
    return beside if os.access(beside, os.X_OK) else sys.executable
