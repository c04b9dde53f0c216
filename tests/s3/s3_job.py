"""A crash-test job with Spark's checkpoint, the graph state and the output on S3, as a child.

    python -m tests.s3.s3_job graph <input URL> <output URL> <checkpoint URL>
    python -m tests.s3.s3_job files <input URL> <output URL> <checkpoint URL> <release>
    python -m tests.s3.s3_job read <output URL>

``graph`` is :mod:`tests.spark.graph_crash_job`'s word count, ``files`` the passthrough of
:mod:`tests.spark.crash_job`. The Spark settings for ``s3a://`` (the S3A jars, endpoint and
credentials) come as JSON in ``FLAMESTREAM_TEST_SPARK_CONF``; the endpoint and credentials
for flamestream's own stores (s3fs) come as this process's environment, which Spark's JVM,
the data source runners and the sink's commit workers inherit. ``read`` reads the output
folder with ``spark.read.text`` (through its log of committed files, as any Spark reader) and
prints its lines as JSON after ``RESULT``.
"""

from __future__ import annotations

import json
import os
import sys

from flamestream.spark.connector import faults

from ..sessions import local_session
from ..spark import crash_job, graph_crash_job

CONF_ENV = "FLAMESTREAM_TEST_SPARK_CONF"


def main(job: str, source: str, out: str = "", checkpoint: str = "", *rest: str) -> None:
    """Arm the crash points, start ``job``'s query on a session configured for S3, run it out."""
    faults.arm()  # a crash point anywhere kills this driver's whole process group
    names = (faults.ENV, faults.SCOPE_ENV, faults.ONCE_ENV)
    conf = {f"spark.executorEnv.{n}": os.environ[n] for n in names if n in os.environ}
    conf.update(json.loads(os.environ[CONF_ENV]))
    spark = local_session("local[2]", conf)
    if job == "read":  # the output folder ``source``, as a Spark user reads it
        lines = [row.value for row in spark.read.text(source).collect()]
        print("RESULT " + json.dumps(sorted(lines)))
        spark.stop()
        return
    if job == "graph":
        query = graph_crash_job.start(spark, source, out, checkpoint)
    else:
        query = crash_job.start(spark, source, out, checkpoint, *rest)
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
