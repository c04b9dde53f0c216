"""``front=delta``: a Delta table's snapshot, then the rows each later version appends.

Real delta-rs tables and the shared local[2] session: the bounded read equals the table's
rows in determinant order; a stream reads each appended version's rows once, across runs;
compactions add nothing; delete, update, merge and overwrite commits fail planning (naming
the table, version and operation) or, with ``skipChangeCommits``, are skipped; a range reads
the same rows every time; a graph over the front releases the reference runtime's output.
"""

from __future__ import annotations

import pickle
from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from flamestream.errors import ConfigError
from flamestream.spark import apply_graph
from flamestream.spark.connector.offsets import FrontRange
from flamestream.spark.connector.options import OptionReader
from flamestream.spark.exec.general.stateless import render_default
from flamestream.testing import run_in_order
from pyspark_flamestream.fronts.delta import (
    ChangeCommitError,
    DataFile,
    DeltaReadError,
    DeltaSource,
    VersionRows,
    position_of,
    row_of,
    version_of,
)

from ..examples import examples
from .conftest import released, run_writer
from .graph_crash_job import word_count


def lines(*values: str, first: int = 0) -> pa.Table:
    """Rows of a ``value`` string and an integer ``n`` (an event time)."""
    return pa.table({"value": list(values), "n": pa.array(range(first, first + len(values)))})


def append(table: Path, rows: pa.Table, **kwargs: Any) -> None:
    write_deltalake(str(table), rows, mode="append", **kwargs)


def source(table: Path, **options: str) -> DeltaSource:
    """The front as the query's processes build it from its options."""
    return DeltaSource(OptionReader("front delta", {"path": str(table), **options}))


def bounded(spark: SparkSession, table: Path, **options: str) -> list[Any]:
    reader = spark.read.format("flamestream").option("front", "delta")
    reader = reader.option("path", str(table)).option("clock", "logical")
    for key, value in options.items():
        reader = reader.option(key, value)
    return sorted(reader.load().collect(), key=lambda r: r.position)


def stream_to_files(spark: SparkSession, table: Path, out: Path, ck: Path, **options: str) -> None:
    """One AvailableNow run of the front straight into a files sink."""
    reader = spark.readStream.format("flamestream").option("front", "delta")
    reader = reader.option("path", str(table)).option("clock", "logical")
    for key, value in options.items():
        reader = reader.option(key, value)
    writer = reader.load().writeStream.format("flamestream")
    run_writer(writer.option("checkpointLocation", str(ck)), out)


def snapshot_values(table: Path) -> list[str]:
    """The table's rows in determinant order: files oldest first, then by path; rows in order."""
    dt = DeltaTable(str(table))
    adds = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    paths = [a["path"] for a in sorted(adds, key=lambda a: (a["modification_time"], a["path"]))]
    return [v for p in paths for v in pq.read_table(table / p).column("value").to_pylist()]


def test_a_bounded_read_is_the_snapshot_in_determinant_order(spark: SparkSession, tmp_path: Path):
    table = tmp_path / "t"
    append(table, lines("a", "b", "c"))
    append(table, lines("d", "e", first=3))
    append(table, lines("f", first=5))
    rows = bounded(spark, table)
    assert [r.value for r in rows] == snapshot_values(table)
    assert sorted(r.value for r in rows) == list("abcdef")
    assert {r.source for r in rows} == {f"{2:020d}"}  # V0: the latest version
    assert [r.position for r in rows] == [position_of(2, i) for i in range(6)]
    assert [r.ts for r in rows] == list(range(6))  # clock=logical: ts = row offset


def test_a_partitioned_tables_partition_columns_come_from_the_log(
    spark: SparkSession, tmp_path: Path
):
    table = tmp_path / "t"
    rows = pa.table({"value": ["x", "y", "z"], "day": ["d 1", "d/2", "d 1"]})
    write_deltalake(str(table), rows, partition_by=["day"])
    got = bounded(spark, table)
    assert sorted((r.value, r.day) for r in got) == [("x", "d 1"), ("y", "d/2"), ("z", "d 1")]


