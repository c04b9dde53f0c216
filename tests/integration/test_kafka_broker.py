"""The Kafka test broker serves real clients: plain and transactional produce/consume."""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from flamestream.testing.kafka import (
    KAFKA_VERSION,
    KafkaBroker,
    KafkaSetupError,
    ensure_kafka_jars,
)

PARTITIONS = 3


def read_to_end(
    bootstrap_servers: str, topic: str, isolation_level: str = "read_uncommitted"
) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of ``topic`` up to its end offsets (the LSO for read_committed).

    Returns (offset, value) pairs per partition in the order the consumer delivered them.
    """
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap_servers,
        isolation_level=isolation_level,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    try:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        end = consumer.end_offsets(partitions)
        records: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
        deadline = time.monotonic() + 30
        while any(consumer.position(tp) < end[tp] for tp in partitions):
            assert time.monotonic() < deadline, (
                f"did not reach end offsets {end} within 30 s; "
                f"at {[consumer.position(tp) for tp in partitions]}"
            )
            for tp, batch in consumer.poll(timeout_ms=500).items():
                records[tp.partition].extend((r.offset, r.value) for r in batch)
        return dict(records)
    finally:
        consumer.close()


def test_broker_serves_produce_and_consume(kafka_broker: KafkaBroker, kafka_topic: str) -> None:
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers, acks="all")
    try:
        futures = [
            producer.send(kafka_topic, value=f"v{i}".encode(), partition=i % PARTITIONS)
            for i in range(100)
        ]
        producer.flush()
        metadata = [future.get(timeout=10) for future in futures]
    finally:
        producer.close()
    assert {m.partition for m in metadata} == set(range(PARTITIONS))

    records = read_to_end(kafka_broker.bootstrap_servers, kafka_topic)

    assert sorted(records) == list(range(PARTITIONS))
    for p in range(PARTITIONS):
        expected = [f"v{i}".encode() for i in range(100) if i % PARTITIONS == p]
        assert records[p] == list(enumerate(expected)), f"partition {p}"


def test_read_committed_sees_committed_transactions_once_and_no_aborted(
    kafka_broker: KafkaBroker, kafka_topic: str
) -> None:
    producer = KafkaProducer(
        bootstrap_servers=kafka_broker.bootstrap_servers,
        transactional_id=f"tx-{uuid.uuid4().hex}",
    )
    try:
        producer.init_transactions()

        def transaction(prefix: str, *, commit: bool) -> None:
            producer.begin_transaction()
            for i in range(12):
                producer.send(kafka_topic, value=f"{prefix}{i}".encode(), partition=i % PARTITIONS)
            producer.flush()  # the records reach the log before the outcome is decided
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()

        transaction("aborted-a", commit=False)
        transaction("committed-a", commit=True)
        transaction("aborted-b", commit=False)
        transaction("committed-b", commit=True)
    finally:
        producer.close()

    def values(records: dict[int, list[tuple[int, bytes]]], p: int) -> list[str]:
        return [value.decode() for _, value in records.get(p, [])]

    committed = read_to_end(kafka_broker.bootstrap_servers, kafka_topic, "read_committed")
    uncommitted = read_to_end(kafka_broker.bootstrap_servers, kafka_topic, "read_uncommitted")
    for p in range(PARTITIONS):
        per_txn = [i for i in range(12) if i % PARTITIONS == p]
        expected = [f"committed-a{i}" for i in per_txn] + [f"committed-b{i}" for i in per_txn]
        assert values(committed, p) == expected, f"partition {p}"
        offsets = [offset for offset, _ in committed[p]]
        assert offsets == sorted(set(offsets)), f"partition {p}: offsets not increasing"
        # the aborted records did reach the log: read_uncommitted sees them
        raw = values(uncommitted, p)
        assert [v for v in raw if v.startswith("aborted-a")] == [f"aborted-a{i}" for i in per_txn]
        assert [v for v in raw if v.startswith("aborted-b")] == [f"aborted-b{i}" for i in per_txn]


def test_second_broker_gets_other_ports_and_both_serve(kafka_broker: KafkaBroker) -> None:
    with KafkaBroker() as second:
        assert {second.port, second.controller_port}.isdisjoint(
            {kafka_broker.port, kafka_broker.controller_port}
        )
        assert second.bootstrap_servers != kafka_broker.bootstrap_servers
        topic = f"twin-{uuid.uuid4().hex}"
        for broker in (kafka_broker, second):
            broker.create_topic(topic, partitions=PARTITIONS)
            producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers)
            try:
                producer.send(topic, value=broker.bootstrap_servers.encode(), partition=1)
                producer.flush()
            finally:
                producer.close()
        for broker in (kafka_broker, second):
            records = read_to_end(broker.bootstrap_servers, topic)
            assert records == {1: [(0, broker.bootstrap_servers.encode())]}
    assert not second.running


def test_ensure_kafka_jars_is_idempotent() -> None:
    first = ensure_kafka_jars()
    started = time.monotonic()
    second = ensure_kafka_jars()
    elapsed = time.monotonic() - started
    assert second == first
    assert elapsed < 0.5, f"second call took {elapsed:.2f} s"
    assert (first / f"kafka_2.13-{KAFKA_VERSION}.jar").is_file()


def test_missing_maven_is_reported_with_the_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(
        KafkaSetupError, match=r"`mvn` is not on PATH.*dependency:copy-dependencies"
    ):
        ensure_kafka_jars(tmp_path / "jars")
