"""Two queries chained by a Delta table, exactly once end to end, each SIGKILLed once.

Query A (files front, word count, ``delta`` sink) writes a table; query B reads it with the
``delta`` front (from version 0) and copies its rows through the empty graph into files
(:mod:`tests.spark.delta_pipeline_job`). A child process runs A then B; it is killed in A
(after a batch's Delta commit, before the sink's marker: the replayed commit must add
nothing, or B would read its rows twice), then in B (one part of a batch published, the
others not), then runs to its end. A's table must then hold an unbroken run's commits (the
same rows per commit), and B's files must be, byte for byte, what an unbroken B releases from
that table (what B saw after its crash included): B's output is a function of the table it
reads. (Not of A's released rows alone: delta-rs does not always keep the order of a
commit's rows in its data file, so two runs of A may store a commit's rows in two orders,
and B, reading each in file order, stamps them in those orders.)
"""

from __future__ import annotations

import json
from pathlib import Path

from deltalake import DeltaTable
from pyspark.sql import SparkSession

from ..crash import released_files, run_chain, run_unbroken
from . import delta_pipeline_job
from .test_delta_sink import batches, make_input, table_rows

JOB = "tests.spark.delta_pipeline_job"

#: A's crash (its delta sink, batch 1), then B's (its files sink, batch 1).
CRASHES = ["sink.commit.released:1", "sink.commit.published:1"]


def args(work: Path) -> list[str]:
    return [str(work / "in"), str(work / "table"), str(work / "out"), str(work)]


def test_two_queries_through_a_delta_table_release_every_row_once_across_kills(
    spark: SparkSession, tmp_path: Path
):
    unbroken = tmp_path / "unbroken"
    make_input(unbroken / "in")
    source, table, _, work = args(unbroken)
    run_unbroken(lambda s: delta_pipeline_job.start_a(s, source, table, work), spark)

    crashed = tmp_path / "crashed"
    make_input(crashed / "in")
    seen: dict[str, dict[str, bytes]] = {}
    run_chain(
        JOB,
        args(crashed),
        CRASHES,
        lambda crash: seen.update({crash: released_files(crashed / "out")}),
    )
    assert batches(crashed / "table") == batches(unbroken / "table")
    assert table_rows(crashed / "table") == table_rows(unbroken / "table")
    assert seen[CRASHES[0]] == {}  # A was killed before B started

    again = tmp_path / "again"  # B unbroken, on the crashed run's table
    table = str(crashed / "table")
    run_unbroken(
        lambda s: delta_pipeline_job.start_b(s, table, str(again / "out"), str(again)), spark
    )
    expected = released_files(again / "out")
    assert released_files(crashed / "out") == expected
    assert seen[CRASHES[1]] == {name: expected.get(name) for name in seen[CRASHES[1]]}
    assert seen[CRASHES[1]]  # B had released batch 0 (and a part of batch 1) when killed
    rows = [json.loads(line) for part in expected.values() for line in part.splitlines()]
    a_rows = DeltaTable(table).to_pyarrow_table().column("value").to_pylist()
    assert sorted(r["value"] for r in rows) == sorted(a_rows)  # every row of A's, once
    assert len(expected) >= 2
