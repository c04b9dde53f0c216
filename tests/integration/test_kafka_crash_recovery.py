"""kafka -> kafka: kill the query at named points, restart it, compare with an unbroken run.

What a read_committed consumer sees in the output topic (one partition, so the release order
is visible) must equal, record for record and header for header, what an uninterrupted run
produced: nothing lost, nothing twice, aborted transactions invisible. After each crash, what
it sees must be the start of that.
"""

from __future__ import annotations

import uuid
import warnings
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from flamestream.testing.kafka import KafkaBroker

from ..crash import reachable_in_turn, run_chain, run_unbroken
from . import kafka_crash_job
from .test_kafka_sink import committed_records

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaProducer

JOB = "tests.integration.kafka_crash_job"

# One chain, each batch killed at three points in the order a run reaches them; the
# transaction is killed open in every batch.
CHAINS = [
    [
        "front.read:0",
        "sink.write:0",
        "sink.kafka.in_transaction:0",
        "sink.commit.start:1",
        "sink.kafka.in_transaction:1",
        "sink.commit.marked:1",
        "front.plan:2",
        "sink.kafka.in_transaction:2",
        "sink.commit.released:2",
    ],
]


@pytest.fixture(scope="module")
def source_topic(kafka_broker: KafkaBroker) -> str:
    name = f"crash-in-{uuid.uuid4().hex}"
    kafka_broker.create_topic(name, partitions=3)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap_servers)
    for i in range(30):
        producer.send(name, key=f"k{i % 4}".encode(), value=f"v{i:02d}".encode(), partition=i % 3)
    producer.flush()
    producer.close()
    return name


def job_args(broker: KafkaBroker, source: str, target: str, work: Path) -> list[str]:
    return [broker.bootstrap_servers, source, target, str(work / "ck")]


def fresh_output(broker: KafkaBroker) -> str:
    name = f"crash-out-{uuid.uuid4().hex}"
    broker.create_topic(name, partitions=1)
    return name


@pytest.fixture(scope="module")
def unbroken(
    spark: SparkSession, kafka_broker: KafkaBroker, source_topic: str, tmp_path_factory
) -> list:
    target = fresh_output(kafka_broker)
    args = job_args(kafka_broker, source_topic, target, tmp_path_factory.mktemp("ok"))
    run_unbroken(lambda s: kafka_crash_job.start(s, *args), spark)
    records = committed_records(kafka_broker, target)
    assert sorted(v for _, v, _ in records) == [f"v{i:02d}".encode() for i in range(30)]
    return records


def test_each_crash_comes_later_in_the_run_than_the_one_before():
    assert all(reachable_in_turn(chain) for chain in CHAINS)


@pytest.mark.parametrize("chain", CHAINS, ids=[f"chain{i}" for i in range(len(CHAINS))])
def test_killed_kafka_query_recovers_to_exactly_the_unbroken_output(
    chain, kafka_broker, source_topic, unbroken, tmp_path
):
    target = fresh_output(kafka_broker)

    def committed_so_far_is_a_start_of_unbroken(crash: str) -> None:
        so_far = committed_records(kafka_broker, target)
        assert so_far == unbroken[: len(so_far)], f"after {crash}"

    args = job_args(kafka_broker, source_topic, target, tmp_path)
    run_chain(JOB, args, chain, committed_so_far_is_a_start_of_unbroken)
    assert committed_records(kafka_broker, target) == unbroken
