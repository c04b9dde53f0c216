"""Word count on 4 key partitions whose slots migrate, run as a child by the rescale crash test.

    python -m tests.spark.rescale_crash_job <input dir> <output dir> <checkpoint dir> [--sketched]

The same query as :mod:`tests.spark.graph_crash_job` (same input, read limit and clock, hence
the same batches and global times), elastic with loads never judged: only the rescale
requests the test submits before the first run move slots, 3 per batch. ``--sketched``: that
job's approximate aggregations instead of the word count.
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from flamestream.approx import render_json
from flamestream.spark import apply_graph
from flamestream.spark.control.key_layout import ElasticPolicy

from ..crash import job_main
from .graph_crash_job import RECORDS_PER_BATCH, sketches, word_count

#: Rescale requests alone move slots (loads are never enough to judge), 3 per batch.
MIGRATING = ElasticPolicy(max_move_slots=3, min_items=10**9)

PARTITIONS = 4


def start(
    spark: SparkSession, source: str, out: str, checkpoint: str, sketched: bool = False
) -> StreamingQuery:
    """Start the query on ``spark`` (``sketched``: the approximate aggregations')."""
    reader = (
        spark.readStream.format("flamestream")
        .option("front", "files")
        .option("path", source)
        .option("maxRecordsPerTrigger", RECORDS_PER_BATCH)
        .option("clock", "logical")
    )
    rendered = {"render": render_json} if sketched else {}
    return (
        apply_graph(
            sketches() if sketched else word_count(),
            reader,
            **rendered,
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
    job_main(start)
