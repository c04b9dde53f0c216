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
import sys

from flamestream.spark.connector import faults

from ..sessions import local_session
from ..spark import delta_job
from .s3_job import CONF_ENV


def main(source: str, table: str, checkpoint: str, storage_options: str) -> None:
    """Arm the crash points, start the query on a session configured for S3, run it out."""
    faults.arm()  # a crash point anywhere kills this driver's whole process group
    names = (faults.ENV, faults.SCOPE_ENV, faults.ONCE_ENV)
    conf = {f"spark.executorEnv.{n}": os.environ[n] for n in names if n in os.environ}
    conf.update(json.loads(os.environ[CONF_ENV]))
    spark = local_session("local[2]", conf)
    options = {"storageOptions": storage_options}
    query = delta_job.start(spark, source, table, checkpoint, options=options)
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:5])
