"""A kafka -> kafka flamestream query run as a child process by the Kafka crash tests.

python -m tests.integration.kafka_crash_job <servers> <in topic> <out topic> <checkpoint>
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

from flamestream.spark import faults

RECORDS_PER_BATCH = 12


def main(servers: str, source: str, target: str, checkpoint: str) -> None:
    faults.arm()
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    df = (
        spark.readStream.format("flamestream")
        .option("front", "kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", source)
        .option("maxRecordsPerTrigger", RECORDS_PER_BATCH)
        .option("clock", "logical")
        .load()
    )
    query = (
        df.select("ts", "front", "key", "value")
        .writeStream.format("flamestream")
        .option("sink", "kafka")
        .option("kafka.bootstrap.servers", servers)
        .option("topic", target)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:5])
