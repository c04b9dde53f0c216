"""The one local Spark session builder: the tests' session and every crash test's child job."""

from __future__ import annotations

import os
from collections.abc import Mapping

from pyspark.sql import SparkSession

from flamestream.python_env import RECOMMENDED_CONF, worker_python


def local_session(master: str = "local[2]", conf: Mapping[str, str] | None = None) -> SparkSession:
    """A Spark session for tests: two shuffle partitions, no UI, errors-only logging.

    flamestream's recommended settings (``RECOMMENDED_CONF``) as users get them.

    ``conf`` adds settings (``spark.executorEnv.*`` for executors in cluster modes). Executors
    run the interpreter in ``PYSPARK_PYTHON`` (unless set, ``flamestream-python`` beside this
    one: it connects back before importing pyspark), on every master.
    """
    os.environ.setdefault("PYSPARK_PYTHON", worker_python())
    builder = (
        SparkSession.builder.master(master)
        .appName("flamestream-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.streaming.pollingDelay", "10ms")
        .config("spark.executorEnv.PYSPARK_PYTHON", os.environ["PYSPARK_PYTHON"])
        .config(map=RECOMMENDED_CONF)
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
