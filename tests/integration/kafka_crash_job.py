"""A kafka -> kafka flamestream query run as a child process by the Kafka crash tests.

python -m tests.integration.kafka_crash_job <servers> <in topic> <out topic> <checkpoint>
"""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from ..crash import job_main

RECORDS_PER_BATCH = 12


def start(
    spark: SparkSession, servers: str, source: str, target: str, checkpoint: str
) -> StreamingQuery:
    """Start the query on ``spark``."""
    df = (
        spark.readStream.format("flamestream")
        .option("front", "kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", source)
        .option("maxRecordsPerTrigger", RECORDS_PER_BATCH)
        .option("clock", "logical")
        .load()
    )
    return (
        df.select("ts", "front", "key", "value")
        .writeStream.format("flamestream")
        .option("sink", "kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("topic", target)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )


if __name__ == "__main__":
    job_main(start)
