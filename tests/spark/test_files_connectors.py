"""files front -> files barrier sink on a real local Spark."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pyspark_flamestream import FlameStreamDataSource

from .conftest import files_front, released, run_to_files, write_lines


def test_format_resolves_without_any_registration(spark: SparkSession, tmp_path: Path):
    write_lines(tmp_path / "in" / "a.txt", ["x"])
    df = files_front(spark, tmp_path / "in")
    assert df.isStreaming
    assert df.columns == ["ts", "front", "source", "position", "value"]


def test_explicit_registration_works_too(spark: SparkSession, tmp_path: Path):
    spark.dataSource.register(FlameStreamDataSource)
    write_lines(tmp_path / "in" / "a.txt", ["x", "y"])
    run_to_files(files_front(spark, tmp_path / "in"), tmp_path / "out", tmp_path / "ck")
    assert [r["value"] for r in released(tmp_path / "out")] == ["x", "y"]


@pytest.mark.parametrize("release", ["commit", "tasks"])
def test_every_complete_line_is_released_once_in_global_time_order(
    spark: SparkSession, tmp_path: Path, release: str
):
    inputs = {
        "a.txt": [f"a{i}" for i in range(9)],
        "b.txt": [f"b{i}" for i in range(4)],
        "c.txt": [f"c{i}" for i in range(13)],
    }
    for name, lines in inputs.items():
        write_lines(tmp_path / "in" / name, lines, tail="incomplete-")
    query = run_to_files(
        files_front(spark, tmp_path / "in", maxRecordsPerTrigger=5),
        tmp_path / "out",
        tmp_path / "ck",
        release=release,
    )
    rows = released(tmp_path / "out")
    values = [r["value"] for r in rows]
    assert sorted(values) == sorted(v for lines in inputs.values() for v in lines)
    assert len(values) == len(set(values))  # nothing twice, and the partial lines wait
    times = [(r["ts"], r["front"]) for r in rows]
    assert len(set(times)) == len(times)
    if release == "commit":
        assert times == sorted(times)
    else:  # each task's part is sorted, and every batch's times come after the previous one's
        by_batch: dict[str, list[tuple[int, int]]] = {}
        for part in sorted((tmp_path / "out").glob("part-*.jsonl")):
            part_times = [(r["ts"], r["front"]) for r in map(json.loads, part.read_text().split())]
            assert part_times == sorted(part_times)
            by_batch.setdefault(part.name.split("-")[1], []).extend(part_times)
        spans = [(min(t), max(t)) for _, t in sorted(by_batch.items())]
        assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))
        assert len(spans) > 1
        assert not list((tmp_path / "out").glob(".*")), "unpublished parts left behind"
    # read limits: no batch over 5 records, and every batch after the first planned its own base
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert max(sizes) <= 5
    assert sum(sizes) == 26
    # within a front, order by position is order by ts, and per file the determinant is exact
    for name, lines in inputs.items():
        mine = [r for r in rows if r["source"].endswith(name)]
        assert [r["value"] for r in sorted(mine, key=lambda r: r["ts"])] == lines
        offsets = [sum(len(v) + 1 for v in lines[:i]) for i in range(len(lines))]
        assert sorted(r["position"] for r in mine) == offsets


def test_appended_lines_are_picked_up_on_the_next_run(spark: SparkSession, tmp_path: Path):
    source = tmp_path / "in" / "log.txt"
    write_lines(source, ["one", "two"], tail="thr")
    run_to_files(files_front(spark, tmp_path / "in"), tmp_path / "out", tmp_path / "ck")
    with source.open("a") as out:
        out.write("ee\nfour\n")
    write_lines(tmp_path / "in" / "new.txt", ["fresh"])
    run_to_files(files_front(spark, tmp_path / "in"), tmp_path / "out", tmp_path / "ck")
    rows = released(tmp_path / "out")
    # the second batch stamps from one base: three (B, front 0), fresh (B, front 1), four
    # (B + 6, front 0): global-time order interleaves the fronts by byte offset
    assert [r["value"] for r in rows] == ["one", "two", "three", "fresh", "four"]
    assert rows[2]["ts"] == rows[3]["ts"] == rows[4]["ts"] - len("three\n")
    fronts = {r["source"]: r["front"] for r in rows}  # sources: paths under the directory
    assert fronts == {"log.txt": 0, "new.txt": 1}  # ids given once, in order of first sight


def test_logical_clock_makes_reruns_identical_to_the_last_byte(spark: SparkSession, tmp_path: Path):
    for name in ("p.txt", "q.txt"):
        write_lines(tmp_path / "in" / name, [f"{name}-{i}" for i in range(7)])
    outputs = []
    for run in ("first", "second"):
        run_to_files(
            files_front(spark, tmp_path / "in", maxRecordsPerTrigger=4, clock="logical"),
            tmp_path / run,
            tmp_path / f"ck-{run}",
        )
        outputs.append([p.read_bytes() for p in sorted((tmp_path / run).glob("part-*"))])
    assert outputs[0] == outputs[1]
    assert len(outputs[0]) == 4


def test_parquet_output(spark: SparkSession, tmp_path: Path):
    write_lines(tmp_path / "in" / "a.txt", ["x", "y", "z"])
    run_to_files(
        files_front(spark, tmp_path / "in"), tmp_path / "out", tmp_path / "ck", format="parquet"
    )
    table = spark.read.parquet(str(tmp_path / "out"))
    assert sorted(r.value for r in table.collect()) == ["x", "y", "z"]


def test_generator_front_is_deterministic_and_limited(spark: SparkSession, tmp_path: Path):
    outputs = []
    for run in ("a", "b"):
        df = (
            spark.readStream.format("flamestream")
            .option("front", "generator")
            .option("totalRows", 300)
            .option("rowsPerSecond", 0)
            .option("partitions", 3)
            .option("keys", 10)
            .option("keySkew", 1.2)
            .option("seed", 42)
            .option("clock", "logical")
            .option("maxRecordsPerTrigger", 120)
            .load()
        )
        query = run_to_files(df, tmp_path / run, tmp_path / f"ck-{run}")
        outputs.append(released(tmp_path / run))
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        assert sizes == [120, 120, 60]
        assert query.lastProgress["sources"][0]["latestOffset"] is not None
    assert outputs[0] == outputs[1]
    assert len(outputs[0]) == 300
    keys = [r["key"] for r in outputs[0]]
    assert keys.count("k0") > keys.count("k9")  # skewed towards the first keys


def test_undecodable_record_fails_the_query_naming_step_and_determinant(
    spark: SparkSession, tmp_path: Path
):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "bad.txt").write_bytes(b"fine\n\xff\xfe broken\nalso fine\n")
    with pytest.raises(Exception, match=r"front files.*bad\.txt', 5\)"):
        run_to_files(files_front(spark, tmp_path / "in"), tmp_path / "out", tmp_path / "ck")
    assert released(tmp_path / "out") == []


def test_dead_letter_routes_undecodable_records_and_loses_nothing(
    spark: SparkSession, tmp_path: Path
):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "bad.txt").write_bytes(b"fine\n\xff\xfe broken\nalso fine\n")
    df = files_front(
        spark, tmp_path / "in", onBadRecord="deadLetter", deadLetterPath=tmp_path / "dead"
    )
    run_to_files(df, tmp_path / "out", tmp_path / "ck")
    assert [r["value"] for r in released(tmp_path / "out")] == ["fine", "also fine"]
    (letter,) = (tmp_path / "dead").iterdir()
    source, position, raw = letter.read_text().strip().split("\t")
    assert source.endswith("bad.txt")
    assert int(position) == 5
    assert bytes.fromhex(raw) == b"\xff\xfe broken"
