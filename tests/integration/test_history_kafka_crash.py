"""History then live on the real services, killed in the backfill, in the switch and after it.

The history is a Delta table on S3 (SeaweedFS) holding what an archiver kept of a Kafka
topic: the first :data:`ARCHIVED` records of each partition, with their ``partition`` and
``offset``. The live source is the topic on the real broker, which still holds every record,
so history and live overlap. The query (:mod:`.history_kafka_crash_job`) counts words over
both and releases the counts through the transactional Kafka sink.

What it proves:

* the unbroken run reads each of the topic's records exactly once across the boundary: every
  word's released counts run 1, 2, … up to its count in the whole topic (a record read from
  both sides would count twice, one read from neither would be missing), in two backfill
  batches, the switch batch and live batches after it, and the switch recorded in the offset
  log starts each partition at the archive's largest offset + 1;
* a run SIGKILLed in a backfill batch (its keyed state saved, nothing released), in the switch
  batch (its Kafka transaction open) and in a live batch (transaction committed, marker not
  yet written), restarted each time, shows a read_committed consumer at every point a prefix
  of the unbroken run's records and in the end exactly them, in the same order, with the same
  global times; the restart after the switch does not read the history: the archive is
  deleted from S3 before it.
"""

from __future__ import annotations

import json
import time
import uuid
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from flamestream.testing.kafka import KafkaBroker
from flamestream.testing.seaweedfs import SeaweedFS

from ..crash import reachable_in_turn, run_chain, run_child
from ..s3.test_delta_on_s3 import store
from ..spark.test_history_then_live import offsets
from .history_kafka_crash_job import BACKFILL_PER_BATCH, LIVE_PER_BATCH
from .test_kafka_sink import committed_records

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

JOB = "tests.integration.history_kafka_crash_job"
PARTITIONS = 3
#: Records per partition in the topic.
RECORDS = 8
#: The first records of each partition the archive holds (uneven: each partition's live
#: start differs).
ARCHIVED = {0: 5, 1: 4, 2: 6}
WORDS = ["the", "cat", "sat", "on", "mat", "dog"]
#: The batch that switches: 15 archived records take two backfill batches of at most 8.
SWITCH = -(-sum(ARCHIVED.values()) // BACKFILL_PER_BATCH)
#: Batches after the switch's: the live records the switch batch leaves.
LIVE = PARTITIONS * RECORDS - sum(ARCHIVED.values())
LIVE_AFTER = -(-(LIVE - LIVE_PER_BATCH) // LIVE_PER_BATCH)

#: A backfill batch with its keyed state saved; the switch batch with its transaction open; a
#: live batch after its transaction committed, before its marker.
CRASHES = [
    "graph.keyed.saved:1",
    f"sink.kafka.in_transaction:{SWITCH}",
    f"sink.commit.released:{SWITCH + 1}",
]

Records = list[tuple[bytes, bytes, dict[str, bytes]]]


def text(partition: int, offset: int) -> str:
    """The value of the topic's record at ``offset`` of ``partition``: three words."""
    i = partition * RECORDS + offset
    return " ".join(WORDS[(i * k + partition) % len(WORDS)] for k in (1, 2, 3))


@dataclass(frozen=True)
class Source:
    """The live topic and the archive of its first records (a table to write to Delta)."""

    topic: str
    archive: pa.Table

    def largest_archived(self) -> dict[int, int]:
        """The archive's largest offset per partition."""
        rows = self.archive.select(["partition", "offset"]).to_pylist()
        return {p: max(r["offset"] for r in rows if r["partition"] == p) for p in ARCHIVED}


@pytest.fixture(scope="module")
def source(kafka_broker: KafkaBroker) -> Source:
    """:data:`RECORDS` records per partition, then what an archiver kept of the topic.

    The archiver reads the topic from its beginning and keeps each partition's first
    :data:`ARCHIVED` records: partition, offset, key, value and timestamp, as Kafka has them.
    """
    name = f"history-live-{uuid.uuid4().hex}"
    kafka_broker.create_topic(name, partitions=PARTITIONS)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers, acks="all")
    try:
        for offset in range(RECORDS):
            for p in range(PARTITIONS):
                value = text(p, offset).encode()
                sent = producer.send(name, key=f"k{p}".encode(), value=value, partition=p)
                assert sent.get(10).offset == offset
    finally:
        producer.close()
    return Source(name, archived(kafka_broker, name))


def archived(broker: KafkaBroker, topic: str) -> pa.Table:
    """The first :data:`ARCHIVED` records of each partition, read from the topic."""
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, enable_auto_commit=False)
    parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer.assign(parts)
    consumer.seek_to_beginning()
    kept: list[Any] = []
    deadline = time.monotonic() + 60
    try:
        while any(consumer.position(tp) < ARCHIVED[tp.partition] for tp in parts):
            assert time.monotonic() < deadline, "the topic's records did not come in 60 s"
            for batch in consumer.poll(timeout_ms=1000).values():
                kept += [r for r in batch if r.offset < ARCHIVED[r.partition]]
    finally:
        consumer.close()
    kept.sort(key=lambda r: (r.offset, r.partition))  # as an archiver appends them
    return pa.table(
        {
            "partition": pa.array([r.partition for r in kept], pa.int32()),
            "offset": pa.array([r.offset for r in kept], pa.int64()),
            "key": pa.array([r.key for r in kept], pa.binary()),
            "value": pa.array([r.value for r in kept], pa.binary()),
            "timestamp": pa.array([r.timestamp for r in kept], pa.int64()),
        }
    )


