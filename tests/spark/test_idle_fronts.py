"""Idle and finished fronts report past their last item, so they hold nothing back."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming import StreamingQuery

from .conftest import files_front, released, run_to_files, write_lines


def start_running(df: DataFrame, out: Path, checkpoint: Path) -> StreamingQuery:
    return (
        df.writeStream.format("flamestream")
        .option("sink", "files")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="100 milliseconds")
        .start()
    )


def wait_for(query: StreamingQuery, out: Path, rows: int, seconds: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if query.exception():
            raise query.exception()  # type: ignore[misc]
        got = released(out)
        if len(got) >= rows:
            return got
        time.sleep(0.2)
    return released(out)


def batches(checkpoint: Path) -> int:
    return len([p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()])


def reports(checkpoint: Path, batch: int) -> list[list[Any]]:
    lines = (checkpoint / "offsets" / str(batch)).read_text().splitlines()
    fronts = json.loads(lines[2])["fronts"]
    return [[key.rsplit("/", 1)[-1], *rest] for key, *rest in fronts]


def test_an_idle_front_stops_holding_the_others_back_once_per_idle_period(
    spark: SparkSession, tmp_path: Path
):
    write_lines(tmp_path / "in" / "long.txt", [f"long-{i:02d}" for i in range(12)])
    write_lines(tmp_path / "in" / "short.txt", ["s0", "s1"])
    total = 14
    held = None
    for idle in (None, 1000):
        name = f"idle-{idle}"
        options = {"clock": "logical", **({"idleTimeoutMs": idle} if idle else {})}
        out, ck = tmp_path / f"out-{name}", tmp_path / f"ck-{name}"
        query = start_running(files_front(spark, tmp_path / "in", **options), out, ck)
        try:
            if idle is None:
                wait_for(query, out, 3, 120)
                time.sleep(3)  # more batches would come now if any were planned
                rows = released(out)
                # short.txt (6 bytes) reports (6, 1): long.txt's lines from byte 8 on wait
                held = rows
                assert [r["value"] for r in rows] == ["long-00", "s0", "s1"]
                continue
            rows = wait_for(query, out, total, 120)
            assert sorted(r["value"] for r in rows) == sorted(
                [f"long-{i:02d}" for i in range(12)] + ["s0", "s1"]
            )
            planned = batches(ck)
            assert reports(ck, planned - 1) == [["long.txt", 0, 96, 96], ["short.txt", 1, 6, 96]]
            time.sleep(3)  # three more idle periods: no stream of empty batches
            assert batches(ck) == planned
            # short.txt wakes up: its next line comes after its report, then waits for
            # long.txt to go idle... which it is already, and it is raised in the same batch
            write_lines(tmp_path / "in" / "short.txt", ["s2"])
            rows = wait_for(query, out, total + 1, 60)
            (late,) = [r for r in rows if r["value"] == "s2"]
            assert (late["ts"], late["front"]) == (96, 1)
        finally:
            query.stop()
    assert held is not None


def test_available_now_releases_everything_with_a_front_that_finishes_early(
    spark: SparkSession, tmp_path: Path
):
    inputs = {
        "a.txt": [f"a{i:02d}" for i in range(25)],
        "b.txt": ["b0"],
        "c.txt": [f"c{i}" for i in range(9)],
    }
    for name, lines in inputs.items():
        write_lines(tmp_path / "in" / name, lines)
    df = files_front(spark, tmp_path / "in", clock="logical", maxRecordsPerTrigger=3)
    run_to_files(df, tmp_path / "out", tmp_path / "ck")
    rows = released(tmp_path / "out")
    assert sorted(r["value"] for r in rows) == sorted(v for vs in inputs.values() for v in vs)
    assert all(r["ts"] == r["position"] for r in rows)  # per-front clocks: ts = byte offset
    # b finished in the first batch and was raised to the horizon; a kept releasing as it went
    assert reports(tmp_path / "ck", 0) == [
        ["a.txt", 0, 4, 4],
        ["b.txt", 1, 3, 4],
        ["c.txt", 2, 3, 3],
    ]
    parts = sorted((tmp_path / "out").glob("part-*.jsonl"))
    assert len(parts) > 5
    # a run with nothing new plans no batch and releases nothing twice
    planned = batches(tmp_path / "ck")
    run_to_files(df, tmp_path / "out", tmp_path / "ck")
    assert released(tmp_path / "out") == rows
    assert batches(tmp_path / "ck") == planned


def test_several_sources_release_below_the_least_source_horizon(
    spark: SparkSession, tmp_path: Path
):
    """What holds with several sources (documented): each raises its fronts to its own horizon.

    y (6 bytes) ends in the first batch and reports (6, front 100); x goes on to byte 120.
    At the end of the run only the rows below (6, 100) are released; the rest waits in the
    sink's buffer until y moves past them (here: a later run with more lines in y).
    """
    write_lines(tmp_path / "x" / "x.txt", [f"x{i:02d}" for i in range(30)])
    write_lines(tmp_path / "y" / "y.txt", ["y0", "y1"])

    def union() -> DataFrame:
        long = files_front(spark, tmp_path / "x", clock="logical", maxRecordsPerTrigger=4)
        short = files_front(spark, tmp_path / "y", clock="logical", frontIdBase=100)
        return long.unionByName(short)

    run_to_files(union(), tmp_path / "out", tmp_path / "ck")
    assert [r["value"] for r in released(tmp_path / "out")] == ["x00", "y0", "y1", "x01"]
    write_lines(tmp_path / "y" / "y.txt", ["y" + "-" * 50])  # y's report moves to 58
    run_to_files(union(), tmp_path / "out", tmp_path / "ck")
    values = [r["value"] for r in released(tmp_path / "out")]
    # y's new line (6, 100), then x's rows below byte 58
    assert values[4:] == ["y" + "-" * 50] + [f"x{i:02d}" for i in range(2, 15)]
