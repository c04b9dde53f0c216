"""The kafka front on a real broker: through Spark into the files sink, and read_range alone."""

from __future__ import annotations

import pickle
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kafka.admin import NewPartitions
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.datasource import ReadAllAvailable

from flamestream.errors import ConfigError, RecordError
from flamestream.spark.connector.front import FrontReader, ReaderConfig
from flamestream.spark.connector.offsets import FrontRange
from flamestream.spark.connector.options import OptionReader
from flamestream.testing.kafka import KafkaBroker
from pyspark_flamestream.fronts.kafka import CHUNK, KafkaSource
from tests.spark.conftest import released, run_to_files

PARTITIONS = 3


def kafka_front(spark: SparkSession, broker: KafkaBroker, topic: str, **options: Any) -> DataFrame:
    reader = spark.readStream.format("flamestream").option("front", "kafka")
    reader = reader.option("kafka.bootstrap.servers", broker.bootstrap_servers)
    reader = reader.option("subscribe", topic)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def produce(broker: KafkaBroker, topic: str, records: list[tuple[int, bytes | None, bytes]]):
    """Send (partition, key, value) records in order and wait until all are acknowledged."""
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, acks="all")
    try:
        futures = [producer.send(topic, key=k, value=v, partition=p) for p, k, v in records]
        producer.flush()
        for future in futures:
            future.get(timeout=10)
    finally:
        producer.close()


def records(
    prefix: str, per_partition: int, first: int = 0
) -> list[tuple[int, bytes | None, bytes]]:
    """``per_partition`` records per partition, round robin; every third key is null."""
    return [
        (p, None if i % 3 == 0 else f"k{i}".encode(), f"{prefix}-p{p}-{i}".encode())
        for i in range(first, first + per_partition)
        for p in range(PARTITIONS)
    ]


@pytest.fixture
def transactions(kafka_broker: KafkaBroker) -> Iterator[KafkaProducer]:
    producer = KafkaProducer(
        bootstrap_servers=kafka_broker.bootstrap_servers,
        transactional_id=f"tx-{uuid.uuid4().hex}",
    )
    producer.init_transactions()
    yield producer
    producer.close()


def transaction(producer: KafkaProducer, topic: str, prefix: str, *, commit: bool) -> None:
    producer.begin_transaction()
    for i in range(6):
        producer.send(topic, value=f"{prefix}-{i}".encode(), partition=i % PARTITIONS)
    producer.flush()  # the records reach the log before the outcome is decided
    if commit:
        producer.commit_transaction()
    else:
        producer.abort_transaction()


def decoded(rows: list[dict[str, Any]]) -> list[str]:
    return [bytes.fromhex(r["value"]).decode() for r in rows]


# --- through Spark ---------------------------------------------------------------------------


def test_every_record_released_once_with_its_determinant_in_global_time_order(
    spark: SparkSession, kafka_broker: KafkaBroker, kafka_topic: str, tmp_path: Path
):
    sent = records("a", 20)
    produce(kafka_broker, kafka_topic, sent)
    df = kafka_front(spark, kafka_broker, kafka_topic, maxRecordsPerTrigger=7)
    assert df.columns == [
        "ts", "front", "source", "position", "key", "value", "topic", "partition", "timestamp"
    ]  # fmt: skip
    query = run_to_files(df, tmp_path / "out", tmp_path / "ck")

    rows = released(tmp_path / "out")
    assert len(rows) == len(sent)
    by_determinant = {(r["source"], r["position"]): r for r in rows}
    assert len(by_determinant) == len(rows)  # nothing twice
    for p in range(PARTITIONS):
        mine = [(k, v) for q, k, v in sent if q == p]
        for offset, (key, value) in enumerate(mine):
            row = by_determinant[(f"{kafka_topic}-{p}", offset)]
            assert bytes.fromhex(row["value"]) == value
            assert (bytes.fromhex(row["key"]) if row["key"] is not None else None) == key
            assert (row["topic"], row["partition"], row["front"]) == (kafka_topic, p, p)
            assert row["timestamp"] > 1_500_000_000_000  # ms since the epoch
    times = [(r["ts"], r["front"]) for r in rows]
    assert times == sorted(times)
    assert len(set(times)) == len(times)
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert max(sizes) <= 7
    assert sum(sizes) == len(sent)
    assert len(sizes) >= len(sent) // 7


