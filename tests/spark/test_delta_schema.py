"""``sink=delta`` refuses, at query start, a table it cannot write the released rows into.

A table already at ``path`` must have the schema of the rows the query releases (which the
``columns`` option decides): a column of another type, a column more or less, or a column
the table declares not null where the rows may hold null stops the query before its first
batch, with an error naming the option, the table and both schemas; the table is left as it
was. A folder that is no Delta table must be empty. A table an earlier run of the same query
made is accepted, so is one made beforehand with the rows' schema, and ``mergeSchema=true``
adds the rows' columns to a table that lacks them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession

from flamestream.spark import SparkGraph
from flamestream.spark.connector.front import META_FIELDS

from ..crash import run_unbroken
from . import delta_job
from .conftest import write_lines
from .graph_crash_job import word_count

#: The rows a files front releases with ``columns=all``, as a table made beforehand declares them.
FRONT_ROWS = pa.schema([*META_FIELDS, pa.field("value", pa.string())])
#: How the error describes them (Delta's type names).
FRONT_DESCRIBED = (
    "ts long not null, front integer not null, source string not null, "
    "position long not null, value string"
)


def writer(spark: SparkSession, work: Path, table: Path, checkpoint: str, **options: str) -> Any:
    """The files front over ``work/in`` written straight into the Delta table ``table``."""
    front = spark.readStream.format("flamestream").option("front", "files")
    front = front.option("path", str(work / "in")).option("clock", "logical")
    out = front.load().writeStream.format("flamestream").option("sink", "delta")
    out = out.option("path", str(table)).option("checkpointLocation", str(work / checkpoint))
    return out.options(**options).trigger(availableNow=True)


def run(spark: SparkSession, work: Path, table: Path, checkpoint: str, **options: str) -> None:
    run_unbroken(lambda s: writer(s, work, table, checkpoint, **options).start(), spark)


def refusal(spark: SparkSession, work: Path, table: Path, **options: str) -> str:
    """The error that stops the query, which must not have run a batch."""
    before = DeltaTable(str(table)).version() if DeltaTable.is_deltatable(str(table)) else None
    with pytest.raises(Exception) as caught:  # a StreamingQueryException
        query = writer(spark, work, table, "ck-refused", **options).start()
        query.awaitTermination(120)
        if query.exception():
            raise query.exception()  # type: ignore[misc]
    assert not list((work / "ck-refused" / "commits").glob("*")), "a batch ran"
    if before is not None:
        assert DeltaTable(str(table)).version() == before, "the table changed"
    return " ".join(str(caught.value).split())


def make_table(path: Path, schema: pa.Schema, rows: dict[str, list[Any]] | None = None) -> None:
    columns = {f.name: pa.array((rows or {}).get(f.name, []), f.type) for f in schema}
    write_deltalake(str(path), pa.table(columns, schema=schema))


@pytest.fixture
def work(tmp_path: Path) -> Path:
    write_lines(tmp_path / "in" / "a.txt", ["the cat", "a dog", "the end"])
    return tmp_path


def retyped(name: str, kind: pa.DataType) -> pa.Schema:
    return pa.schema([f.with_type(kind) if f.name == name else f for f in FRONT_ROWS])


@pytest.mark.parametrize(
    ("schema", "problem", "described"),
    [
        (retyped("ts", pa.string()), "ts is string in the table, long in the rows", "ts string"),
        (retyped("ts", pa.float64()), "ts is double in the table, long in the rows", "ts double"),
        (
            retyped("ts", pa.timestamp("us", "UTC")),
            "ts is timestamp in the table, long in the rows",
            "ts timestamp",
        ),
        (
            pa.schema([f for f in FRONT_ROWS if f.name not in ("source", "position")]),
            "the table lacks source, position",
            "(ts long not null, front integer not null, value string)",
        ),
        (
            pa.schema([*FRONT_ROWS, pa.field("extra", pa.string())]),
            "the rows lack extra",
            "value string, extra string)",
        ),
        (
            pa.schema([f.with_nullable(f.name != "value") for f in FRONT_ROWS]),
            "value is not null in the table, the rows may hold null there",
            "value string not null)",
        ),
    ],
    ids=["ts-string", "ts-double", "ts-timestamp", "fewer", "more", "not-null"],
)
def test_a_table_of_another_schema_stops_the_query_before_its_first_batch(
    spark: SparkSession, work: Path, schema: pa.Schema, problem: str, described: str
):
    table = work / "table"
    make_table(table, schema)
    message = refusal(spark, work, table)
    assert "sink delta: option 'path' = " in message and str(table) in message
    assert f"the table {DeltaTable(str(table)).table_uri} has (" in message
    assert described in message  # the table's schema
    assert f"the rows have ({FRONT_DESCRIBED})" in message
    assert "columns='all'" in message and problem in message and "Hint:" in message
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == 0


def test_a_second_query_with_other_columns_is_refused_and_one_with_the_same_accepted(
    spark: SparkSession, work: Path
):
    """The table made by a query with ``columns=value,time``: another query must keep them."""
    table = work / "table"
    run(spark, work, table, "ck-first", columns="value,time")
    rows = DeltaTable(str(table)).to_pyarrow_table()
    assert rows.column_names == ["ts", "front", "value"] and rows.num_rows == 3
    message = refusal(spark, work, table)  # columns=all
    assert "columns='all'" in message and "the table lacks source, position" in message
    assert "has (ts long not null, front integer not null, value string)" in message
    message = refusal(spark, work, table, columns="value")
    assert "columns='value'" in message and "the rows lack ts, front" in message
    run(spark, work, table, "ck-second", columns="value,time")  # a new query, same columns
    assert DeltaTable(str(table)).to_pyarrow_table().num_rows == 2 * rows.num_rows


def test_a_graphs_table_is_refused_to_a_query_releasing_other_columns(
    spark: SparkSession, work: Path
):
    """A word count's table (``columns=value``) and the same graph with ``columns=all``."""
    table, source = work / "table", str(work / "in")
    first = delta_job.start(
        spark, source, str(table), str(work / "ck-1"), options={"columns": "value"}
    )
    first.awaitTermination(300)
    assert first.exception() is None
    assert DeltaTable(str(table)).schema().to_arrow().names == ["value"]

    def start(options: dict[str, str]) -> None:
        query = delta_job.start(spark, source, str(table), str(work / "ck-2"), options=options)
        query.awaitTermination(120)
        if query.exception():
            raise query.exception()  # type: ignore[misc]

    with pytest.raises(Exception, match="the table lacks ts, front, trace, flags") as caught:
        start({})
    message = " ".join(str(caught.value).split())
    assert "the rows have (ts long, front integer, trace binary, flags byte" in message
    assert not list((work / "ck-2" / "commits").glob("*"))


