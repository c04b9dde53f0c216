"""The one local Spark session builder: the tests' session and every crash test's child job.

Built as users are told to build theirs (README, docs/install.md): ``flamestream.configure``
on a ``SparkSession.builder``, which adds the shim's plugin and listeners,
``RECOMMENDED_CONF`` and ``flamestream-python`` as Spark's Python. The tests add only
:data:`TEST_CONF`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pyspark.sql import SparkSession

import flamestream

#: What the tests set on top of ``configure``: two shuffle partitions on every master (a
#: value set on the builder, as a user's: ``configure`` keeps it), no UI, short polls.
TEST_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.streaming.pollingDelay": "10ms",
}


def local_session(master: str = "local[2]", conf: Mapping[str, str] | None = None) -> SparkSession:
    """A Spark session for tests, from ``flamestream.configure``; errors-only logging.

    ``conf`` adds settings (``spark.executorEnv.*`` for executors in cluster modes). Every
    Python process Spark starts, on every master, runs the ``flamestream-python`` that
    ``configure`` puts in ``PYSPARK_PYTHON`` (executors of a cluster get it as
    ``spark.executorEnv.PYSPARK_PYTHON``).
    """
    builder = SparkSession.builder.master(master).appName("flamestream-tests")
    builder = flamestream.configure(builder.config(map={**TEST_CONF, **(conf or {})}))
    python = os.environ["PYSPARK_PYTHON"]  # what configure chose
    session = builder.config("spark.executorEnv.PYSPARK_PYTHON", python).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
