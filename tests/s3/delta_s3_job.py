"""The word count into a Delta table on S3, everything else on S3 too, as a child process.

    python -m tests.s3.delta_s3_job <input URL> <table URL> <checkpoint URL> <storage options>

:mod:`tests.spark.delta_job`'s query; the input is on ``s3://`` (s3fs), Spark's checkpoint on
``s3a://``, the table on ``s3://`` through delta-rs with ``<storage options>`` (JSON: the
endpoint; the credentials come from this process's ``AWS_*`` environment, as delta-rs reads
them). The Spark settings come as in :mod:`tests.s3.s3_job`.
"""

from __future__ import annotations

import json
import os

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from ..crash import job_main
from ..spark import delta_job
from .s3_job import CONF_ENV


def start(
    spark: SparkSession, source: str, table: str, checkpoint: str, storage_options: str
) -> StreamingQuery:
    """:mod:`tests.spark.delta_job`'s query, the table's ``storageOptions`` given."""
    options = {"storageOptions": storage_options}
    return delta_job.start(spark, source, table, checkpoint, options=options)


if __name__ == "__main__":
    job_main(start, conf=json.loads(os.environ[CONF_ENV]))
