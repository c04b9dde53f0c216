"""``clock=record`` on Kafka: a record's global time is its timestamp, clamped per partition."""

from __future__ import annotations

from pathlib import Path

from kafka import KafkaProducer
from pyspark.sql import SparkSession

from flamestream.testing.kafka import KafkaBroker
from tests.spark.conftest import released, run_to_files

from .test_kafka_front import PARTITIONS, kafka_front

#: per partition: record timestamps in ms, out of order within a partition and across them
TIMES = {
    0: [1_000, 1_004, 1_002, 1_010, 1_010, 1_011],
    1: [1_001, 1_001, 1_003, 1_020],
    2: [999, 1_500, 1_005],
}


def produce_timed(broker: KafkaBroker, topic: str) -> None:
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, acks="all")
    try:
        futures = [
            producer.send(topic, value=f"p{p}-{i}".encode(), partition=p, timestamp_ms=t)
            for p, times in TIMES.items()
            for i, t in enumerate(times)
        ]
        producer.flush()
        for future in futures:
            future.get(timeout=10)
    finally:
        producer.close()


def test_record_time_is_the_clamped_kafka_timestamp_whatever_the_read_limit(
    spark: SparkSession, kafka_broker: KafkaBroker, kafka_topic: str, tmp_path: Path
):
    assert len(TIMES) == PARTITIONS
    produce_timed(kafka_broker, kafka_topic)
    outputs = []
    for limit in (None, 2, 5):
        options = {"clock": "record", **({"maxOffsetsPerTrigger": limit} if limit else {})}
        df = kafka_front(spark, kafka_broker, kafka_topic, **options)
        run_to_files(df, tmp_path / f"out-{limit}", tmp_path / f"ck-{limit}")
        rows = released(tmp_path / f"out-{limit}")
        outputs.append(sorted((r["ts"], r["front"], bytes.fromhex(r["value"])) for r in rows))
    assert outputs[0] == outputs[1] == outputs[2]
    by_front: dict[int, list[int]] = {}
    for ts, front, _ in outputs[0]:
        by_front.setdefault(front, []).append(ts)
    assert by_front == {
        0: [1_000, 1_004, 1_005, 1_010, 1_011, 1_012],
        1: [1_001, 1_002, 1_003, 1_020],
        2: [999, 1_500, 1_501],
    }
