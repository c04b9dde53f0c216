"""The ``kafka`` front: the records of Kafka topics, one front per topic-partition.

Each partition of the ``subscribe`` topics is a front with source key ``<topic>-<partition>``
(front ids follow the sorted keys); positions are Kafka offsets, so a record's determinant is
``(topic-partition, offset)``. With ``isolationLevel=read_committed`` (the default) planning
reads up to each partition's last stable offset and aborted transactions never appear; offsets
are not contiguous then (transaction markers, aborted records, compaction), so a range of
``k`` offsets holds at most ``k`` records.

Options (named like Spark's own Kafka source where they mean the same):
``kafka.bootstrap.servers`` (required), ``subscribe`` (comma-separated topics, required),
``startingOffsets`` (``earliest`` or ``latest``), ``isolationLevel`` (``read_committed`` or
``read_uncommitted``), ``pollTimeoutMs`` (10000), plus the common front options.
With ``clock=record`` a record's global time is its Kafka timestamp, clamped monotonic per
partition.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

from flamestream.errors import ConfigError, FlameStreamError, RecordError
from flamestream.spark.connector.front import FrontSource
from flamestream.spark.connector.offsets import FrontRange
from flamestream.spark.connector.options import OptionReader

with warnings.catch_warnings():
    # kafka-python 3.0.12 reads its protocol schemas with importlib.resources' legacy API on
    # import: DeprecationWarnings nobody using this module can act on.
    warnings.filterwarnings(
        "ignore", r"(read|open)_text is deprecated", category=DeprecationWarning
    )
    from kafka import KafkaConsumer, TopicPartition
    from kafka.errors import KafkaError, OffsetOutOfRangeError

#: Records per Arrow batch produced by ``read_range`` (and per poll).
CHUNK = 8192
#: How long the connect check at load() may take before the brokers count as unreachable.
PROBE_TIMEOUT_MS = 5000
#: Driver-side requests (metadata, list offsets) while planning.
PLAN_TIMEOUT_MS = 30000
#: Planning refreshes the topics' metadata (new partitions, deleted topics) at most this often.
METADATA_MAX_AGE_S = 1.0
#: One poll while reading; progress is checked between polls, so a poll that only moves past
#: a transaction marker (and returns no record) does not block for the whole pollTimeoutMs.
POLL_SLICE_MS = 100
#: Topics listed in the error for a topic that does not exist.
MAX_LISTED_TOPICS = 50


class KafkaFrontError(FlameStreamError):
    """Planning could not talk to the brokers (they went away, or a subscribed topic did)."""


class KafkaReadError(RecordError):
    """A read task could not get a range's records; names the step and (partition, offset)."""

    def __init__(self, step: str, determinant: Any, reason: str) -> None:
        super().__init__(step, determinant, reason)
        self.args = (f"step {step!r}: cannot read the record at {determinant}: {reason}",)