def test_a_stream_reads_each_appended_version_once_and_skips_compactions(
    spark: SparkSession, tmp_path: Path
):
    table, out, ck = tmp_path / "t", tmp_path / "out", tmp_path / "ck"
    append(table, lines("a", "b"))
    stream_to_files(spark, table, out, ck, maxRecordsPerTrigger="3")
    append(table, lines("c", "d", "e", first=2))  # version 1
    DeltaTable(str(table)).optimize.compact()  # version 2: no new rows
    append(table, lines("f", first=5))  # version 3
    stream_to_files(spark, table, out, ck, maxRecordsPerTrigger="3")
    got = [(r["value"], version_of(r["position"]), row_of(r["position"])) for r in released(out)]
    assert got == [("a", 0, 0), ("b", 0, 1), ("c", 1, 0), ("d", 1, 1), ("e", 1, 2), ("f", 3, 0)]
    assert [r["ts"] for r in released(out)] == sorted({r["ts"] for r in released(out)})


def test_starting_version_reads_the_commits_from_there_and_no_snapshot(tmp_path: Path):
    table = tmp_path / "t"
    for i, value in enumerate("abc"):
        append(table, lines(value, first=i))
    front = source(table, startingVersion="1")
    key, end = next(iter(front.discover({}).items()))
    assert key.endswith(f"@{1:020d}:commits")
    start = front.start_position(key, end, at_query_start=True)
    assert start == position_of(1, 0)
    assert values(front, key, start, end) == ["b", "c"]


def values(front: DeltaSource, key: str, start: int, end: int) -> list[str]:
    part = FrontRange(key, 0, start, end, 0)
    return [v for b in front.read_range(part) for v in b.column("value").to_pylist()]


def test_later_plannings_keep_the_offsets_key(tmp_path: Path):
    table = tmp_path / "t"
    append(table, lines("a"))
    key, end = next(iter(source(table).discover({}).items()))
    append(table, lines("b", first=1))
    again = source(table)  # a restart: a new instance, the key comes from the offsets
    assert again.discover({key: end}) == {key: position_of(1, 1)}
    assert again.discover({}) == {key: position_of(1, 1)}  # and stays fixed
    assert values(again, key, end, position_of(1, 1)) == ["b"]


def test_a_range_reads_the_same_rows_every_time_and_projects(tmp_path: Path):
    table = tmp_path / "t"
    append(table, lines("a", "b", "c"))
    front = source(table)
    key, _ = next(iter(front.discover({}).items()))
    for i in range(3):
        append(table, lines(*[f"v{i}-{j}" for j in range(i + 2)], first=10 * i))
    end = front.discover({key: 0})[key]
    start, stop = position_of(0, 1), position_of(3, 2)
    part = FrontRange(key, 0, start, stop, 0)
    first = pa.Table.from_batches(list(front.read_range(part)))
    # no driver caches: reads the log itself
    executor = pickle.loads(pickle.dumps(front))  # noqa: S301 - our own object
    assert executor._versions == {}
    assert pa.Table.from_batches(list(executor.read_range(part))) == first
    wanted = ["b", "c", "v0-0", "v0-1", "v1-0", "v1-1", "v1-2", "v2-0", "v2-1"]
    assert first.column("value").to_pylist() == wanted and end > stop
    projected = pa.Table.from_batches(list(executor.scan_columns(key, start, stop, ["n"])))
    assert projected.column_names == ["position", "n"]
    assert projected.column("position") == first.column("position")
    with pytest.raises(ConfigError, match="'columns' = 'nope'"):
        list(executor.scan_columns(key, start, stop, ["nope"]))