def test_read_committed_skips_aborted_and_waits_for_open_transactions(
    spark: SparkSession,
    kafka_broker: KafkaBroker,
    kafka_topic: str,
    transactions: KafkaProducer,
    tmp_path: Path,
):
    transaction(transactions, kafka_topic, "aborted-a", commit=False)
    transaction(transactions, kafka_topic, "committed-a", commit=True)
    transaction(transactions, kafka_topic, "aborted-b", commit=False)
    transaction(transactions, kafka_topic, "committed-b", commit=True)
    transactions.begin_transaction()  # open while the query runs: beyond the last stable offset
    transactions.send(kafka_topic, value=b"open-0", partition=0)
    transactions.flush()
    produce(kafka_broker, kafka_topic, [(0, None, b"after-open")])  # committed, but past the LSO

    df = kafka_front(spark, kafka_broker, kafka_topic, maxRecordsPerTrigger=5)
    query = run_to_files(df, tmp_path / "out", tmp_path / "ck")
    rows = released(tmp_path / "out")
    expected = [f"committed-{t}-{i}" for t in "ab" for i in range(6)]
    assert sorted(decoded(rows)) == sorted(expected)
    for p in range(PARTITIONS):
        mine = sorted((r for r in rows if r["partition"] == p), key=lambda r: r["position"])
        assert decoded(mine) == [v for v in expected if int(v.rsplit("-", 1)[1]) % 3 == p]
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert max(sizes) <= 5

    transactions.commit_transaction()
    run_to_files(
        kafka_front(spark, kafka_broker, kafka_topic, maxRecordsPerTrigger=5),
        tmp_path / "out",
        tmp_path / "ck",
    )
    again = released(tmp_path / "out")
    assert decoded(again[: len(rows)]) == decoded(rows)
    assert decoded(again[len(rows) :]) == ["open-0", "after-open"]


def test_read_uncommitted_sees_aborted_records_too(
    spark: SparkSession,
    kafka_broker: KafkaBroker,
    kafka_topic: str,
    transactions: KafkaProducer,
    tmp_path: Path,
):
    transaction(transactions, kafka_topic, "aborted", commit=False)
    transaction(transactions, kafka_topic, "committed", commit=True)
    df = kafka_front(spark, kafka_broker, kafka_topic, isolationLevel="read_uncommitted")
    run_to_files(df, tmp_path / "out", tmp_path / "ck")
    values = decoded(released(tmp_path / "out"))
    assert sorted(values) == sorted(f"{t}-{i}" for t in ("aborted", "committed") for i in range(6))


def test_restart_releases_only_the_new_records(
    spark: SparkSession, kafka_broker: KafkaBroker, kafka_topic: str, tmp_path: Path
):
    produce(kafka_broker, kafka_topic, records("old", 5))
    run_to_files(kafka_front(spark, kafka_broker, kafka_topic), tmp_path / "out", tmp_path / "ck")
    first = {part.name for part in (tmp_path / "out").glob("part-*")}
    assert len(released(tmp_path / "out")) == 5 * PARTITIONS

    produce(kafka_broker, kafka_topic, records("new", 4, first=5))
    # maxOffsetsPerTrigger: the name Spark's own Kafka source gives the read limit
    df = kafka_front(spark, kafka_broker, kafka_topic, maxOffsetsPerTrigger=5)
    query = run_to_files(df, tmp_path / "out", tmp_path / "ck")
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert max(sizes) <= 5 < sum(sizes)
    rows = released(tmp_path / "out")
    sent = records("old", 5) + records("new", 4, first=5)
    assert sorted(decoded(rows)) == sorted(v.decode() for _, _, v in sent)
    later = [p for p in sorted((tmp_path / "out").glob("part-*")) if p.name not in first]
    new_rows = [r for r in rows if decoded([r])[0].startswith("new")]
    assert sum(len(p.read_text().splitlines()) for p in later) == len(new_rows) == 4 * PARTITIONS
    assert sorted(r["position"] for r in new_rows) == sorted(list(range(5, 9)) * PARTITIONS)
    times = [(r["ts"], r["front"]) for r in rows]
    assert times == sorted(times)