def test_a_folder_of_other_files_with_an_empty_delta_log_is_refused(
    spark: SparkSession, work: Path
):
    folder = work / "table"
    (folder / "_delta_log").mkdir(parents=True)
    (folder / "notes.txt").write_text("not a table's")
    message = refusal(spark, work, folder)
    assert "option 'path'" in message and "a directory of other files, no Delta table" in message
    assert "notes.txt" in message
    assert sorted(p.name for p in folder.iterdir()) == ["_delta_log", "notes.txt"]
    assert not list((folder / "_delta_log").iterdir())


def test_a_table_made_beforehand_with_the_rows_schema_is_written_and_restarts_continue(
    spark: SparkSession, work: Path
):
    table = work / "table"
    make_table(table, FRONT_ROWS)
    run(spark, work, table, "ck")
    write_lines(work / "in" / "b.txt", ["more"])
    run(spark, work, table, "ck")  # the same query again: its table, its columns
    values = DeltaTable(str(table)).to_pyarrow_table().column("value").to_pylist()
    assert sorted(values) == ["a dog", "more", "the cat", "the end"]
    assert (
        DeltaTable(str(table)).schema().to_arrow()
        == DeltaTable(str(table), version=0).schema().to_arrow()
    )


def test_merge_schema_adds_the_rows_columns_and_still_refuses_another_type(
    spark: SparkSession, work: Path
):
    table = work / "table"
    make_table(table, pa.schema([pa.field("value", pa.string())]), {"value": ["earlier"]})
    run(spark, work, table, "ck", mergeSchema="true")
    rows = DeltaTable(str(table)).to_pyarrow_table()
    assert rows.column_names == ["value", "ts", "front", "source", "position"]
    earlier = [r for r in rows.to_pylist() if r["value"] == "earlier"]
    assert earlier == [
        {"value": "earlier", "ts": None, "front": None, "source": None, "position": None}
    ]
    released = sorted(r["value"] for r in rows.to_pylist() if r["ts"] is not None)
    assert released == ["a dog", "the cat", "the end"]
    # the added columns are nullable: the earlier row holds null there
    assert all(field.nullable for field in DeltaTable(str(table)).schema().fields)
    other = work / "other"
    make_table(other, pa.schema([pa.field("value", pa.binary())]))
    message = refusal(spark, work, other, mergeSchema="true")
    assert "value is binary in the table, string in the rows" in message


def test_a_table_a_keyed_stage_released_into_is_accepted_on_restart(
    spark: SparkSession, work: Path
):
    """``write_stream``: the sink's tasks run the last keyed stage; its rows' schema is the
    item rows' (not-null meta), the table's as its first commit made it (nullable)."""
    table = work / "table"

    def start(s: SparkSession) -> Any:
        reader = s.readStream.format("flamestream").option("front", "files")
        reader = reader.option("path", str(work / "in")).option("clock", "logical")
        graph = SparkGraph(word_count(), partitions=2)
        writer = graph.write_stream(reader, checkpoint_location=str(work / "ck"))
        writer = writer.option("sink", "delta").option("path", str(table))
        return writer.trigger(availableNow=True).start()

    run_unbroken(start, spark)
    first = DeltaTable(str(table)).to_pyarrow_table().num_rows
    write_lines(work / "in" / "b.txt", ["the cat"])
    run_unbroken(start, spark)  # restarted from its checkpoint: the table is accepted
    values = DeltaTable(str(table)).to_pyarrow_table().column("value").to_pylist()
    assert len(values) == first + 2 and "the=3" in values and "cat=2" in values
