"""Word count on 4 key partitions whose slots migrate, run as a child by the rescale crash test.

    python -m tests.spark.rescale_crash_job <input dir> <output dir> <checkpoint dir>

The same query as :mod:`tests.spark.graph_crash_job` (same input, read limit and clock, hence
the same batches and global times), elastic with loads never judged: only the rescale
requests the test submits before the first run move slots, 3 per batch.
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from flamestream.spark import apply_graph
from flamestream.spark.control.key_layout import ElasticPolicy

from ..crash import job_main
from .graph_crash_job import RECORDS_PER_BATCH, word_count

#: Rescale requests alone move slots (loads are never enough to judge), 3 per batch.
MIGRATING = ElasticPolicy(max_move_slots=3, min_items=10**9)

PARTITIONS = 4


def start(spark: SparkSession, source: str, out: str, checkpoint: str) -> StreamingQuery:
    """Start the query on ``spark``."""
    reader = (
        spark.readStream.format("flamestream")
        .option("front", "files")
        .option("path", source)
        .option("maxRecordsPerTrigger", RECORDS_PER_BATCH)
        .option("clock", "logical")
    )
    return (
        apply_graph(
            word_count(),
            reader,
            checkpoint_location=checkpoint,
            partitions=PARTITIONS,
            elastic=MIGRATING,
        )
        .writeStream.format("flamestream")
        .option("sink", "files")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


if __name__ == "__main__":
    source, out, checkpoint = sys.argv[1:4]
    job_main(lambda spark: start(spark, source, out, checkpoint))