def test_starting_offsets_latest_ignores_earlier_records_and_restarts_without_skipping(
    spark: SparkSession, kafka_broker: KafkaBroker, kafka_topic: str, tmp_path: Path
):
    produce(kafka_broker, kafka_topic, records("before", 5))
    df = kafka_front(spark, kafka_broker, kafka_topic, startingOffsets="latest")
    run_to_files(df, tmp_path / "out", tmp_path / "ck")
    assert released(tmp_path / "out") == []

    # written while no query runs: the first run fixed its positions in the offset log
    produce(kafka_broker, kafka_topic, records("after", 4, first=5))
    df = kafka_front(spark, kafka_broker, kafka_topic, startingOffsets="latest")
    run_to_files(df, tmp_path / "out", tmp_path / "ck")
    rows = released(tmp_path / "out")
    assert sorted(decoded(rows)) == sorted(v.decode() for _, _, v in records("after", 4, first=5))
    assert sorted(r["position"] for r in rows) == sorted(list(range(5, 9)) * PARTITIONS)


GOOD = {"kafka.bootstrap.servers": "{servers}", "subscribe": "{topic}"}


@pytest.mark.parametrize(
    ("options", "pattern"),
    [
        ({"subscribe": "x"}, r"front kafka: option 'kafka.bootstrap.servers' = \(missing\)"),
        ({"kafka.bootstrap.servers": "{servers}"}, r"option 'subscribe' = \(missing\)"),
        (
            {**GOOD, "startingOffsets": "newest"},
            r"option 'startingOffsets' = 'newest'.*one of earliest, latest",
        ),
        (
            {**GOOD, "isolationLevel": "dirty"},
            r"option 'isolationLevel' = 'dirty'.*read_committed, read_uncommitted",
        ),
        ({**GOOD, "pollTimeoutMs": "0"}, r"option 'pollTimeoutMs' = '0'.*an integer >= 1"),
        (
            {**GOOD, "startingOffset": "latest"},
            # Spark lower-cases option names before flamestream sees them
            r"(?i)front kafka: option 'startingOffset' = 'latest'.*no such option "
            r"\(did you mean 'startingOffsets'\?\)",
        ),
        (
            {**GOOD, "maxOffsetsPerTrigger": "5", "maxRecordsPerTrigger": "5"},
            r"(?i)option 'maxOffsetsPerTrigger' = 5.*not both",
        ),
        (
            {**GOOD, "subscribe": "a,,b"},
            r"option 'subscribe' = 'a,,b'.*topic\[,topic\.\.\.\]",
        ),
        (
            {**GOOD, "kafka.bootstrap.servers": "{servers},"},
            r"option 'kafka.bootstrap.servers' = '.*,'.*host:port",
        ),
    ],
)
def test_bad_options_fail_at_load(
    spark: SparkSession, kafka_broker: KafkaBroker, kafka_topic: str, options, pattern
):
    reader = spark.readStream.format("flamestream").option("front", "kafka")
    for key, value in options.items():
        reader = reader.option(
            key, value.format(servers=kafka_broker.bootstrap_servers, topic=kafka_topic)
        )
    with pytest.raises(Exception, match=pattern):
        reader.load()


