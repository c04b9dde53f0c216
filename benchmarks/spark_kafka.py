"""Spark Kafka benchmark: the flamestream kafka front vs Spark's built-in Kafka source.

A real broker (:class:`flamestream.testing.kafka.KafkaBroker`), one topic of ``--records``
records; both fronts read the whole topic (``Trigger.AvailableNow``, ``noop`` sink), the cases
interleaved, then one more untimed run per case into ``foreachBatch`` must see every record.
Spark's Kafka connector comes from Maven Central (``spark.jars.packages``), else
:data:`FALLBACK_CONNECTOR` (said in ``builtin_connector``). See docs/benchmarks.md. Prints
one JSON object::

    python -m benchmarks.spark_kafka [--records N] [--partitions P] [--repeat R]
        [--warmup W] [--record-bytes B] [--connector COORDINATES] [--no-fallback]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import uuid
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.lib import cli
from benchmarks.lib.record import emit, machine
from benchmarks.lib.session import local_spark
from benchmarks.lib.timing import TIMING_NOTE, Rounds, interleave, run_query, timings
from benchmarks.lib.workloads import line
from flamestream.testing.kafka import KAFKA_VERSION, KafkaBroker

with warnings.catch_warnings():
    # kafka-python reads its protocol schemas with a deprecated importlib.resources API
    warnings.filterwarnings(
        "ignore", r"(read|open)_text is deprecated", category=DeprecationWarning
    )
    import kafka
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

#: flamestream's rows/s over the built-in source's should reach this.
TARGET = 0.5

#: Bytes of every record's key: ``index`` in ten digits.
KEY_BYTES = 10

#: Spark's Kafka connector artifact, without the Scala suffix and version.
CONNECTOR_ARTIFACT = "org.apache.spark:spark-sql-kafka-0-10"

#: Used when the connector matching the installed PySpark is not on Maven Central: the newest
#: release there, with its token provider (whose own release is missing there) replaced by the
#: newest one that is. Spark confs, applied as given.
FALLBACK_CONNECTOR: dict[str, str] = {
    "spark.jars.packages": "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0",
    "spark.jars.excludes": "org.apache.spark:spark-token-provider-kafka-0-10_2.13",
    "spark.jars": (
        "https://repo1.maven.org/maven2/org/apache/spark/spark-token-provider-kafka-0-10_2.13/"
        "4.0.0/spark-token-provider-kafka-0-10_2.13-4.0.0.jar"
    ),
}


def key(index: int) -> bytes:
    """Key of record ``index``: a pure function of ``index``, :data:`KEY_BYTES` bytes."""
    return b"%010d" % index


def value(index: int, size: int) -> bytes:
    """Value of record ``index``: a pure function of ``index``, ``size`` bytes."""
    text = line(index)
    while len(text) < size:
        text += " " + line(index + len(text))
    return text[:size].encode()


@dataclass(frozen=True)
class Check:
    """Rows a query read, and crc32 sums of their key and value bytes."""

    rows: int
    key_crc32_sum: int
    value_crc32_sum: int


def produce(
    servers: str, topic: str, records: int, partitions: int, size: int
) -> tuple[float, Check]:
    """Send ``records`` records round robin over the partitions.

    Returns the seconds until all were acknowledged, and what a reader of the whole topic
    must see (count, crc32 sums of the keys and the values).
    """
    keys_crc = values_crc = 0
    began = time.perf_counter()
    producer = KafkaProducer(
        bootstrap_servers=servers,
        acks=1,
        linger_ms=20,
        batch_size=1 << 20,
        max_request_size=8 << 20,
        enable_idempotence=False,  # idempotence needs acks=all
        metrics_enabled=False,
    )
    try:
        for index in range(records):
            k, v = key(index), value(index, size)
            keys_crc += zlib.crc32(k)
            values_crc += zlib.crc32(v)
            producer.send(topic, value=v, key=k, partition=index % partitions)
        producer.flush()
    finally:
        producer.close()
    elapsed = time.perf_counter() - began
    consumer = KafkaConsumer(bootstrap_servers=servers)
    try:
        landed = sum(
            consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)]).values()
        )
    finally:
        consumer.close()
    if landed != records:
        msg = f"produced {records} records but the topic's end offsets sum to {landed}"
        raise RuntimeError(msg)
    return elapsed, Check(records, keys_crc, values_crc)


def scala_binary_version() -> str:
    """The Scala binary version of PySpark's jars (``2.13``), from its scala-library jar."""
    import pyspark

    for jar in sorted((Path(pyspark.__file__).parent / "jars").glob("scala-library-*.jar")):
        match = re.fullmatch(r"scala-library-(\d+)\.(\d+)\.[\w.-]+\.jar", jar.name)
        if match:
            return f"{match.group(1)}.{match.group(2)}"
    return "2.13"


