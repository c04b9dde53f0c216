"""Global times that do not depend on batch boundaries: ``clock=logical`` and ``clock=record``.

An order-sensitive graph (a window-2 grouping over the words of three files fronts of very
different lengths) runs with different read limits, partitionings and a restart in the
middle; the released (ts, front, value) rows must be identical, because each front's global
times come from its own positions (logical) or its own record times (record) alone.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from flamestream import Dataflow
from flamestream.spark import apply_graph

from .conftest import files_front, released, run_to_files, write_lines

WORDS = ["apple", "avocado", "banana", "blueberry", "cherry", "apricot", "beet", "cress"]


def pairs() -> Dataflow:
    """Each word with the previous word of the same first letter: sensitive to global times."""
    flow = Dataflow("pairs")
    words = flow.map("parse", flow.source("lines"), lambda line: json.loads(line)["w"])
    tuples = flow.grouping("by-letter", words, window=2, key=lambda w: w[0])
    flow.sink("out", flow.map("join", tuples, "+".join))
    return flow


def write_input(folder: Path, seed: int) -> dict[str, list[tuple[int, str]]]:
    """Three files of 25, 3 and 12 JSON lines; record times jump around and overlap."""
    rng = random.Random(seed)
    data = {}
    for name, count in (("a.jsonl", 25), ("b.jsonl", 3), ("c.jsonl", 12)):
        rows = [(rng.randrange(0, 60), rng.choice(WORDS)) for _ in range(count)]
        write_lines(folder / name, [json.dumps({"t": t, "w": w}) for t, w in rows])
        data[name] = rows
    return data


def front(spark: SparkSession, folder: Path, clock: str, limit: int | None) -> DataFrame:
    options: dict[str, Any] = {"clock": clock}
    if clock == "record":
        options["timestampField"] = "t"
    if limit:
        options["maxRecordsPerTrigger"] = limit
    return files_front(spark, folder, **options)


def run_graph(
    spark: SparkSession,
    folder: Path,
    work: Path,
    clock: str,
    limit: int | None,
    partitions: int | None,
    restart: bool,
) -> list[tuple[int, int, str]]:
    out, ck = work / "out", work / "ck"

    def graph() -> DataFrame:
        df = front(spark, folder, clock, limit)
        if partitions:
            df = df.repartition(partitions)
        return apply_graph(pairs(), df, checkpoint_location=str(ck))

    if restart:  # a running stream stopped after a few batches, then resumed to the end
        query = (
            graph()
            .writeStream.format("flamestream")
            .option("sink", "files")
            .option("path", str(out))
            .option("checkpointLocation", str(ck))
            .trigger(processingTime="200 milliseconds")
            .start()
        )
        deadline = time.monotonic() + 120
        while (query.lastProgress or {}).get("batchId", -1) < 2 and time.monotonic() < deadline:
            assert query.exception() is None
            time.sleep(0.1)
        query.stop()
        assert (query.lastProgress or {}).get("batchId", -1) >= 2
    run_to_files(graph(), out, ck)
    return sorted((r["ts"], r["front"], r["value"]) for r in released(out))


def clamped(times: list[int]) -> list[int]:
    out, floor = [], 0
    for t in times:
        floor = max(t, floor)
        out.append(floor)
        floor += 1
    return out


@pytest.mark.parametrize("clock", ["logical", "record"])
def test_released_rows_do_not_depend_on_read_limits_partitions_or_restarts(
    spark: SparkSession, tmp_path: Path, clock: str
):
    data = write_input(tmp_path / "in", seed=7)
    rng = random.Random(clock)
    settings = [(None, None, False), (2, 3, True), (rng.choice([3, 5, 7]), 1, False)]
    results = []
    for i, (limit, partitions, restart) in enumerate(settings):
        work = tmp_path / f"run-{i}"
        results.append(run_graph(spark, tmp_path / "in", work, clock, limit, partitions, restart))
        assert results[-1] == results[0], (limit, partitions, restart)
    rows = results[0]
    assert len(rows) == 40  # one tuple per word, every one released
    fronts = {name: i for i, name in enumerate(sorted(data))}
    for name, records in data.items():
        mine = sorted(ts for ts, f, _ in rows if f == fronts[name])
        if clock == "logical":  # ts = the line's byte offset
            lines = [json.dumps({"t": t, "w": w}) for t, w in records]
            assert mine == [sum(len(x) + 1 for x in lines[:k]) for k in range(len(lines))]
        else:  # ts = the record's time, clamped monotonic per front
            assert mine == clamped([t for t, _ in records])
    # the fronts interleave: some tuple joins words of two different fronts
    assert any("+" in value for _, _, value in rows)


def test_record_clock_needs_timestamp_field_and_fails_naming_a_line_without_it(
    spark: SparkSession, tmp_path: Path
):
    write_lines(tmp_path / "in" / "a.jsonl", ['{"t": 1}', '{"u": 2}'])
    with pytest.raises(Exception, match=r"timestampField' = \(missing\).*with clock=record"):
        files_front(spark, tmp_path / "in", clock="record")
    with pytest.raises(Exception, match=r"timestampField' = 't'.*only with clock=record"):
        files_front(spark, tmp_path / "in", timestampField="t")
    generator = spark.readStream.format("flamestream").option("front", "generator")
    with pytest.raises(Exception, match=r"'clock' = 'record'.*no time of their own"):
        generator.option("clock", "record").load()
    df = front(spark, tmp_path / "in", "record", None)
    with pytest.raises(Exception, match=r"front files.*a\.jsonl', 9\).*timestampField 't'"):
        run_to_files(df, tmp_path / "out", tmp_path / "ck")


def test_a_deleted_input_file_is_a_clear_error(spark: SparkSession, tmp_path: Path):
    write_lines(tmp_path / "in" / "keep.txt", ["k"])
    write_lines(tmp_path / "in" / "gone.txt", ["g"])
    run_to_files(files_front(spark, tmp_path / "in"), tmp_path / "out", tmp_path / "ck")
    (tmp_path / "in" / "gone.txt").unlink()
    with pytest.raises(Exception, match=r"gone\.txt.*\(front 0.*no longer available") as caught:
        run_to_files(files_front(spark, tmp_path / "in"), tmp_path / "out", tmp_path / "ck")
    assert "KeyError" not in str(caught.value)
    assert "new checkpointLocation" in str(caught.value)


def test_a_checkpoint_of_another_query_is_a_clear_error(spark: SparkSession, tmp_path: Path):
    write_lines(tmp_path / "in" / "a.txt", ["a"])
    generator = (
        spark.readStream.format("flamestream")
        .option("front", "generator")
        .option("totalRows", 4)
        .option("rowsPerSecond", 0)
        .load()
    )
    run_to_files(generator, tmp_path / "out", tmp_path / "ck")
    with pytest.raises(Exception, match=r"written by front generator.*checkpointLocation"):
        run_to_files(files_front(spark, tmp_path / "in"), tmp_path / "out2", tmp_path / "ck")
