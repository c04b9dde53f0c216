"""The ``kafka`` sink: released rows produced to a topic in one Kafka transaction per batch.

Each batch's release is a transaction of a producer with a stable ``transactional.id``: the
records, in global-time order, plus a *marker*, the offset ``batch id + 1`` committed for a
consumer group of the sink's own on the topic's partition 0 (``send_offsets_to_transaction``).
Records and marker become visible together or not at all. Before producing, the sink reads the
marker: a batch already committed is not produced again. Consumers reading with
``isolation_level='read_committed'`` therefore see each released row exactly once, even if the
query is killed in the middle of a release; a restarted producer with the same id fences off
and aborts the unfinished transaction.

Each record carries the row's ``key`` and ``value`` columns (bytes as they are, strings as
UTF-8, other types as JSON; ``value`` missing: the whole row as JSON) and headers
``flamestream-ts`` and ``flamestream-front`` with its global time. With the sink option
``columns=value`` the records have no headers (and a row without ``value`` is its payload
columns as JSON); ``all`` and ``value,time`` give the same records unless the row has no
``value`` column (then the JSON object holds the columns written).

Options: ``kafka.bootstrap.servers`` (required), ``topic`` (required, must exist),
``transactionalId`` (default: derived from the checkpoint location), plus the common sink
options (``columns`` among them).
"""

from __future__ import annotations

import hashlib
import json
import warnings
from typing import Any

import pyarrow as pa

from flamestream.errors import ConfigError
from flamestream.spark.connector.faults import crash_point
from flamestream.spark.connector.options import OptionReader
from flamestream.spark.connector.sink import SinkOutput

#: How long broker calls may take before the sink gives up (ms).
TIMEOUT_MS = 30_000


def _kafka() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import kafka

    return kafka


class KafkaOutput(SinkOutput):
    """A topic, written transactionally, one transaction per released batch."""

    kind = "kafka"

    def __init__(self, options: OptionReader) -> None:
        self.servers = options.string("kafka.bootstrap.servers", required=True)
        self.topic = options.string("topic", required=True)
        checkpoint = options.string("checkpointLocation", required=True)
        digest = hashlib.sha256(checkpoint.encode()).hexdigest()[:16]
        self.transactional_id = options.string("transactionalId", f"flamestream-{digest}")
        self.marker_group = f"{self.transactional_id}-released"
        self.step = options.step

    def check(self) -> None:
        """Fail at query start if the broker is unreachable or the topic does not exist."""
        step = self.step
        kafka = _kafka()
        try:
            consumer = kafka.KafkaConsumer(
                bootstrap_servers=self.servers,
                request_timeout_ms=5000,
                bootstrap_timeout_ms=5000,
            )
        except kafka.errors.KafkaError as exc:  # unreachable: fail fast, never hang
            raise ConfigError(
                step,
                "kafka.bootstrap.servers",
                self.servers,
                f"a reachable Kafka broker ({type(exc).__name__}: {exc})",
            ) from exc
        try:
            topics = consumer.topics()
        finally:
            consumer.close()
        if self.topic not in topics:
            known = ", ".join(sorted(t for t in topics if not t.startswith("__"))) or "none"
            raise ConfigError(step, "topic", self.topic, f"an existing topic ({known})")

    def release(self, batch_id: int, rows: pa.Table) -> None:
        """Produce the batch in one transaction with its marker, unless it was done before."""
        kafka = _kafka()
        marker_partition = kafka.TopicPartition(self.topic, 0)
        if self._released_through(kafka, marker_partition) > batch_id:
            return
        producer = kafka.KafkaProducer(
            bootstrap_servers=self.servers,
            transactional_id=self.transactional_id,
            request_timeout_ms=TIMEOUT_MS,
        )
        try:
            producer.init_transactions()  # fences and aborts an unfinished earlier attempt
            producer.begin_transaction()
            names = rows.column_names
            timed = "ts" in names  # not with columns=value
            for row in rows.to_pylist():
                headers = _time_headers(row) if timed else []
                value = row["value"] if "value" in names else row
                producer.send(
                    self.topic,
                    key=_encode(row.get("key")) if "key" in names else None,
                    value=_encode(value),
                    headers=headers,
                )
            producer.flush()
            crash_point("sink.kafka.in_transaction", batch_id)  # records sent, not committed
            marker = kafka.structs.OffsetAndMetadata(batch_id + 1, f"batch {batch_id}", -1)
            producer.send_offsets_to_transaction({marker_partition: marker}, self.marker_group)
            producer.commit_transaction()
        finally:
            producer.close()

    def _released_through(self, kafka: Any, partition: Any) -> int:
        """One more than the last batch whose transaction committed (0: none)."""
        consumer = kafka.KafkaConsumer(
            bootstrap_servers=self.servers,
            group_id=self.marker_group,
            enable_auto_commit=False,
            request_timeout_ms=TIMEOUT_MS,
        )
        try:
            committed = consumer.committed(partition)
        finally:
            consumer.close()
        return int(committed) if committed is not None else 0


def _time_headers(row: dict[str, Any]) -> list[tuple[str, bytes]]:
    """A record's headers: the row's global time."""
    return [
        ("flamestream-ts", str(row["ts"]).encode()),
        ("flamestream-front", str(row["front"]).encode()),
    ]


def _encode(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return json.dumps(value, separators=(",", ":"), default=str).encode()