def write_archive(s3: SeaweedFS, source: Source) -> str:
    """The archive as a new Delta table on S3; its URL.

    One write, so one data file: every archive written by this has its rows in one order.
    """
    bucket = f"archive-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(bucket)
    url = f"s3://{bucket}/events"
    write_deltalake(url, source.archive, storage_options=store(s3))
    return url


def job_args(
    broker: KafkaBroker, s3: SeaweedFS, source: Source, work: Path
) -> tuple[list[str], str]:
    """A run's arguments (a fresh output topic, archive and checkpoint) and its output topic."""
    target = f"history-out-{uuid.uuid4().hex}"
    broker.create_topic(target, partitions=1)  # one partition: the release order is visible
    args = [broker.bootstrap_servers, source.topic, target, str(work / "ck")]
    return [*args, write_archive(s3, source), json.dumps(store(s3))], target


def expected_counts() -> Counter[str]:
    """Every released count: each word's 1, 2, … up to its count over the whole topic."""
    total = Counter(
        w for p in range(PARTITIONS) for o in range(RECORDS) for w in text(p, o).split()
    )
    return Counter(f"{w}={n}" for w, count in total.items() for n in range(1, count + 1))


def check_switch(checkpoint: Path, source: Source) -> None:
    """The offset log: two backfill batches, the switch, live batches; the switch's starts.

    Each partition starts right after the archive's largest offset; no gap (the archive holds
    every offset before it).
    """
    logged = offsets(checkpoint)
    phases = [o["history"]["phase"] for o in logged]
    assert phases == ["backfill"] * SWITCH + ["live"] * (1 + LIVE_AFTER)
    switch: dict[str, Any] = logged[SWITCH]["history"]["switch"]
    assert switch["batch"] == SWITCH
    after = {f"live:{source.topic}-{p}": o + 1 for p, o in source.largest_archived().items()}
    assert switch["starts"] == after
    assert (switch["gaps"], switch["gapPositions"]) == ([], 0)
    assert all(o["history"]["switch"] == switch for o in logged[SWITCH:])  # kept, never redone


@pytest.fixture(scope="module")
def unbroken(
    kafka_broker: KafkaBroker,
    seaweedfs: SeaweedFS,
    source: Source,
    tmp_path_factory: pytest.TempPathFactory,
) -> Records:
    """The query run once to its end: what a read_committed consumer sees in its output."""
    work = tmp_path_factory.mktemp("unbroken")
    args, target = job_args(kafka_broker, seaweedfs, source, work)
    assert run_child(JOB, args) == 0
    check_switch(work / "ck", source)
    records = committed_records(kafka_broker, target)
    assert Counter(v.decode() for _, v, _ in records) == expected_counts()
    return records


def test_the_crashes_come_in_turn_in_the_backfill_the_switch_and_after_it() -> None:
    assert SWITCH >= 2 and LIVE_AFTER >= 1  # two backfill batches, live ones after the switch
    assert reachable_in_turn(CRASHES)
    batches = [int(c.rsplit(":", 1)[1]) for c in CRASHES]
    assert batches[0] < SWITCH == batches[1] < batches[2] <= SWITCH + LIVE_AFTER


def test_killed_history_then_live_recovers_to_exactly_the_unbroken_output(
    kafka_broker: KafkaBroker,
    seaweedfs: SeaweedFS,
    source: Source,
    unbroken: Records,
    tmp_path: Path,
) -> None:
    args, target = job_args(kafka_broker, seaweedfs, source, tmp_path)
    table = args[4]
    fs = seaweedfs.filesystem()

    def check(crash: str) -> None:
        so_far = committed_records(kafka_broker, target)
        assert so_far == unbroken[: len(so_far)], f"after {crash}"
        if crash == CRASHES[-1]:  # past the switch: the history is not read again
            folder = table.removeprefix("s3://")
            fs.rm(folder, recursive=True)
            fs.invalidate_cache()  # SeaweedFS may keep the emptied folder's own entry
            assert [path for path in fs.find(folder) if path != folder] == []

    run_chain(JOB, args, CRASHES, check)
    assert committed_records(kafka_broker, target) == unbroken
    check_switch(tmp_path / "ck", source)