@settings(max_examples=examples(150), deadline=None)
@given(
    counts=st.lists(st.integers(0, 6), min_size=1, max_size=8),
    limits=st.lists(st.integers(1, 9), min_size=1, max_size=5),
    cut=st.integers(0, 60),
)
def test_advance_never_skips_or_repeats_a_row(
    fixed_front: tuple[DeltaSource, str], counts: list[int], limits: list[int], cut: int
):
    """Versions of random row counts (given to the front's cache), read in random limits."""
    front, key = fixed_front
    front._versions = {
        (key, v): VersionRows(v, (DataFile(f"f{v}", n),) if n else ()) for v, n in enumerate(counts)
    }
    every = [position_of(v, r) for v, n in enumerate(counts) for r in range(n)]
    end = every[min(cut, len(every) - 1)] + 1 if every else position_of(len(counts) - 1, 0)
    wanted = [p for p in every if p < end]
    position, seen, i = 0, [], 0
    while position < end:
        new, taken = front.advance(key, position, end, limits[i % len(limits)])
        assert new > position and taken <= limits[i % len(limits)]
        covered = [p for p in every if position <= p < new]
        assert len(covered) == taken
        seen += covered
        position, i = new, i + 1
    assert position == end and seen == wanted
    assert all(p == position_of(version_of(p), row_of(p)) for p in every)
    # cut into pieces of `size` rows: every piece but the last holds exactly that many
    size = limits[0]
    bounds = [0, *front.split_positions(key, 0, end, size), end]
    pieces = [[p for p in every if a <= p < b] for a, b in pairwise(bounds)]
    assert [p for piece in pieces for p in piece] == wanted
    assert all(len(piece) == size for piece in pieces[:-1]) and len(pieces[-1]) <= size
    assert front.records_between(key, 0, end) == len(wanted)


@pytest.fixture(scope="module")
def fixed_front(tmp_path_factory: pytest.TempPathFactory) -> tuple[DeltaSource, str]:
    table = tmp_path_factory.mktemp("advance") / "t"
    append(table, lines("a"))
    front = source(table, startingVersion="0")
    return front, next(iter(front.discover({})))


def change(table: Path, operation: str) -> None:
    """Commit a change that removes rows: a delete, an update, a merge or an overwrite."""
    dt = DeltaTable(str(table))
    if operation == "delete":
        dt.delete("value = 'b'")
    elif operation == "update":
        dt.update(updates={"value": "'B'"}, predicate="value = 'b'")
    elif operation == "merge":
        new = lines("b", "z", first=7)
        merge = dt.merge(new, "s.value = t.value", source_alias="s", target_alias="t")
        merge.when_matched_update_all().when_not_matched_insert_all().execute()
    else:
        write_deltalake(str(table), lines("o", first=9), mode="overwrite")


@pytest.mark.parametrize("operation", ["delete", "update", "merge", "overwrite"])
def test_a_change_commit_fails_planning_unless_skipped(tmp_path: Path, operation: str):
    table = tmp_path / "t"
    append(table, lines("a", "b"))
    strict, skipping = source(table), source(table, skipChangeCommits="true")
    key = next(iter(strict.discover({})))
    assert next(iter(skipping.discover({}))) == key
    change(table, operation)
    append(table, lines("c", first=5))
    with pytest.raises(ChangeCommitError) as failed:
        strict.discover({key: position_of(0, 2)})
    message = str(failed.value)
    assert f"version 1 of the table {strict.table_url}" in message
    named = "WRITE (mode Overwrite)" if operation == "overwrite" else operation.upper()
    assert f"is a {named} commit" in message and "skipChangeCommits=true" in message
    end = skipping.discover({key: position_of(0, 2)})[key]
    assert end == position_of(2, 1)
    assert values(skipping, key, position_of(0, 2), end) == ["c"]  # the change's rows: not read


def test_a_change_commit_fails_the_streaming_query(spark: SparkSession, tmp_path: Path):
    table, out, ck = tmp_path / "t", tmp_path / "out", tmp_path / "ck"
    append(table, lines("a", "b"))
    stream_to_files(spark, table, out, ck)
    change(table, "delete")
    with pytest.raises(Exception, match=r"version 1 of the table .* is a DELETE commit"):
        stream_to_files(spark, table, out, ck)
    stream_to_files(spark, table, out, ck, skipChangeCommits="true")
    append(table, lines("c", first=2))
    stream_to_files(spark, table, out, ck, skipChangeCommits="true")
    assert [r["value"] for r in released(out)] == ["a", "b", "c"]


def test_a_schema_change_names_the_version_and_the_difference(tmp_path: Path):
    table = tmp_path / "t"
    append(table, lines("a"))
    front = source(table)
    key = next(iter(front.discover({})))
    wider = lines("b", first=1).append_column("extra", pa.array(["x"]))
    append(table, wider, schema_mode="merge")
    with pytest.raises(DeltaReadError, match=r"version 1 of the table .*columns added: extra"):
        front.discover({key: position_of(0, 1)})