def test_unknown_topic_fails_at_load_listing_the_existing_ones(
    spark: SparkSession, kafka_broker: KafkaBroker, kafka_topic: str
):
    with pytest.raises(
        Exception, match=rf"option 'subscribe'.*'nope'.*Existing topics:.*{kafka_topic}"
    ):
        kafka_front(spark, kafka_broker, f"{kafka_topic},nope")


def test_unreachable_broker_fails_fast_at_load(spark: SparkSession):
    started = time.monotonic()
    with pytest.raises(
        Exception, match=r"option 'kafka.bootstrap.servers' = '127.0.0.1:1'.*could not be reached"
    ):
        (
            spark.readStream.format("flamestream")
            .option("front", "kafka")
            .option("kafka.bootstrap.servers", "127.0.0.1:1")
            .option("subscribe", "anything")
            .load()
        )
    assert time.monotonic() - started < 20


# --- read_range alone (no Spark) -------------------------------------------------------------


def source(broker: KafkaBroker, topic: str, **options: str) -> KafkaSource:
    given = {"kafka.bootstrap.servers": broker.bootstrap_servers, "subscribe": topic, **options}
    reader = OptionReader("front kafka", given)
    made = KafkaSource(reader)
    reader.finish()
    return made


def read(made: KafkaSource, part: FrontRange) -> pa.Table:
    return pa.Table.from_batches(list(made.read_range(part)), schema=_schema(made))


def _schema(made: KafkaSource) -> pa.Schema:
    return pa.schema([pa.field("position", pa.int64()), *made.payload_fields()])


def test_read_range_is_deterministic_across_transaction_gaps(
    kafka_broker: KafkaBroker, kafka_topic: str, transactions: KafkaProducer
):
    produce(kafka_broker, kafka_topic, records("plain", 4))
    transaction(transactions, kafka_topic, "aborted", commit=False)
    transaction(transactions, kafka_topic, "committed", commit=True)
    produce(kafka_broker, kafka_topic, records("tail", 2))
    made = source(kafka_broker, kafka_topic)
    try:
        ends = made.discover({})
        assert sorted(ends) == [f"{kafka_topic}-{p}" for p in range(PARTITIONS)]
        key = f"{kafka_topic}-1"
        # offsets of partition 1: plain 0-3, aborted 4-5 + marker 6, committed 7-8 + marker 9,
        # tail 10-11; end 10 stops right after a marker, start 2 is mid-way
        assert ends[key] == 12
        part = FrontRange(key, 1, 2, 10, 0)
        first, second = read(made, part), read(made, part)
        copy = pickle.loads(pickle.dumps(made))  # noqa: S301 - what an executor gets
        assert copy._driver is None
        third = read(copy, part)
    finally:
        made.close()
    assert first.equals(second)
    assert first.equals(third)
    assert first.column("position").to_pylist() == [2, 3, 7, 8]
    assert [v.decode() for v in first.column("value").to_pylist()] == [
        "plain-p1-2", "plain-p1-3", "committed-1", "committed-4"
    ]  # fmt: skip
    assert set(first.column("partition").to_pylist()) == {1}
    assert made.start_position(key, 12, at_query_start=True) == 0


def test_read_range_batches_are_at_most_one_chunk(kafka_broker: KafkaBroker, kafka_topic: str):
    total = CHUNK + 100
    produce(kafka_broker, kafka_topic, [(2, None, b"%d" % i) for i in range(total)])
    made = source(kafka_broker, kafka_topic)
    batches = list(made.read_range(FrontRange(f"{kafka_topic}-2", 2, 0, total, 0)))
    assert [b.num_rows for b in batches] == [CHUNK, 100]
    positions = [p for b in batches for p in b.column("position").to_pylist()]
    assert positions == list(range(total))


