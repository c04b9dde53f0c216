"""The word count's Spark variants: flamestream's (declared or lambdas) and PySpark's.

PySpark's: plain (``explode(split)``, all in the JVM) and with the split as an Arrow-optimized
Python UDF (the peer of flamestream's word count written with lambdas: Python per line).

All run with ``Trigger.AvailableNow`` into fresh output and checkpoint directories, on the
shared ``local[2]`` session; each has a reader that turns its output back into word counts.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, Literal

from benchmarks.compare.corpus import mismatch
from benchmarks.compare.errors import MismatchError
from benchmarks.lib.workloads import files_options, readme_word_count_graph, word_count_graph

Release = Literal["latest", "every"]


def flamestream_writer(
    spark: Any,
    source: Path,
    out: Path,
    checkpoint: Path,
    release: Release,
    fused: bool = True,
    declared: bool = True,
    columns: str = "all",
) -> Any:
    """Files front -> word count (``count``) -> files sink (Parquet, ``release=tasks``).

    The way the docs recommend: the count declared with ``count``, the render with a
    ``Template``, and the front's reader
    going to ``write_stream`` unloaded, so the graph's first stage (split and count, for
    ``latest`` combined per word in Arrow) runs in the front's read tasks and the keyed stage
    (with its render step) in the sink's write tasks. ``fused=False``: ``apply`` on the
    loaded front, then ``writeStream`` (two passes). ``declared=False`` (the
    ``flamestream_lambdas`` variant): the count written out as ``map_reduce`` with a lambda
    mapper and rendered by a lambda (Python per word: the general path).
    """
    from flamestream.spark import SparkGraph

    lines = spark.readStream.format("flamestream").option("front", "files")
    lines = lines.option("path", str(source))
    flow = word_count_graph(commutative=True, declared=declared)
    graph = SparkGraph(flow, release=release)
    ck = str(checkpoint)
    if fused:
        writer = graph.write_stream(lines, checkpoint_location=ck)
    else:
        rows = graph.apply(lines.load(), checkpoint_location=ck)
        writer = rows.writeStream.format("flamestream").option("checkpointLocation", ck)
    # Parquet, as the plain variant writes: JSON lines of 4.8M rows (metas and all) were a
    # third of the every-update variant's write tasks, and 16x the bytes
    # columns: the sink's columns option (all, value or value,time: docs/connectors.md)
    written = files_options(writer, out, fmt="parquet").option("columns", columns)
    return written.trigger(availableNow=True)


def readme_writer(spark: Any, source: Path, out: Path, checkpoint: Path, apply: bool) -> Any:
    """The README's first way: its lambda graph, ``release="every"``, JSON files sink.

    ``apply``: ``apply`` on the loaded front, then ``writeStream`` (6 crossings per word);
    else the front's reader to ``write_stream`` (2).
    """
    from flamestream.spark import SparkGraph

    lines = spark.readStream.format("flamestream").option("front", "files")
    lines = lines.option("path", str(source))
    graph = SparkGraph(readme_word_count_graph())
    ck = str(checkpoint)
    if apply:
        rows = graph.apply(lines.load(), checkpoint_location=ck)
        writer = rows.writeStream.format("flamestream").option("checkpointLocation", ck)
    else:
        writer = graph.write_stream(lines, checkpoint_location=ck)
    return files_options(writer, out, fmt="json").trigger(availableNow=True)


def plain_writer(spark: Any, source: Path, out: Path, checkpoint: Path) -> Any:
    """``readStream.text`` -> split / explode -> ``groupBy.count`` (update) -> foreachBatch."""
    from pyspark.sql import functions as F

    found = (
        spark.readStream.text(str(source))
        .select(F.explode(F.split(F.col("value"), " ")).alias("word"))
        .where(F.col("word") != "")
        .groupBy("word")
        .count()
    )
    return _update_batches(found, out, checkpoint)


def udf_writer(spark: Any, source: Path, out: Path, checkpoint: Path) -> Any:
    """``readStream.text`` -> ``str.split`` as an Arrow Python UDF -> explode -> count.

    The UDF declared as PySpark's docs show it (``@udf(returnType=..., useArrow=True)``):
    the lines go to Python in Arrow batches, each line's words come back as an array. Then
    ``groupBy.count`` in update mode and the same ``foreachBatch`` as ``plain_writer``.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, StringType

    @F.udf(returnType=ArrayType(StringType()), useArrow=True)
    def split_words(line: str) -> list[str]:
        return line.split()

    found = (
        spark.readStream.text(str(source))
        .select(F.explode(split_words(F.col("value"))).alias("word"))
        .groupBy("word")
        .count()
    )
    return _update_batches(found, out, checkpoint)


