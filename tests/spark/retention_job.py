"""Connected components with Spark keeping few batches of its logs, run as a child by a test.

    python -m tests.spark.retention_job <input dir> <output dir> <checkpoint dir>

The query of :mod:`tests.spark.loop_crash_job` (a grouping, a loop channel, the ack table, the
barrier sink: every store flamestream keeps), with ``spark.sql.streaming.minBatchesToRetain``
at :data:`RETAIN`, so that many small batches show whether every store follows Spark's
retention.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from ..crash import job_main
from . import loop_crash_job

#: Batches of its offset and commit logs Spark keeps (its default is 100).
RETAIN = 4

RETAIN_CONF = "spark.sql.streaming.minBatchesToRetain"


def start(spark: SparkSession, source: str, out: str, checkpoint: str) -> StreamingQuery:
    """Start the query on ``spark``, its log retention set first."""
    spark.conf.set(RETAIN_CONF, str(RETAIN))
    return loop_crash_job.start(spark, source, out, checkpoint)


if __name__ == "__main__":
    job_main(start)
