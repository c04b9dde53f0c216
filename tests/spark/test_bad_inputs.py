"""Bad inputs on Spark: long lines, unhashable grouping keys, a sink path that is a file."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from flamestream import Dataflow
from flamestream.spark import apply_graph
from pyspark_flamestream.fronts.files import BLOCK

from .conftest import files_front, released, run_to_files, write_lines

#: A line of 3 MiB among short ones.
LINES = ["first", "second", "x" * (3 * BLOCK), "after", "last"]


@pytest.mark.parametrize("limit", [None, 2])
def test_a_3_mib_line_is_read_completely_and_exactly_once(
    spark: SparkSession, tmp_path: Path, limit
):
    write_lines(tmp_path / "in" / "a.txt", LINES)
    write_lines(tmp_path / "in" / "b.txt", ["other"])
    options = {} if limit is None else {"maxRecordsPerTrigger": limit}
    df = files_front(spark, tmp_path / "in", **options)
    query = run_to_files(df, tmp_path / "out", tmp_path / "ck")
    rows = released(tmp_path / "out")
    assert sorted(r["value"] for r in rows) == sorted([*LINES, "other"])
    assert [r["value"] for r in rows if r["source"] == "a.txt"] == LINES  # in order, once
    if limit is not None:  # the limit still binds: several batches, none stuck
        batches = [p for p in query.recentProgress if p["numInputRows"]]
        assert len(batches) >= 3
        assert all(p["numInputRows"] <= limit for p in batches)


def test_max_record_bytes_fails_naming_the_file_and_offset(spark: SparkSession, tmp_path: Path):
    write_lines(tmp_path / "in" / "a.txt", LINES)
    df = files_front(spark, tmp_path / "in", maxRecordBytes=BLOCK)
    with pytest.raises(Exception, match=r"front files.*refused the record at .*a\.txt', 13\)"):
        run_to_files(df, tmp_path / "out", tmp_path / "ck")


def test_max_record_bytes_with_dead_letters_reads_every_other_line(
    spark: SparkSession, tmp_path: Path
):
    write_lines(tmp_path / "in" / "a.txt", LINES)
    df = files_front(
        spark,
        tmp_path / "in",
        maxRecordBytes=BLOCK,
        onBadRecord="deadLetter",
        deadLetterPath=tmp_path / "dead",
        maxRecordsPerTrigger=2,
    )
    run_to_files(df, tmp_path / "out", tmp_path / "ck")
    assert [r["value"] for r in released(tmp_path / "out")] == [
        line for line in LINES if len(line) <= BLOCK
    ]
    (letter,) = (tmp_path / "dead").iterdir()
    source, position, raw = letter.read_text().rstrip("\n").split("\t")
    assert source.endswith("a.txt")
    assert int(position) == 13
    assert bytes.fromhex(raw) == LINES[2].encode()


def test_an_unhashable_grouping_key_names_grouping_function_and_determinant(
    spark: SparkSession, tmp_path: Path
):
    def letters(word: str) -> list[str]:
        return list(word)

    write_lines(tmp_path / "in" / "a.txt", ["fine", "a cat"])
    flow = Dataflow("letters")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    flow.sink("out", flow.map("show", flow.grouping("by", words, window=2, key=letters), str))
    df = files_front(spark, tmp_path / "in", clock="logical")
    out = apply_graph(flow, df, checkpoint_location=str(tmp_path / "ck-graph"))
    with pytest.raises(Exception) as caught:
        run_to_files(out, tmp_path / "out", tmp_path / "ck")
    text = str(caught.value)
    assert "UnhashableKeyError: step 'by': function" in text
    assert "letters returned the unhashable grouping key ['f', 'i', 'n', 'e']" in text
    assert "determinant ('a.txt', 0)" in text
    assert "return a tuple" in text
    assert released(tmp_path / "out") == []


def test_a_sink_path_that_is_a_file_fails_before_the_query_starts(
    spark: SparkSession, tmp_path: Path
):
    write_lines(tmp_path / "in" / "a.txt", ["x"])
    (tmp_path / "out").write_text("a file, not a directory\n")
    with pytest.raises(Exception, match=r"sink files: option 'path' = '.*out'.*it is a file"):
        run_to_files(files_front(spark, tmp_path / "in"), tmp_path / "out", tmp_path / "ck")
    assert not list((tmp_path / "ck").glob("commits/[0-9]*"))  # no batch ran
    assert (tmp_path / "out").read_text() == "a file, not a directory\n"