def start_spark_with_connector(
    requested: str, fallback: bool
) -> tuple[Any, dict[str, str], str | None]:
    """A session with the requested connector, else (if allowed) with the fallback one.

    Returns the session, the connector confs used, and why the fallback was taken (or None).
    """
    from pyspark.errors import PySparkRuntimeError

    wanted = {"spark.jars.packages": requested}
    try:
        return local_spark("flamestream-spark-kafka", wanted), wanted, None
    except PySparkRuntimeError as exc:  # ivy could not resolve it: the JVM exits at start
        if not fallback:
            raise
        reason = (
            f"{requested} could not be resolved from Maven Central (the JVM exited at start: "
            f"{exc.getCondition()}); used the fallback connector instead"
        )
    print(f"spark_kafka: {reason}", file=sys.stderr)
    return (
        local_spark("flamestream-spark-kafka", FALLBACK_CONNECTOR),
        dict(FALLBACK_CONNECTOR),
        reason,
    )


def crc32c_implementation() -> str:
    """``c`` if kafka-python checks CRC32C with the ``crc32c`` extension, else ``python``."""
    from kafka.record import util

    return "c" if getattr(util, "crc32c_c", None) is not None else "python"


def arguments(argv: list[str] | None) -> argparse.Namespace:
    """The topic, the records and the connector."""
    parser = cli.parser(__doc__, timeout=1800.0)
    cli.flag(parser, "--records", 1_000_000)
    cli.flag(parser, "--partitions", 4)
    cli.flag(parser, "--record-bytes", 60, "bytes of each value")
    default = f"{CONNECTOR_ARTIFACT}_<scala>:<pyspark version>"
    cli.flag(parser, "--connector", None, f"Spark's Kafka connector (default: {default})", type=str)
    parser.add_argument(
        "--no-fallback", action="store_true", help="fail if --connector cannot be resolved"
    )
    return parser.parse_args(argv)


#: The cases and the format each reads with.
CASES = {"flamestream": "flamestream", "builtin": "kafka"}


@dataclass
class Measured:
    """What a run measured: production, the connector used, the timed rounds, the checks."""

    produce_seconds: float
    expected: Check
    connector: dict[str, str]
    fallback_reason: str | None
    spark_version: str
    rounds: Rounds[str]
    checks: dict[str, Check]


class Reads:
    """The cases' queries over one topic."""

    def __init__(self, spark: Any, servers: str, topic: str, work: cli.Workdir) -> None:
        self.spark, self.servers, self.topic, self.work = spark, servers, topic, work

    def define(self, fmt: str, sink: Any = None) -> Callable[[Path, Path], Any]:
        """The whole topic, read with ``fmt``, to ``noop`` (or ``foreachBatch(sink)``)."""

        def writer(_out: Path, ck: Path) -> Any:
            reader = self.spark.readStream.format(fmt)
            if fmt == "flamestream":
                reader = reader.option("front", "kafka")
            reader = reader.option("kafka.bootstrap.servers", self.servers)
            reader = reader.option("subscribe", self.topic).option("startingOffsets", "earliest")
            stream = reader.load().writeStream
            stream = stream.foreachBatch(sink) if sink else stream.format("noop")
            return stream.option("checkpointLocation", str(ck)).trigger(availableNow=True)

        return writer

    def checked(self, fmt: str, timeout: float) -> Check:
        """Run the case once more into foreachBatch, summing what each batch read."""
        from pyspark.sql import functions as F

        totals = [0, 0, 0]

        def add(batch: Any, _batch_id: int) -> None:
            sums = (F.sum(F.crc32(F.col("key"))), F.sum(F.crc32(F.col("value"))))
            row = batch.agg(F.count(F.lit(1)), *sums).first()
            for i in range(3):
                totals[i] += int(row[i] or 0)

        run_query(lambda: self.define(fmt, add)(*self.work.fresh()), timeout)
        return Check(*totals)


def measure(args: argparse.Namespace, requested: str, work: cli.Workdir) -> Measured:
    """Start a broker, fill a topic, time both cases interleaved, check each once more."""
    topic, broker, spark = f"bench-{uuid.uuid4().hex[:12]}", KafkaBroker(), None
    try:
        broker.start()
        broker.create_topic(topic, partitions=args.partitions)
        servers = broker.bootstrap_servers
        produced = produce(servers, topic, args.records, args.partitions, args.record_bytes)
        spark, connector, reason = start_spark_with_connector(requested, not args.no_fallback)
        reads = Reads(spark, servers, topic, work)
        rounds = interleave({case: reads.define(fmt) for case, fmt in CASES.items()}, work, args)
        checks = {case: reads.checked(fmt, args.timeout) for case, fmt in CASES.items()}
        return Measured(*produced, connector, reason, spark.version, rounds, checks)
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()
        work.close()


