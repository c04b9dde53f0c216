"""The kafka sink's release against a real broker: one transaction per batch, exactly once."""

from __future__ import annotations

import signal
import subprocess
import sys
import warnings

import pyarrow as pa
import pytest

from flamestream.errors import ConfigError
from flamestream.spark.connector.options import OptionReader
from flamestream.spark.connector.sink import released_form, written_columns
from flamestream.testing.kafka import KafkaBroker
from pyspark_flamestream.sinks.kafka import KafkaOutput

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaConsumer, TopicPartition


def output(broker: KafkaBroker, topic: str, checkpoint: str = "ck-1") -> KafkaOutput:
    options = {
        "kafka.bootstrap.servers": broker.bootstrap_servers,
        "topic": topic,
        "checkpointLocation": checkpoint,
    }
    return KafkaOutput(OptionReader("sink kafka", options))


def rows(values: list[str], start_ts: int) -> pa.Table:
    return pa.table(
        {
            "ts": pa.array(range(start_ts, start_ts + len(values)), pa.int64()),
            "front": pa.array([0] * len(values), pa.int32()),
            "key": [v[0] for v in values],
            "value": values,
        }
    )


def committed_records(broker: KafkaBroker, topic: str) -> list[tuple[bytes, bytes, dict]]:
    """Everything a read_committed consumer sees in the topic, partition by partition."""
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap_servers,
        isolation_level="read_committed",
        enable_auto_commit=False,
    )
    partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
    consumer.assign(partitions)
    consumer.seek_to_beginning()
    ends = consumer.end_offsets(partitions)
    out = []
    while any(consumer.position(tp) < ends[tp] for tp in partitions):
        for batch in consumer.poll(timeout_ms=2000).values():
            out += [(r.key, r.value, dict(r.headers)) for r in batch]
    consumer.close()
    return out


def test_release_produces_rows_with_their_global_time(kafka_broker, kafka_topic):
    sink = output(kafka_broker, kafka_topic)
    sink.release(0, rows(["apple", "banana", "cherry"], 100))
    records = committed_records(kafka_broker, kafka_topic)
    assert sorted(v for _, v, _ in records) == [b"apple", b"banana", b"cherry"]
    by_value = {v: (k, h) for k, v, h in records}
    assert by_value[b"banana"] == (b"b", {"flamestream-ts": b"101", "flamestream-front": b"0"})


def test_release_of_value_columns_only_produces_the_same_records_without_time_headers(
    kafka_broker, kafka_topic
):
    """``columns=value``: the commit hands the sink the payload columns only (``key`` and
    ``value`` here); the records are those of every column, without the time headers."""
    sink = output(kafka_broker, kafka_topic)
    full = rows(["apple", "banana"], 100)
    sink.release(0, released_form(full, written_columns("value", full.column_names)))
    records = committed_records(kafka_broker, kafka_topic)
    assert sorted(records) == [(b"a", b"apple", {}), (b"b", b"banana", {})]


def test_a_repeated_release_of_a_batch_produces_nothing(kafka_broker, kafka_topic):
    sink = output(kafka_broker, kafka_topic)
    sink.release(0, rows(["a1", "a2"], 0))
    sink.release(0, rows(["a1", "a2"], 0))  # the commit ran again after a crash
    sink.release(1, rows(["b1"], 2))
    again = output(kafka_broker, kafka_topic)  # a new process, same checkpoint
    again.release(1, rows(["b1"], 2))
    values = sorted(v for _, v, _ in committed_records(kafka_broker, kafka_topic))
    assert values == [b"a1", b"a2", b"b1"]


def test_a_transaction_killed_midway_is_never_seen(kafka_broker, kafka_topic):
    sink = output(kafka_broker, kafka_topic, "ck-killed")
    sink.release(0, rows(["kept"], 0))
    # another process starts batch 1's transaction with the same id, sends, and dies
    script = f"""
import os, signal, warnings
warnings.simplefilter("ignore")
from kafka import KafkaProducer
producer = KafkaProducer(bootstrap_servers={kafka_broker.bootstrap_servers!r},
                         transactional_id={sink.transactional_id!r})
producer.init_transactions()
producer.begin_transaction()
producer.send({kafka_topic!r}, value=b"half-done")
producer.flush()
os.kill(os.getpid(), signal.SIGKILL)
"""
    died = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert died.returncode == -signal.SIGKILL, died.stderr.decode()[-2000:]
    sink.release(1, rows(["redone"], 1))  # fences the dead producer, aborting its records
    values = sorted(v for _, v, _ in committed_records(kafka_broker, kafka_topic))
    assert values == [b"kept", b"redone"]


def test_unknown_topic_and_unreachable_broker_fail_at_start(kafka_broker):
    with pytest.raises(ConfigError, match=r"option 'topic' = 'no-such-topic'.*existing topic"):
        output(kafka_broker, "no-such-topic").check()
    options = {"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t", "checkpointLocation": "c"}
    with pytest.raises(ConfigError, match=r"'kafka.bootstrap.servers' = '127.0.0.1:1'"):
        KafkaOutput(OptionReader("sink kafka", options)).check()
