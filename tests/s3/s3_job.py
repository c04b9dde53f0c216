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

from ..crash import job_main
from ..sessions import local_session
from ..spark import crash_job, graph_crash_job

CONF_ENV = "FLAMESTREAM_TEST_SPARK_CONF"


def main(job: str, *args: str) -> None:
    """Run ``job``'s query to its end on a session configured for S3 (``read``: print a folder).

    The crash jobs' :func:`tests.crash.job_main` reads ``args``, arms the crash points and
    builds the session.
    """
    conf = json.loads(os.environ[CONF_ENV])
    if job == "read":  # the output folder, as a Spark user reads it
        spark = local_session("local[2]", conf)
        lines = [row.value for row in spark.read.text(args[0]).collect()]
        print("RESULT " + json.dumps(sorted(lines)))
        spark.stop()
        return
    job_main(graph_crash_job.start if job == "graph" else crash_job.start, args, conf)


if __name__ == "__main__":
    main(*sys.argv[1:])
