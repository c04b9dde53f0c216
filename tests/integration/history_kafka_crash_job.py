"""History then live on the real services: a Delta archive on S3, then its Kafka topic.

    python -m tests.integration.history_kafka_crash_job <servers> <topic> <out topic>
        <checkpoint dir> <archive URL> <storage options>

A word count over a Kafka topic's records: first the archive of the topic's first records, a
Delta table on S3 (``s3://…``, read with delta-rs and pyarrow configured by ``<storage
options>``, delta-rs's JSON), boundary ``position`` on its ``partition`` and ``offset``
columns, then the topic itself from right after the archive. The released counts go to
``<out topic>`` through the transactional Kafka sink. Spark's checkpoint is on local disk
(the history is the only thing on S3, read by Python, so the driver JVM needs no S3A jars).

Trigger.AvailableNow, ``history.maxRecordsPerTrigger`` :data:`BACKFILL_PER_BATCH` and
``maxRecordsPerTrigger`` :data:`LIVE_PER_BATCH` with clock=logical: the same archive and topic
always make the same batches and global times.
"""

from __future__ import annotations

from operator import add

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from flamestream import Dataflow, map_reduce
from flamestream.spark import apply_graph

from ..crash import job_main

#: Records per backfill batch and per live batch.
BACKFILL_PER_BATCH = 8
LIVE_PER_BATCH = 4


def words(value: bytes) -> list[str]:
    """A Kafka record's words (its value is UTF-8 text)."""
    return value.decode().split()


def word_count() -> Dataflow:
    """Each word's running count, released as ``word=count`` at every update."""
    flow = Dataflow("wordcount")
    split = flow.flat_map("split", flow.source("records"), words)
    counts = map_reduce(flow, "count", split, mapper=lambda w: (w, 1), reducer=add)
    flow.sink("out", flow.map("show", counts, lambda r: f"{r.key}={r.value}"))
    return flow


def start(
    spark: SparkSession,
    servers: str,
    topic: str,
    target: str,
    checkpoint: str,
    archive: str,
    storage_options: str,
) -> StreamingQuery:
    """Start the query on ``spark``."""
    reader = (
        spark.readStream.format("flamestream")
        .option("front", "kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .option("maxRecordsPerTrigger", LIVE_PER_BATCH)
        .option("clock", "logical")
        .option("history", "delta")
        .option("history.path", archive)
        .option("history.storageOptions", storage_options)
        .option("history.boundary", "position")  # partition and offset: the kafka defaults
        .option("history.maxRecordsPerTrigger", BACKFILL_PER_BATCH)
    )
    # the reader, not loaded: apply runs the graph's first stage in the front's reads
    counts = apply_graph(
        word_count(),
        reader,  # type: ignore[arg-type]
        checkpoint_location=checkpoint,
        partitions=2,
    )
    return (
        counts.writeStream.format("flamestream")
        .option("sink", "kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("topic", target)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


if __name__ == "__main__":
    job_main(start)
