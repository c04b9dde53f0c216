"""The gaps workload on Spark: flamestream's grouping against PySpark's per-key state in pandas.

Per key, the time since its previous event (events: ``benchmarks.compare.events``). Every
variant runs with ``Trigger.AvailableNow`` into fresh output and checkpoint directories and
writes Parquet; its checker reads the output back as ``(key, time, gap)`` rows and compares
them with :func:`benchmarks.compare.events.reference_gaps`.

``flamestream_gaps``
    the files front (``clock=record``: a record's global time is its ``time`` field, so a key's
    global-time order is its time order across the files) -> ``SparkGraph(gaps_graph())
    .write_stream`` -> the files sink (Parquet, ``release=tasks``), rows ``"key,time,gap"``.
``pyspark_gaps_pandas_state``
    ``readStream.text`` -> ``from_json`` -> ``groupBy(key).applyInPandasWithState`` (a key's
    rows of the batch sorted by time, the last time kept in the state) in append mode ->
    ``foreachBatch`` overwriting a Parquet directory per batch (idempotent).
``pyspark_gaps_transform_with_state``
    the same with ``transformWithStateInPandas`` (a ``StatefulProcessor`` with one value
    state), which needs the RocksDB state store: its query runs in ``spark.newSession()``
    (same SparkContext, its own SQL confs) with that provider set, so the other variants keep
    the default store.

The PySpark peers sort a key's events *within a batch* and carry the last time across
batches: they are right only if no event of a key reaches a later batch than an event of the
same key with a greater time. Here every run reads all files in one batch (``AvailableNow``
without ``maxFilesPerTrigger``), which makes that hold; flamestream's grouping does not need
it (an earlier event arriving late is replayed into place).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchmarks.compare.errors import MismatchError, SetupError
from benchmarks.compare.events import Gap, mismatch
from benchmarks.lib.workloads import files_options, gaps_graph

#: The peers' parse of an event line, and their output rows.
EVENT_DDL = "key string, time long"
GAP_DDL = "key string, time long, gap long"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def flamestream_writer(spark: Any, source: Path, out: Path, checkpoint: Path) -> Any:
    """Files front (``clock=record``) -> the gaps graph -> files sink (Parquet)."""
    from flamestream.spark import SparkGraph

    events = spark.readStream.format("flamestream").option("front", "files")
    events = events.option("path", str(source)).option("clock", "record")
    events = events.option("timestampField", "time")
    writer = SparkGraph(gaps_graph()).write_stream(events, checkpoint_location=str(checkpoint))
    return files_options(writer, out, fmt="parquet").trigger(availableNow=True)


def _events(spark: Any, source: Path) -> Any:
    """``readStream.text`` of the event files, parsed by ``from_json``: ``key, time``."""
    from pyspark.sql import functions as F

    parsed = F.from_json(F.col("value"), EVENT_DDL).alias("event")
    return spark.readStream.text(str(source)).select(parsed).select("event.*")


def _append_batches(found: Any, out: Path, checkpoint: Path) -> Any:
    """``found`` (append mode) -> ``foreachBatch`` overwriting Parquet ``batch=<id>``."""

    def write_batch(batch: Any, batch_id: int) -> None:
        # a replayed batch overwrites its own directory: idempotent, so exactly once
        batch.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))

    return (
        found.writeStream.outputMode("append")
        .foreachBatch(write_batch)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
    )


def gaps_in_pandas(key: tuple[str], batches: Iterator[Any], state: Any) -> Iterator[Any]:
    """``applyInPandasWithState``'s function: a key's rows of a batch -> its gaps.

    Sorts the batch's times, prepends the last time of earlier batches (the state) and emits
    each later time with its difference to the one before; keeps the last time.
    """
    import numpy as np
    import pandas as pd

    times = np.sort(np.concatenate([batch["time"].to_numpy() for batch in batches]))
    if state.exists:
        times = np.concatenate([np.array([state.get[0]], dtype=times.dtype), times])
    state.update((int(times[-1]),))
    yield pd.DataFrame({"key": key[0], "time": times[1:], "gap": np.diff(times)})


def pandas_state_writer(spark: Any, source: Path, out: Path, checkpoint: Path) -> Any:
    """``readStream.text`` -> parse -> ``applyInPandasWithState`` (append) -> foreachBatch."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    found = (
        _events(spark, source)
        .groupBy("key")
        .applyInPandasWithState(
            gaps_in_pandas, GAP_DDL, "last long", "append", GroupStateTimeout.NoTimeout
        )
    )
    return _append_batches(found, out, checkpoint)