def analyse(args: argparse.Namespace, requested: str, m: Measured) -> dict[str, Any]:
    """Timings, ratios and the checks; an error unless every case read every record."""
    read_counts = {case: sorted({r.rows for r in done}) for case, done in m.rounds.runs.items()}
    checks = {case: c.__dict__ for case, c in m.checks.items()}
    if any(c != m.expected for c in m.checks.values()) or any(
        n != [args.records] for n in read_counts.values()
    ):
        return {
            "error": "a case did not read exactly the produced records "
            "(count, crc32 sums of the keys and the values)",
            "expected": m.expected.__dict__,
            "checked": checks,
            "timed_runs_rows": read_counts,
        }
    timed = timings(args.records, m.rounds.runs, m.rounds.warmups)
    ratio = timed.rate["flamestream"] / timed.rate["builtin"]
    steady_ratio = timed.steady["flamestream"] / timed.steady["builtin"]
    return {
        "machine": machine(
            m.spark_version,
            kafka_broker=KAFKA_VERSION,
            kafka_python=kafka.__version__,
            kafka_python_crc32c=crc32c_implementation(),
        ),
        "builtin_connector": {
            "requested": requested,
            "used": m.connector,
            "fallback_reason": m.fallback_reason,
        },
        "input": {
            "records": args.records,
            "partitions": args.partitions,
            "key_bytes": KEY_BYTES,
            "value_bytes": args.record_bytes,
            "payload_bytes": args.records * (KEY_BYTES + args.record_bytes),
        },
        "production": {
            "seconds": round(m.produce_seconds, 3),
            "records_per_second": round(args.records / m.produce_seconds),
        },
        **timed.report,
        "durations_last_run_seconds": {
            case: {name: round(s, 3) for name, s in sorted(done[-1].durations.items())}
            for case, done in m.rounds.runs.items()
        },
        "check": {"expected": m.expected.__dict__, **checks},
        "ratios": {
            "flamestream_vs_builtin_rows_per_second": round(ratio, 3),
            "flamestream_vs_builtin_steady_rows_per_second": round(steady_ratio, 3),
        },
        "target": {
            "flamestream_vs_builtin_rows_per_second": TARGET,
            "met": ratio >= TARGET,
            "steady_met": steady_ratio >= TARGET,
        },
        "notes": NOTES,
    }


def main(argv: list[str] | None = None) -> int:
    """Start a broker, fill a topic, run both cases, check them, print JSON."""
    args = arguments(argv)
    import pyspark

    scala = scala_binary_version()
    requested = args.connector or f"{CONNECTOR_ARTIFACT}_{scala}:{pyspark.__version__}"
    work = cli.Workdir(args.work, "flamestream-bench-kafka-")
    return emit(analyse(args, requested, measure(args, requested, work)))


NOTES = [
    TIMING_NOTE + " Over the whole topic: no maxOffsetsPerTrigger, startingOffsets earliest. "
    "Both write to the noop sink, so the front is what differs.",
    "phases_median_seconds: start_to_first_batch is start() to the first batch's trigger "
    "timestamp; add_batch Spark's addBatch summed over batches (the read tasks and the noop "
    "write); after_last_batch the wall time beyond the triggers (query shutdown). "
    "durations_last_run_seconds: every durationMs of the last timed run, summed, in seconds.",
    "flamestream: front 'kafka' (kafka-python consumers, one read task per topic-partition, "
    "isolationLevel read_committed); builtin: format('kafka') (Java client, "
    "read_uncommitted). The producer is not transactional: both read the same records.",
    "check: one more untimed run per case into foreachBatch (count, sums of crc32(key) and "
    "crc32(value)) must equal what was produced, and every timed run report exactly the "
    "produced rows; else an error JSON and exit 1.",
    "production: KafkaProducer (acks=1, linger 20 ms, 1 MiB batches), round robin over the "
    "partitions; its seconds include making the records and their crc32 sums. Keys: the "
    "index in 10 digits; values: benchmarks.lib.workloads.line(index) cut to value_bytes.",
    "machine.kafka_python_crc32c: 'c' when kafka-python checks record batches' CRC32C with "
    "the crc32c extension, 'python' when in pure Python (which then dominates the "
    "flamestream front's read time and the production time).",
]


if __name__ == "__main__":
    raise SystemExit(main())
