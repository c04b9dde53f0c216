"""``sink=delta``: a word count released into a Delta table, one idempotent commit per batch.

The table must hold exactly the rows the ``files`` sink releases for the same query and
input (and so the reference runtime's), one Delta commit per batch with the query's
application transaction; a replayed commit must add nothing; and a query SIGKILLed at the
barrier's crash points, including between the Delta commit and the sink's marker, must end
with every released row in the table exactly once.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from flamestream.errors import ConfigError
from flamestream.spark.connector.options import OptionReader
from flamestream.spark.exec.general.stateless import render_default
from flamestream.testing import run_in_order
from pyspark_flamestream.sinks.delta import DeltaOutput, query_id

from ..crash import reachable_in_turn, run_chain, run_unbroken
from . import delta_job
from .conftest import write_lines
from .graph_crash_job import word_count

JOB = "tests.spark.delta_job"

#: A row's columns as the files sink writes them (and the table holds them).
COLUMNS = ("ts", "front", "trace", "flags", "source", "position", "sink", "value")


def make_input(folder: Path) -> None:
    write_lines(folder / "a.txt", ["the cat", "the dog", "a cat and a dog", "the end", "cat"])
    write_lines(folder / "b.txt", ["dog dog", "the bird", "a bird", "bird and cat"])


def job_args(work: Path, sink: str = "delta") -> list[str]:
    return [str(work / "in"), str(work / sink), str(work / f"ck-{sink}")]


def run(spark: SparkSession, work: Path, sink: str) -> None:
    run_unbroken(lambda s: delta_job.start(s, *job_args(work, sink), sink=sink), spark)


def table_rows(path: Path, version: int | None = None) -> list[tuple[Any, ...]]:
    """The table's rows (``trace`` as hex, as the files sink writes it), sorted."""
    rows = DeltaTable(str(path), version=version).to_pyarrow_table().to_pylist()
    return sorted(tuple(r[c].hex() if c == "trace" else r[c] for c in COLUMNS) for r in rows)


def file_rows(out: Path) -> list[tuple[Any, ...]]:
    lines = [line for p in sorted(out.glob("part-*.jsonl")) for line in p.read_text().splitlines()]
    return sorted(tuple(json.loads(line)[c] for c in COLUMNS) for line in lines)


def batches(path: Path) -> list[int]:
    """The batch of each commit of the table, oldest first."""
    history = reversed(DeltaTable(str(path)).history())
    return [int(commit["flamestream.batch"]) for commit in history]