def gaps_processor() -> Any:
    """A ``StatefulProcessor`` emitting a key's gaps, its last time in a value state."""
    import numpy as np
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor

    class Gaps(StatefulProcessor):  # type: ignore[misc]
        """Per key: the batch's times sorted, each with its difference to the one before."""

        def init(self, handle: Any) -> None:
            self.last = handle.getValueState("last", "time long")

        def handleInputRows(
            self, key: tuple[str], rows: Iterator[Any], timerValues: Any
        ) -> Iterator[Any]:
            times = np.sort(np.concatenate([batch["time"].to_numpy() for batch in rows]))
            if self.last.exists():
                times = np.concatenate([np.array([self.last.get()[0]], dtype=times.dtype), times])
            self.last.update((int(times[-1]),))
            yield pd.DataFrame({"key": key[0], "time": times[1:], "gap": np.diff(times)})

        def close(self) -> None:
            pass

    return Gaps()


def transform_with_state_writer(spark: Any, source: Path, out: Path, checkpoint: Path) -> Any:
    """``readStream.text`` -> parse -> ``transformWithStateInPandas`` (append) -> foreachBatch.

    In a new session of the same SparkContext with the RocksDB state store, which
    ``transformWithStateInPandas`` requires (a SQL conf, fixed for a query at its start).
    """
    try:  # PySpark's state client in the Python workers imports it, and no pyspark extra has it
        import google.protobuf  # noqa: F401
    except ImportError as e:
        msg = (
            "pyspark_gaps_transform_with_state: transformWithStateInPandas needs the protobuf "
            "package in Spark's Python (PySpark's state client imports google.protobuf); "
            "hint: pip install protobuf"
        )
        raise SetupError(msg) from e
    session = spark.newSession()
    session.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    found = (
        _events(session, source)
        .groupBy("key")
        .transformWithStateInPandas(
            statefulProcessor=gaps_processor(),
            outputStructType=GAP_DDL,
            outputMode="Append",
            timeMode="None",
        )
    )
    return _append_batches(found, out, checkpoint)


def _rows(table: Any) -> list[Gap]:
    """``(key, time, gap)`` of an Arrow table with those columns."""
    columns = [table.column(name).to_pylist() for name in ("key", "time", "gap")]
    return list(zip(*columns, strict=True))


def check_flamestream(spark: Any, out: Path, expected: list[Gap], name: str) -> dict[str, int]:
    """Check the sink's ``"key,time,gap"`` rows: exactly the reference gaps, each once."""
    from pyspark.sql import functions as F

    parts = F.split(F.col("value"), ",")
    found = (
        spark.read.format("parquet")
        .schema("value string")
        .load(str(out))
        .select(
            parts[0].alias("key"),
            parts[1].cast("long").alias("time"),
            parts[2].cast("long").alias("gap"),
        )
    )
    return _compare(_rows(found.toArrow()), expected, name)


def check_peer(spark: Any, out: Path, expected: list[Gap], name: str) -> dict[str, int]:
    """Check the peer's Parquet batches: their rows together are the reference gaps, once."""
    found = spark.read.parquet(str(out)).select("key", "time", "gap")
    return _compare(_rows(found.toArrow()), expected, name)


def _compare(found: list[Gap], expected: list[Gap], name: str) -> dict[str, int]:
    problem = mismatch(expected, found)
    if problem is not None:
        msg = f"{name}: gaps per key: {problem}"
        raise MismatchError(msg)
    return {"output_rows": len(found)}