def test_record_times_from_an_integer_or_a_timestamp_column(spark: SparkSession, tmp_path: Path):
    table = tmp_path / "t"
    micros = [3_000_000, 1_000_000, 9_000_000]
    rows = lines("a", "b", "c").append_column(
        "at", pa.array(micros, pa.int64()).cast(pa.timestamp("us", "UTC"))
    )
    append(table, rows.set_column(1, "n", pa.array([5, 2, 7])))
    by_int = bounded(spark, table, clock="record", timestampColumn="n")
    assert [r.ts for r in by_int] == [5, 6, 7]  # clamped monotonic
    by_time = bounded(spark, table, clock="record", timestampColumn="at")
    assert [r.ts for r in by_time] == [3_000_000, 3_000_001, 9_000_000]  # µs since the epoch


@pytest.mark.parametrize(
    ("options", "pattern"),
    [
        ({}, r"front delta: option 'path' = \(missing\).*Delta table URL"),
        ({"path": "missing"}, r"option 'path' = '.*missing'.*an existing Delta table"),
        (
            {"path": "t", "clock": "record", "timestampColumn": "value"},
            r"'timestampColumn' = 'value'.*integer or timestamp column.*it is string.*: n",
        ),
        ({"path": "t", "clock": "record", "timestampColumn": "no"}, r"'timestampColumn' = 'no'"),
        ({"path": "t", "clock": "record"}, r"'timestampColumn' = \(missing\).*clock=record"),
        ({"path": "t", "timestampColumn": "n"}, r"'timestampColumn' = 'n'.*only with clock=record"),
        ({"path": "t", "startingVersion": "5"}, r"'startingVersion' = 5.*0 to 0"),
        ({"path": "t", "skipChangeCommits": "yes"}, r"'skipChangeCommits' = 'yes'.*true or false"),
        ({"path": "t", "storageOptions": "{"}, r"'storageOptions' = '\{'.*JSON object"),
        ({"path": "t", "startingversion ": "1"}, r"no such option"),
    ],
    ids=["no-path", "no-table", "string-time", "no-column", "no-time", "time-no-record",
         "version", "skip", "storage", "unknown"],
)  # fmt: skip
def test_bad_options_fail_when_the_query_is_defined(
    spark: SparkSession, tmp_path: Path, options: dict[str, str], pattern: str
):
    append(tmp_path / "t", lines("a"))
    reader = spark.readStream.format("flamestream").option("front", "delta")
    for key, value in options.items():
        reader = reader.option(key, str(tmp_path / value) if key == "path" else value)
    with pytest.raises(Exception, match=pattern):
        reader.load()


def test_a_graph_over_the_front_releases_the_reference_runtimes_output(
    spark: SparkSession, tmp_path: Path
):
    table, out, ck = tmp_path / "t", tmp_path / "out", tmp_path / "ck"
    append(table, lines("the cat", "a dog"))
    append(table, lines("the dog", "cat and dog", first=2))

    def run() -> None:
        reader = spark.readStream.format("flamestream").option("front", "delta")
        reader = reader.option("path", str(table)).option("clock", "logical")
        reader = reader.option("startingVersion", "0").option("maxRecordsPerTrigger", "3")
        applied = apply_graph(word_count(), reader, checkpoint_location=str(ck), partitions=2)
        writer = applied.writeStream.format("flamestream")
        run_writer(writer.option("checkpointLocation", str(ck)), out)

    run()
    append(table, lines("dog dog the", first=4))
    run()
    got = Counter((r["ts"], r["front"], r["value"]) for r in released(out))
    front_rows = bounded(spark, table, startingVersion="0")  # the same global times
    assert got == reference(front_rows)
    assert sum(1 for r in released(out) if r["value"].startswith("dog=")) == 5


def reference(front_rows: list[Any]) -> Counter[tuple[int, int, str]]:
    """The reference runtime's word count of the front's rows: (ts, front, value), a multiset."""
    inputs: dict[int, list[tuple[int, Any]]] = {}
    for row in sorted(front_rows, key=lambda r: (r.front, r.ts)):
        inputs.setdefault(row.front, []).append((row.ts, row.value))
    timed = run_in_order(word_count(), inputs).timed()
    return Counter((time.ts, time.front, render_default(value)) for time, value in timed)