def test_read_range_past_the_log_raises_naming_partition_and_offset(
    kafka_broker: KafkaBroker, kafka_topic: str
):
    produce(kafka_broker, kafka_topic, [(0, None, b"only")])
    made = source(kafka_broker, kafka_topic, pollTimeoutMs="1000")
    started = time.monotonic()
    with pytest.raises(
        RecordError, match=rf"'front kafka'.*\('{kafka_topic}-0', 1\).*pollTimeoutMs"
    ):
        list(made.read_range(FrontRange(f"{kafka_topic}-0", 0, 0, 5, 0)))
    assert time.monotonic() - started < 10


def test_latest_starts_the_first_batch_s_partitions_at_their_end_and_later_ones_at_earliest(
    kafka_broker: KafkaBroker, kafka_topic: str
):
    produce(kafka_broker, kafka_topic, records("x", 3))
    made = source(kafka_broker, kafka_topic, startingOffsets="latest")
    try:
        ends = made.discover({})
        assert all(
            made.start_position(k, v, at_query_start=True) == v == 3 for k, v in ends.items()
        )
        assert all(made.start_position(k, v, at_query_start=False) == 0 for k, v in ends.items())
    finally:
        made.close()


def test_latest_reads_a_partition_added_while_the_query_runs_from_its_start(
    kafka_broker: KafkaBroker, kafka_topic: str
):
    """Planned through the front's reader: records before the query's first batch are not
    read; a partition added later is read whole, records written before any planning saw it
    included (Spark's own source does the same)."""
    produce(kafka_broker, kafka_topic, records("before", 3))  # 3 per partition, never read
    front = FrontReader(source(kafka_broker, kafka_topic, startingOffsets="latest"), ReaderConfig())
    try:
        first = front.latestOffset(front.initialOffset(), ReadAllAvailable())
        assert front.partitions(front.initialOffset(), first) == []  # started at the end
        produce(kafka_broker, kafka_topic, [(0, None, b"after")])
        admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap_servers)
        try:
            admin.create_partitions({kafka_topic: NewPartitions(total_count=4)})
        finally:
            admin.close()
        produce(kafka_broker, kafka_topic, [(3, None, b"new-%d" % i) for i in range(3)])
        deadline, end = time.monotonic() + 60, first
        while time.monotonic() < deadline:  # planning sees new partitions within a second
            end = front.latestOffset(first, ReadAllAvailable())
            planned = [r for p in front.partitions(first, end) for r in p.value.ranges]
            if any(r.key == f"{kafka_topic}-3" for r in planned):
                break
            time.sleep(0.2)
        got = sorted(
            (part.key, value.decode())
            for task in front.partitions(first, end)
            for part in task.value.ranges
            for batch in front.source.read_range(part)
            for value in batch.column("value").to_pylist()
        )
    finally:
        front.stop()
    assert got == [
        (f"{kafka_topic}-0", "after"),
        *[(f"{kafka_topic}-3", f"new-{i}") for i in range(3)],
    ]


def test_config_error_is_raised_without_spark(kafka_broker: KafkaBroker):
    with pytest.raises(ConfigError, match=r"option 'subscribe' = 'missing-topic'"):
        source(kafka_broker, "missing-topic")


def test_deleted_records_start_later_and_fail_a_read_instead_of_being_skipped(
    kafka_broker: KafkaBroker, kafka_topic: str
):
    produce(kafka_broker, kafka_topic, [(0, None, b"%d" % i) for i in range(5)])
    admin = KafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap_servers)
    try:
        admin.delete_records({TopicPartition(kafka_topic, 0): 3})
    finally:
        admin.close()
    made = source(kafka_broker, kafka_topic)
    key = f"{kafka_topic}-0"
    try:
        assert made.start_position(key, 5, at_query_start=True) == 3  # the log start offset
        assert read(made, FrontRange(key, 0, 3, 5, 0)).column("position").to_pylist() == [3, 4]
        with pytest.raises(RecordError, match=rf"\('{key}', 0\).*no longer in the log"):
            list(made.read_range(FrontRange(key, 0, 0, 5, 0)))
    finally:
        made.close()
