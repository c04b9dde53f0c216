"""The benchmarks' local SparkSession."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any


def local_spark(app: str, conf: Mapping[str, str] | None = None) -> Any:
    """The benchmarks' SparkSession: ``local[2]``, 2 shuffle partitions, UI and progress off.

    With flamestream's ``RECOMMENDED_CONF`` (Python workers over a Unix socket), as the docs
    tell users; plain PySpark's queries start no Python worker, so it changes nothing there.
    """
    from pyspark.sql import SparkSession

    from flamestream.python_env import RECOMMENDED_CONF

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config(map=RECOMMENDED_CONF)
    )
    for name, setting in (conf or {}).items():
        builder = builder.config(name, setting)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextmanager
def spark_session(app: str, conf: Mapping[str, str] | None = None) -> Iterator[Any]:
    """:func:`local_spark`, stopped at the end."""
    spark = local_spark(app, conf)
    try:
        yield spark
    finally:
        spark.stop()