@pytest.fixture(scope="module")
def work(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same input run unbroken into a Delta table and into files."""
    work = tmp_path_factory.mktemp("delta")
    make_input(work / "in")
    run(spark, work, "delta")
    run(spark, work, "files")
    return work


def test_the_table_holds_the_files_sinks_rows_and_the_reference_runtimes(
    spark: SparkSession, work: Path
):
    rows = table_rows(work / "delta")
    assert rows == file_rows(work / "files")
    assert sum(1 for r in rows if r[-1].startswith("the=")) == 4  # every update released
    assert Counter((r[0], r[1], r[-1]) for r in rows) == reference(spark, work / "in")


def reference(spark: SparkSession, folder: Path) -> Counter[tuple[int, int, str]]:
    """The reference runtime's word count of ``folder``: (ts, front, value), a multiset.

    Global times and values only: the traces' logical times depend on the batches (replays).
    """
    front = spark.read.format("flamestream").option("front", "files")
    front_rows = front.option("path", str(folder)).option("clock", "logical").load()
    inputs: dict[int, list[tuple[int, Any]]] = {}
    for row in sorted(front_rows.collect(), key=lambda r: (r.front, r.ts)):
        inputs.setdefault(row.front, []).append((row.ts, row.value))
    timed = run_in_order(word_count(), inputs).timed()
    return Counter((time.ts, time.front, render_default(value)) for time, value in timed)


def test_one_commit_per_batch_with_the_querys_transaction(work: Path):
    table = DeltaTable(str(work / "delta"))
    committed = batches(work / "delta")
    assert committed == sorted(set(committed)) and len(committed) >= 2
    app_id = f"flamestream-{query_id(str(work / 'ck-delta'))}"
    assert table.transaction_version(app_id) == committed[-1]
    for version, batch in enumerate(committed):  # each commit adds rows of its batch only
        assert len(table_rows(work / "delta", version)) > (
            len(table_rows(work / "delta", version - 1)) if version else 0
        ), f"batch {batch} added no rows"


def output(work: Path, table: Path) -> DeltaOutput:
    """The sink's output as the query's commits use it (the query's checkpoint)."""
    options = {"path": str(table), "checkpointLocation": str(work / "ck-delta")}
    return DeltaOutput(OptionReader("sink delta", options))


def test_a_replayed_batch_commits_nothing_twice(work: Path, tmp_path: Path):
    table = tmp_path / "table"
    source = DeltaTable(str(work / "delta"))
    last = batches(work / "delta")[-1]
    rows = pa.table({"ts": [1, 2], "value": ["x", "y"]})
    sink = output(work, table)
    sink.release(last, rows)
    sink.release(last, rows)  # replayed: the query's transaction is at this batch
    sink.release(last - 1, rows)  # an older batch: committed before
    assert DeltaTable(str(table)).version() == 0
    sink.release(last + 1, rows.slice(1))
    sink.release(last + 1, rows.slice(1))
    assert DeltaTable(str(table)).version() == 1
    assert sorted(DeltaTable(str(table)).to_pyarrow_table().column("value").to_pylist()) == [
        "x",
        "y",
        "y",
    ]
    # the query's own table: its last batch again adds nothing
    output(work, work / "delta").release(last, rows)
    assert DeltaTable(str(work / "delta")).version() == source.version()


# Kill between the Delta commit and the sink's marker, twice: the replayed commit finds its
# transaction in the table (the other points are the barrier's, tested with every sink).
CRASHES = ["sink.commit.released:1", "sink.commit.released:2"]


def test_killed_query_leaves_every_released_row_once_in_the_table(work: Path, tmp_path: Path):
    assert reachable_in_turn(CRASHES)
    make_input(tmp_path / "in")
    table, unbroken = tmp_path / "delta", work / "delta"

    def so_far(crash: str) -> None:
        if not (table / "_delta_log").exists():
            return
        version = DeltaTable(str(table)).version()
        assert batches(table) == batches(unbroken)[: version + 1], f"after {crash}"
        assert table_rows(table) == table_rows(unbroken, version), f"after {crash}"

    run_chain(JOB, job_args(tmp_path), CRASHES, so_far)
    assert batches(table) == batches(unbroken)
    assert Counter(table_rows(table)) == Counter(table_rows(unbroken))
    assert table_rows(table) == table_rows(unbroken)


@pytest.mark.parametrize(
    ("options", "pattern"),
    [
        ({}, r"sink delta: option 'path' = \(missing\).*Delta table URL"),
        ({"path": "t", "release": "tasks"}, r"sink delta: option 'release' = 'tasks'.*commit"),
        ({"path": "file"}, r"option 'path' = '.*file'.*a Delta table.*it is a file"),
    ],
    ids=["no-path", "tasks", "file"],
)
def test_bad_options_fail_at_start(
    spark: SparkSession, tmp_path: Path, options: dict[str, str], pattern: str
):
    (tmp_path / "file").write_text("x")
    write_lines(tmp_path / "in" / "a.txt", ["x"])
    front = spark.readStream.format("flamestream").option("front", "files")
    writer = front.option("path", str(tmp_path / "in")).load().writeStream.format("flamestream")
    writer = writer.option("sink", "delta").option("checkpointLocation", str(tmp_path / "ck"))
    for key, value in options.items():
        writer = writer.option(key, str(tmp_path / value) if key == "path" else value)
    with pytest.raises(Exception, match=pattern):
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination(120)
        if query.exception():
            raise query.exception()  # type: ignore[misc]
    assert not (tmp_path / "t").exists()


UNREACHABLE = {
    "AWS_ENDPOINT_URL": "http://127.0.0.1:1",
    "AWS_ALLOW_HTTP": "true",
    "AWS_REGION": "us-east-1",
    "AWS_ACCESS_KEY_ID": "none",
    "AWS_SECRET_ACCESS_KEY": "none",
    "max_retries": "0",
}


@pytest.mark.parametrize(
    ("options", "pattern"),
    [
        ({"storageOptions": "{"}, r"'storageOptions' = '\{'.*a JSON object of strings"),
        ({"storageOptions": '{"a": 1}'}, r"'storageOptions'.*a JSON object of strings"),
        ({"appId": ""}, r"sink delta: option 'appId' = ''.*a non-empty application id"),
        ({"path": "dir"}, r"option 'path' = '.*dir'.*a directory of other files"),
        (
            {"path": "s3://bucket/table", "storageOptions": json.dumps(UNREACHABLE)},
            r"option 'path' = 's3://bucket/table'.*reachable with storageOptions \(OSError",
        ),
    ],
    ids=["bad-json", "not-strings", "empty-app", "dir", "no-store"],
)
def test_the_sinks_options_are_checked_as_the_query_starts(
    tmp_path: Path, options: dict[str, str], pattern: str
):
    """What the data source's writer does at query start (the sink's output, then its check)."""
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "other.txt").write_text("x")
    given = {"path": str(tmp_path / "t"), "checkpointLocation": str(tmp_path / "ck")}
    for key, value in options.items():
        given[key] = str(tmp_path / value) if value == "dir" else value
    with pytest.raises(ConfigError, match=pattern):
        DeltaOutput(OptionReader("sink delta", given)).check()