def _update_batches(found: Any, out: Path, checkpoint: Path) -> Any:
    """``found`` (update mode) -> ``foreachBatch`` overwriting Parquet ``batch=<id>``."""
    from pyspark.sql import DataFrame

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        # a replayed batch overwrites its own directory: idempotent, so exactly once
        batch.write.mode("overwrite").parquet(str(out / f"batch={batch_id}"))

    return (
        found.writeStream.outputMode("update")
        .foreachBatch(write_batch)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
    )


def check_flamestream(
    spark: Any, out: Path, expected: Counter[str], release: Release, name: str | None = None
) -> dict[str, int]:
    """Check the sink's ``word=n`` rows: per word the highest n is the Counter's.

    Also: ``every`` releases each update once (rows = distinct n = the count), ``latest``
    no count twice (rows = distinct n). Returns the rows released; raises MismatchError.
    """
    from pyspark.sql import functions as F

    parsed = (
        spark.read.format("parquet")
        .schema("value string")
        .load(str(out))
        .select(
            F.regexp_extract("value", r"^(.*)=\d+$", 1).alias("word"),
            F.regexp_extract("value", r"=(\d+)$", 1).cast("long").alias("n"),
        )
    )
    summary = parsed.groupBy("word").agg(F.max("n"), F.count(F.lit(1)), F.count_distinct("n"))
    found = {r[0]: (int(r[1]), int(r[2]), int(r[3])) for r in summary.collect()}
    problem = mismatch(expected, {w: top for w, (top, _, _) in found.items()})
    if problem is None:
        repeated = [w for w, (_, rows, distinct) in found.items() if rows != distinct]
        if release == "every":
            repeated += [w for w, (top, rows, _) in found.items() if rows != top]
        if repeated:
            problem = f"{len(repeated)} words with a count released twice or not at all"
            problem += f", e.g. {sorted(repeated)[:5]}"
    if problem is not None:
        msg = f"{name or 'flamestream_' + release}: highest count released per word: {problem}"
        raise MismatchError(msg)
    return {"output_rows": sum(rows for _, rows, _ in found.values())}


def check_readme(spark: Any, out: Path, expected: Counter[str], name: str) -> dict[str, int]:
    """Check the README graph's JSON rows ``Reduced(key='w', value=n)``: every update once."""
    from pyspark.sql import functions as F

    pattern = r"^Reduced\(key='(.*)', value=(\d+)\)$"
    parsed = (
        spark.read.format("json")
        .schema("value string")
        .load(str(out))
        .select(
            F.regexp_extract("value", pattern, 1).alias("word"),
            F.regexp_extract("value", pattern, 2).cast("long").alias("n"),
        )
    )
    summary = parsed.groupBy("word").agg(F.max("n"), F.count(F.lit(1)), F.count_distinct("n"))
    found = {r[0]: (int(r[1]), int(r[2]), int(r[3])) for r in summary.collect()}
    problem = mismatch(expected, {w: top for w, (top, _, _) in found.items()})
    if problem is None:
        wrong = [w for w, (top, rows, distinct) in found.items() if not top == rows == distinct]
        if wrong:
            problem = f"{len(wrong)} words not released once per update, e.g. {sorted(wrong)[:5]}"
    if problem is not None:
        msg = f"{name}: {problem}"
        raise MismatchError(msg)
    return {"output_rows": sum(rows for _, rows, _ in found.values())}


def check_plain(
    spark: Any, out: Path, expected: Counter[str], name: str = "plain_pyspark"
) -> dict[str, int]:
    """Check that per word the count of the latest batch that updated it is the Counter's."""
    from pyspark.sql import functions as F

    latest = (
        spark.read.parquet(str(out))
        .groupBy("word")
        .agg(F.max_by("count", "batch"), F.count(F.lit(1)))
        .collect()
    )
    problem = mismatch(expected, {r[0]: int(r[1]) for r in latest})
    if problem is not None:
        msg = f"{name}: the latest batch's count per word: {problem}"
        raise MismatchError(msg)
    return {"output_rows": sum(int(r[2]) for r in latest)}
