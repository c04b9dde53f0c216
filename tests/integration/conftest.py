"""Fixtures for tests against a real single-node Kafka broker (see flamestream.testing.kafka)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from flamestream.testing.kafka import KafkaBroker


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[KafkaBroker]:
    """One broker for the whole session, on free loopback ports; stopped at the end."""
    with KafkaBroker() as broker:
        yield broker


@pytest.fixture
def kafka_topic(kafka_broker: KafkaBroker) -> str:
    """A fresh uuid-named topic with 3 partitions on the session broker."""
    name = f"test-{uuid.uuid4().hex}"
    kafka_broker.create_topic(name, partitions=3)
    return name