class KafkaSource(FrontSource):
    """The partitions of Kafka topics."""

    kind = "kafka"
    step = "front kafka"
    limit_alias = "maxOffsetsPerTrigger"
    record_time_from = "the record's Kafka timestamp (ms)"

    def __init__(self, options: OptionReader) -> None:
        self.servers = options.string("kafka.bootstrap.servers", required=True)
        brokers = [server.strip() for server in self.servers.split(",")]
        if not all(brokers):
            raise ConfigError(
                self.step, "kafka.bootstrap.servers", self.servers, "host:port[,host:port...]"
            )
        self.brokers = brokers
        subscribe = options.string("subscribe", required=True)
        topics = [topic.strip() for topic in subscribe.split(",")]
        if not all(topics):
            raise ConfigError(self.step, "subscribe", subscribe, "topic[,topic...]")
        self.topics = sorted(set(topics))
        self.starting = options.choice("startingOffsets", ["earliest", "latest"], "earliest")
        self.isolation = options.choice(
            "isolationLevel", ["read_committed", "read_uncommitted"], "read_committed"
        )
        self.poll_timeout_ms = options.integer("pollTimeoutMs", 10000, minimum=1)
        self._driver: Any = None  # driver-side consumer for planning, created lazily
        self._starts: dict[str, int] = {}  # driver side: earliest offsets of new partitions
        self._metadata: tuple[float, set[str]] | None = None  # driver side: (when, topics)
        existing = self._probe()
        missing = [topic for topic in self.topics if topic not in existing]
        if missing:
            listed = sorted(existing)[:MAX_LISTED_TOPICS]
            more = len(existing) - len(listed)
            shown = ", ".join(listed) + (f" … and {more} more" if more > 0 else "")
            raise ConfigError(
                self.step,
                "subscribe",
                subscribe,
                f"existing topics; no topic {', '.join(map(repr, missing))} on "
                f"{self.servers}. Existing topics: {shown or '(none)'}",
            )

    # --- clients ---------------------------------------------------------------------------

    def _consumer(self, **configs: Any) -> Any:
        """A consumer without group, commits or offset reset: positions are ours alone."""
        settings: dict[str, Any] = {
            "bootstrap_servers": self.brokers,
            "client_id": "flamestream-front",
            "group_id": None,
            "enable_auto_commit": False,
            "auto_offset_reset": "none",  # an offset gone from the log fails, never skips
            "isolation_level": self.isolation,
            "allow_auto_create_topics": False,
            "retry_backoff_ms": 20,
        }
        settings.update(configs)
        return KafkaConsumer(**settings)

    def _probe(self) -> set[str]:
        """The topics on the brokers, or a ConfigError within a few seconds."""
        result: dict[str, Any] = {}

        def probe() -> None:
            try:
                consumer = self._consumer(
                    bootstrap_timeout_ms=PROBE_TIMEOUT_MS, request_timeout_ms=PROBE_TIMEOUT_MS
                )
                try:
                    result["topics"] = set(consumer.topics())
                finally:
                    consumer.close(timeout_ms=1000)
            except Exception as exc:  # reported below, naming the option
                result["error"] = exc

        thread = threading.Thread(target=probe, name="flamestream-kafka-probe", daemon=True)
        thread.start()
        thread.join(PROBE_TIMEOUT_MS / 1000 + 3)
        if "topics" in result:
            topics: set[str] = result["topics"]
            return topics
        error = result.get("error")
        if error is None:
            reason = "no answer"
        elif type(error).__name__ in str(error):  # kafka-python's errors name themselves
            reason = str(error)
        else:
            reason = f"{type(error).__name__}: {error}"
        raise ConfigError(
            self.step,
            "kafka.bootstrap.servers",
            self.servers,
            f"reachable Kafka brokers; could not be reached within "
            f"{PROBE_TIMEOUT_MS // 1000} s ({reason})",
        )

    def _planner(self) -> Any:
        if self._driver is None:
            self._driver = self._consumer(
                client_id="flamestream-front-planner",
                bootstrap_timeout_ms=PLAN_TIMEOUT_MS,
                request_timeout_ms=PLAN_TIMEOUT_MS,
            )
        return self._driver

    def _partitions(self) -> list[Any]:
        """Every partition of the subscribed topics, from metadata at most a second old."""
        consumer = self._planner()
        now = time.monotonic()
        if self._metadata is None or now - self._metadata[0] >= METADATA_MAX_AGE_S:
            # a metadata request (sees new partitions); kafka-python holds back one that
            # follows another closely by ~100 ms, and planning asks twice per trigger
            self._metadata = (now, set(consumer.topics()))
        existing = self._metadata[1]
        gone = [topic for topic in self.topics if topic not in existing]
        if gone:
            msg = (
                f"{self.step}: subscribed topic(s) {', '.join(map(repr, gone))} no longer "
                f"exist on {self.servers}; their partitions cannot be read further"
            )
            raise KafkaFrontError(msg)
        return [
            TopicPartition(topic, partition)
            for topic in self.topics
            for partition in sorted(consumer.partitions_for_topic(topic))
        ]

    @staticmethod
    def _key(tp: Any) -> str:
        return f"{tp.topic}-{tp.partition}"

    @staticmethod
    def _topic_partition(key: str) -> Any:
        topic, partition = key.rsplit("-", 1)
        return TopicPartition(topic, int(partition))

    # --- planning (driver) -----------------------------------------------------------------

    def payload_fields(self) -> list[pa.Field]:
        """Key and value bytes, the topic, the partition and the record's timestamp in ms."""
        return [
            pa.field("key", pa.binary()),
            pa.field("value", pa.binary()),
            pa.field("topic", pa.string()),
            pa.field("partition", pa.int32()),
            pa.field("timestamp", pa.int64()),
        ]

    def discover(self, known: Mapping[str, int]) -> dict[str, int]:
        """Every partition with its end offset (the last stable offset for read_committed)."""
        try:
            partitions = self._partitions()
            ends = self._planner().end_offsets(partitions, timeout_ms=PLAN_TIMEOUT_MS)
        except KafkaError as exc:
            msg = f"{self.step}: listing the end offsets on {self.servers} failed: {exc!r}"
            raise KafkaFrontError(msg) from exc
        return {self._key(tp): int(ends[tp]) for tp in partitions}

    def start_position(self, key: str, available: int, *, at_query_start: bool) -> int:
        """The log start offset; with ``latest``, the end offset for the query's first batch.

        A partition added while the query runs starts at its log start offset whatever
        ``startingOffsets`` says, as in Spark's own source: its records written before a
        planning saw it are read, not skipped. The reader stores what this returns in the
        offset of the batch that first sees the partition (a batch is planned even if no
        partition has records yet), so a restart resumes from there and never skips. With
        ``latest`` the reader calls this with the end it planned for that batch, which is
        the start, so the first range is empty.
        """
        if self.starting == "latest" and at_query_start:
            return available
        if key not in self._starts:
            try:
                partitions = self._partitions()
                begins = self._planner().beginning_offsets(partitions, timeout_ms=PLAN_TIMEOUT_MS)
            except KafkaError as exc:
                msg = f"{self.step}: listing the start offsets on {self.servers} failed: {exc!r}"
                raise KafkaFrontError(msg) from exc
            for tp, offset in begins.items():
                self._starts.setdefault(self._key(tp), int(offset))
        return self._starts.get(key, 0)

    def position_at_time(self, key: str, time: int) -> int | None:
        """Kafka's offset for ``time`` (ms): the first record at or after it, else the end."""
        tp = self._topic_partition(key)
        try:
            found = self._planner().offsets_for_times({tp: time}, timeout_ms=PLAN_TIMEOUT_MS)
            if found.get(tp) is not None:
                return int(found[tp].offset)
            return int(self._planner().end_offsets([tp], timeout_ms=PLAN_TIMEOUT_MS)[tp])
        except KafkaError as exc:
            msg = f"{self.step}: listing the offsets for time {time} on {self.servers}: {exc!r}"
            raise KafkaFrontError(msg) from exc

    def record_times(self, key: str, batch: pa.RecordBatch) -> pa.Array:
        """``clock=record``: each record's Kafka timestamp (CreateTime or LogAppendTime, ms)."""
        return batch.column("timestamp")

    def close(self) -> None:
        """Close the planning consumer."""
        driver, self._driver = self._driver, None
        self._metadata = None
        if driver is not None:
            driver.close(timeout_ms=1000)

    def __getstate__(self) -> dict[str, Any]:
        """Executors get the options, never a client."""
        state = dict(self.__dict__)
        state["_driver"] = None
        state["_starts"] = {}
        state["_metadata"] = None
        return state

    # --- reading (executors) ---------------------------------------------------------------

    def read_range(self, part: FrontRange) -> Iterator[pa.RecordBatch]:
        """The records with offsets in [start, end), in offset order.

        Offsets may have gaps (transaction markers, aborted records with read_committed,
        compaction): reading stops once the consumer's position reaches ``end`` and never
        returns a record at or past it. No progress for ``pollTimeoutMs`` raises.
        """
        tp = self._topic_partition(part.key)
        try:
            consumer = self._consumer(
                client_id="flamestream-front-reader",
                bootstrap_timeout_ms=self.poll_timeout_ms,
                max_poll_records=CHUNK,
            )
        except KafkaError as exc:
            reason = f"connecting to {self.servers} failed: {exc!r}"
            raise KafkaReadError(self.step, (part.key, part.start), reason) from exc
        try:
            yield from self._read(consumer, tp, part)
        finally:
            consumer.close(timeout_ms=1000)

    def _read(self, consumer: Any, tp: Any, part: FrontRange) -> Iterator[pa.RecordBatch]:
        consumer.assign([tp])
        consumer.seek(tp, part.start)
        rows = _Rows(tp.topic, tp.partition)
        position = part.start
        progressed = time.monotonic()
        while position < part.end:
            try:
                polled = consumer.poll(timeout_ms=POLL_SLICE_MS, max_records=CHUNK)
                reached = consumer.position(tp)
            except OffsetOutOfRangeError as exc:
                reason = (
                    f"poll: offset {position} is no longer in the log (retention or "
                    f"deleteRecords removed it): {exc!r}"
                )
                raise KafkaReadError(self.step, (part.key, position), reason) from exc
            except KafkaError as exc:
                reason = f"poll from {self.servers} failed: {exc!r}"
                raise KafkaReadError(self.step, (part.key, position), reason) from exc
            records = polled.get(tp, [])
            for record in records:
                if record.offset >= part.end:
                    break
                rows.add(record)
                if len(rows) >= CHUNK:
                    yield rows.flush()
            if reached is None:
                reached = position
            if records or reached > position:
                progressed = time.monotonic()
            elif (time.monotonic() - progressed) * 1000 >= self.poll_timeout_ms:
                reason = (
                    f"poll: no record within pollTimeoutMs={self.poll_timeout_ms} ms at "
                    f"offset {position}, before the planned end {part.end} "
                    f"(broker {self.servers} unreachable, or the records are gone?)"
                )
                raise KafkaReadError(self.step, (part.key, position), reason)
            position = max(position, reached)
        if len(rows):
            yield rows.flush()


class _Rows:
    """Column buffers for one Arrow batch of a partition's records."""

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self._clear()

    def _clear(self) -> None:
        self.offsets: list[int] = []
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.timestamps: list[int] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, record: Any) -> None:
        self.offsets.append(record.offset)
        self.keys.append(record.key)
        self.values.append(record.value)
        self.timestamps.append(record.timestamp)

    def flush(self) -> pa.RecordBatch:
        count = len(self.offsets)
        batch = pa.RecordBatch.from_pydict(
            {
                "position": pa.array(self.offsets, pa.int64()),
                "key": pa.array(self.keys, pa.binary()),
                "value": pa.array(self.values, pa.binary()),
                "topic": pa.array([self.topic] * count, pa.string()),
                "partition": pa.array([self.partition] * count, pa.int32()),
                "timestamp": pa.array(self.timestamps, pa.int64()),
            }
        )
        self._clear()
        return batch
