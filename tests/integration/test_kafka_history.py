"""History then live on a real broker: an archive of a topic, then the topic, each record once.

The archives are JSON lines as an archiver of the topic keeps them (partition, offset,
timestamp, value), overlapping what the topic still holds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kafka import KafkaProducer
from pyspark.sql import DataFrame, SparkSession

from flamestream.testing.kafka import KafkaBroker
from tests.spark.conftest import released, run_to_files, write_lines
from tests.spark.test_history_then_live import offsets

from .test_kafka_front import PARTITIONS, decoded

#: Record times: partition p's record i at BASE + 1000 * i (+ p ms).
BASE = 1_700_000_000_000


def produce_timed(broker: KafkaBroker, topic: str, per_partition: int) -> dict[int, list[str]]:
    """``per_partition`` records per partition with set timestamps; the values by partition."""
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, acks="all")
    sent: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    try:
        for i in range(per_partition):
            for p in range(PARTITIONS):
                value = f"p{p}-{i}"
                producer.send(topic, value=value.encode(), partition=p, timestamp_ms=stamp(p, i))
                sent[p].append(value)
        producer.flush()
    finally:
        producer.close()
    return sent


def stamp(partition: int, i: int) -> int:
    return BASE + 1000 * i + partition


def archive(folder: Path, sent: dict[int, list[str]], kept: dict[int, Any]) -> None:
    """An archiver's JSON lines (a.jsonl) of the records `kept`: offsets per partition."""
    rows = [
        {"partition": p, "offset": o, "timestamp": stamp(p, o), "value": sent[p][o]}
        for p, offsets_kept in kept.items()
        for o in offsets_kept
    ]
    write_lines(folder / "a.jsonl", [json.dumps(r) for r in rows])


def the_switch(checkpoint: Path) -> dict[str, Any]:
    """The switch the offset log recorded."""
    return next(o["history"]["switch"] for o in offsets(checkpoint) if o["history"]["switch"])


def hybrid(spark: SparkSession, broker: KafkaBroker, topic: str, **options: Any) -> DataFrame:
    reader = spark.readStream.format("flamestream").option("front", "kafka")
    reader = reader.option("kafka.bootstrap.servers", broker.bootstrap_servers)
    reader = reader.option("subscribe", topic).option("clock", "logical")
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def test_a_position_boundary_starts_each_partition_after_its_archive_and_reports_gaps(
    spark: SparkSession, kafka_broker: KafkaBroker, kafka_topic: str, tmp_path: Path
):
    sent = produce_timed(kafka_broker, kafka_topic, 6)
    # partition 0: offsets 0-3 archived; 1: 0-4 but 2 lost (a gap); 2: not in the archive
    kept = {0: [0, 1, 2, 3], 1: [0, 1, 3, 4], 2: []}
    archive(tmp_path / "archive", sent, kept)
    df = hybrid(
        spark,
        kafka_broker,
        kafka_topic,
        history="files",
        **{"history.path": str(tmp_path / "archive"), "history.boundary": "position"},
        maxRecordsPerTrigger=4,
    )
    run_to_files(df, tmp_path / "out", tmp_path / "ck")
    out = released(tmp_path / "out")
    values = decoded(out)
    want = [sent[p][o] for p, offs in kept.items() for o in offs]  # the archive's records
    want += [sent[0][o] for o in (4, 5)] + [sent[1][5]] + sent[2]  # live after it
    assert sorted(values) == sorted(want)
    assert len(values) == len(set(values))  # each record once
    live = [r for r in out if r["source"].startswith(kafka_topic)]
    archived = [r for r in out if r["source"] == "a.jsonl"]
    assert min(r["ts"] for r in live) > max(r["ts"] for r in archived)
    assert {r["partition"] for r in archived} == {0, 1}  # the live columns, from the archive
    switch = the_switch(tmp_path / "ck")
    starts = {k.rsplit("-", 1)[-1]: v for k, v in switch["starts"].items()}
    assert starts == {"0": 4, "1": 5, "2": 0}
    assert switch["gaps"] == [[f"{kafka_topic}-1", 2, 2, "inside"]]
    assert switch["gapPositions"] == 1
    assert any("2..2" in w and "in neither" in w for w in switch["warnings"])


def test_a_time_boundary_seeks_each_partition_by_time_and_drops_late_records_below_it(
    spark: SparkSession, kafka_broker: KafkaBroker, kafka_topic: str, tmp_path: Path
):
    sent = produce_timed(kafka_broker, kafka_topic, 5)
    late = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers, acks="all")
    late.send(kafka_topic, value=b"late", partition=0, timestamp_ms=stamp(0, 1)).get(10)
    late.close()
    cut = stamp(0, 3)  # partition 0: 0-2 below it; 1 and 2 (+1, +2 ms): also 0-2 below
    # the archive holds everything; the cut takes 0-2 from it
    archive(tmp_path / "archive", sent, dict.fromkeys(range(PARTITIONS), range(5)))
    df = hybrid(
        spark,
        kafka_broker,
        kafka_topic,
        history="files",
        **{
            "history.path": str(tmp_path / "archive"),
            "history.boundary": "time",
            "history.cutTime": cut,
            "history.timestampField": "timestamp",
        },
    )
    run_to_files(df, tmp_path / "out", tmp_path / "ck")
    out = released(tmp_path / "out")
    archived = sorted(v for r, v in zip(out, decoded(out), strict=True) if r["source"] == "a.jsonl")
    live = sorted(v for r, v in zip(out, decoded(out), strict=True) if r["source"] != "a.jsonl")
    assert archived == sorted(sent[p][i] for p in range(PARTITIONS) for i in range(3))
    assert live == sorted(sent[p][i] for p in range(PARTITIONS) for i in (3, 4))  # "late" dropped
    switch = the_switch(tmp_path / "ck")
    assert sorted(switch["starts"].values()) == [3, 3, 3]


def test_a_cut_time_in_the_future_of_the_live_source_is_recorded_as_a_warning(
    spark: SparkSession, kafka_broker: KafkaBroker, kafka_topic: str, tmp_path: Path
):
    sent = produce_timed(kafka_broker, kafka_topic, 3)
    archive(tmp_path / "archive", sent, dict.fromkeys(range(PARTITIONS), range(3)))
    df = hybrid(
        spark,
        kafka_broker,
        kafka_topic,
        history="files",
        **{
            "history.path": str(tmp_path / "archive"),
            "history.boundary": "time",
            "history.cutTime": stamp(0, 100),  # after every record the topic holds
            "history.timestampField": "timestamp",
        },
    )
    run_to_files(df, tmp_path / "out", tmp_path / "ck")
    out = released(tmp_path / "out")
    assert sorted(decoded(out)) == sorted(v for vs in sent.values() for v in vs)  # all archived
    assert all(r["source"] == "a.jsonl" for r in out)
    switch = the_switch(tmp_path / "ck")
    assert any("future of the live source" in w for w in switch["warnings"])
    assert sorted(switch["starts"].values()) == [3, 3, 3]  # each partition's end
