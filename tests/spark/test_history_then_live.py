"""A history, then live: one query backfills an archive and goes on live, exactly once.

The archives here are JSON lines a flamestream files sink could have written of the live
source (``source``, ``position``, ``value``; or a record time ``t``), overlapping it.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

from flamestream.errors import ConfigError
from flamestream.spark import apply_graph, watch_backfill

from .conftest import write_lines
from .test_graph_on_spark import expected, read_rows, released_trace, to_files, word_count

LIVE_LINES = [
    "the quick brown fox",
    "jumps over",
    "the lazy dog",
    "a b c the",
    "lorem ipsum dolor",
    "the end of it",
    "one two three",
    "four five",
]


def byte_offsets(lines: list[str]) -> list[int]:
    out, at = [], 0
    for line in lines:
        out.append(at)
        at += len(line.encode()) + 1
    return out


def archive(folder: Path, name: str, rows: list[dict[str, Any]]) -> None:
    write_lines(folder / name, [json.dumps(r) for r in rows])


def hybrid(spark: SparkSession, live: Path, **options: Any) -> DataFrame:
    reader = spark.readStream.format("flamestream").option("front", "files")
    reader = reader.option("path", str(live))
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def offsets(checkpoint: Path) -> list[dict[str, Any]]:
    """The front's offset of every planned batch, in order."""
    folder = checkpoint / "offsets"
    batches = sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())
    return [json.loads((folder / str(b)).read_text().splitlines()[2]) for b in batches]


def position_case(tmp_path: Path, archived: int) -> tuple[Path, Path]:
    """live.txt with every line; an archive of its first ``archived`` lines (by position)."""
    live, past = tmp_path / "live", tmp_path / "history"
    write_lines(live / "live.txt", LIVE_LINES)
    positions = byte_offsets(LIVE_LINES)
    rows = [
        {"source": "live.txt", "position": positions[i], "value": LIVE_LINES[i]}
        for i in range(archived)
    ]
    archive(past, "part-0.jsonl", rows[: archived // 2])
    archive(past, "part-1.jsonl", rows[archived // 2 :])
    return live, past


def run_fronts_and_graph(
    spark: SparkSession, df_of: Any, tmp_path: Path
) -> tuple[list[SimpleNamespace], list[SimpleNamespace]]:
    """The front's rows and the word count's, each through a files sink (AvailableNow)."""
    to_files(df_of(), tmp_path / "fronts", tmp_path / "ck-fronts")
    flow = word_count()
    out = apply_graph(flow, df_of(), checkpoint_location=str(tmp_path / "ck"))
    to_files(out, tmp_path / "out", tmp_path / "ck")
    return read_rows(tmp_path / "fronts"), read_rows(tmp_path / "out")


def test_a_position_boundary_admits_every_record_once_and_the_reference_agrees(
    spark: SparkSession, tmp_path: Path
):
    live, past = position_case(tmp_path, archived=5)
    options = {
        "history": "files",
        "history.path": str(past),
        "history.format": "json",
        "history.boundary": "position",
        "history.maxRecordsPerTrigger": 2,
        "maxRecordsPerTrigger": 1,
        "clock": "logical",
    }
    fronts, out = run_fronts_and_graph(spark, lambda: hybrid(spark, live, **options), tmp_path)
    # every line once: the first five from the archive, the rest from live.txt
    assert sorted(r.value for r in fronts) == sorted(LIVE_LINES)
    history = [r for r in fronts if r.source.startswith("part-")]
    assert sorted(r.value for r in history) == sorted(LIVE_LINES[:5])
    live_rows = [r for r in fronts if r.source == "live.txt"]
    assert [r.value for r in live_rows] == LIVE_LINES[5:]
    # global time goes on across the switch
    assert min(r.ts for r in live_rows) > max(r.ts for r in history)
    # the graph's output is the reference runtime's on the same items
    want = expected(word_count(), fronts)
    assert (
        sorted(
            (r.sink, r.ts, r.front, released_trace(bytes.fromhex(r.trace)), r.value) for r in out
        )
        == want
    )
    assert {"the=4"} <= {r.value for r in out}
    # the offset log: backfill batches, then the switch, recorded with what it came from
    records = [o["history"] for o in offsets(tmp_path / "ck")]
    phases = [r["phase"] for r in records]
    switch_at = phases.index("live")
    assert switch_at >= 3  # five archived records, two a batch
    assert set(phases[switch_at:]) == {"live"}
    switch = records[switch_at]["switch"]
    assert switch["batch"] == switch_at and switch["boundary"] == "position"
    start = byte_offsets(LIVE_LINES)[5]
    assert list(switch["starts"].values()) == [start]
    assert switch["derivedFrom"]["live.txt"][1] == byte_offsets(LIVE_LINES)[4]
    assert switch["gaps"] == [] and records[switch_at - 1]["rowsRead"] == 5
    assert all(r["switch"] == switch for r in records[switch_at:])


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_a_time_boundary_cuts_both_sides_at_the_cut(spark: SparkSession, tmp_path: Path, fmt: str):
    live, past = tmp_path / "live", tmp_path / "history"
    times = [10, 20, 30, 40, 35, 50, 60, 70]  # 35 after 40: a late live record below no cut
    lines = [json.dumps({"t": t, "w": f"w{t} x"}) for t in times]
    write_lines(live / "live.txt", lines)
    # the archive holds 10..40, and 50 (written after the cut: must not be read from it);
    # json: each archive row has the record's time and its value, the live line; text: each
    # archive line is the live line
    kept = [lines[times.index(t)] for t in (10, 20, 30, 40, 50)]
    rows = [{"t": json.loads(x)["t"], "value": x} for x in kept]
    write_lines(past / "a.jsonl", [json.dumps(r) for r in rows] if fmt == "json" else kept)
    options = {
        "history": "files",
        "history.path": str(past),
        "history.timestampField": "t",
        "history.format": fmt,
        "history.boundary": "time",
        "history.cutTime": 45,
        "timestampField": "t",
        "clock": "record",
    }
    fronts, out = run_fronts_and_graph(spark, lambda: hybrid(spark, live, **options), tmp_path)
    history = sorted(json.loads(r.value)["t"] for r in fronts if r.source == "a.jsonl")
    live_rows = sorted(json.loads(r.value)["t"] for r in fronts if r.source == "live.txt")
    assert history == [10, 20, 30, 40]
    assert live_rows == [50, 60, 70]
    assert len(out) > 7
    want = expected(word_count(), fronts)
    assert (
        sorted(
            (r.sink, r.ts, r.front, released_trace(bytes.fromhex(r.trace)), r.value) for r in out
        )
        == want
    )


def test_gaps_between_the_history_and_the_live_source_are_recorded(
    spark: SparkSession, tmp_path: Path
):
    live, past = tmp_path / "live", tmp_path / "history"
    write_lines(live / "live.txt", LIVE_LINES)
    positions = byte_offsets(LIVE_LINES)
    rows = [
        {"source": "live.txt", "position": positions[i], "value": LIVE_LINES[i]} for i in (0, 1, 4)
    ]
    archive(past, "a.jsonl", rows)
    df = hybrid(
        spark,
        live,
        **{
            "history": "files",
            "history.path": str(past),
            "history.format": "json",
            "history.boundary": "position",
        },
    )
    to_files(df, tmp_path / "fronts", tmp_path / "ck")
    values = [r.value for r in read_rows(tmp_path / "fronts")]
    # lines 2 and 3 are in neither: byte positions are no record counts, so no gap is listed,
    # but live starts after the archive's last line
    assert values == [LIVE_LINES[i] for i in (0, 1, 4)] + LIVE_LINES[5:]
    switch = [o["history"]["switch"] for o in offsets(tmp_path / "ck") if o["history"]["switch"]]
    assert switch[0]["starts"] == {next(iter(switch[0]["starts"])): positions[5]}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"history.path": "{past}"}, "'history.boundary' = (missing)"),
        ({"history.boundary": "position"}, "'path' = (missing)"),
        ({"history.path": "{past}", "history.boundary": "time"}, "'history.cutTime'"),
        (
            {
                "history.path": "{past}",
                "history.boundary": "position",
                "history.partitionColumn": "p",
            },
            "only with a kafka live front",
        ),
        (
            {"history.path": "{past}", "history.boundary": "position", "history.colour": "red"},
            "colour",
        ),
    ],
)
def test_bad_history_options_fail_before_the_query_starts(
    spark: SparkSession, tmp_path: Path, options: dict[str, str], message: str
):
    live, past = position_case(tmp_path, archived=2)
    given = {k: v.format(past=past) for k, v in options.items()}
    with pytest.raises(Exception, match=message.replace("(", r"\(").replace(")", r"\)")):
        hybrid(spark, live, history="files", **given)


def test_a_bounded_read_refuses_a_history(spark: SparkSession, tmp_path: Path):
    live, past = position_case(tmp_path, archived=2)
    reader = spark.read.format("flamestream").option("front", "files").option("path", str(live))
    reader = reader.option("history", "files").option("history.path", str(past))
    with pytest.raises(Exception, match="only with readStream"):
        reader.option("history.boundary", "position").load().collect()
    assert ConfigError  # the error class the message comes from


def test_a_missing_history_fails_the_first_planning_naming_it(spark: SparkSession, tmp_path: Path):
    live, past = position_case(tmp_path, archived=2)
    options = {"history.path": str(past / "nowhere"), "history.boundary": "position"}
    df = hybrid(spark, live, history="files", **options)  # no error yet: a restart may be live
    with pytest.raises(Exception, match=r"history files: option 'path' = .*nowhere"):
        to_files(df, tmp_path / "out", tmp_path / "ck")
    assert not list((tmp_path / "ck" / "offsets").glob("[0-9]*"))  # no batch planned


def delta_archive(table: Path, lines: list[str], versions: list[range]) -> None:
    """A Delta table of (file, offset, value) rows of live.txt, one commit per range."""
    from deltalake import write_deltalake

    positions = byte_offsets(lines)
    for rows in versions:
        data = pa.table(
            {
                "file": ["live.txt"] * len(rows),
                "offset": pa.array([positions[i] for i in rows], pa.int64()),
                "value": [lines[i] for i in rows],
            }
        )
        write_deltalake(str(table), data, mode="append")


def test_a_delta_history_of_two_versions_then_the_live_file(spark: SparkSession, tmp_path: Path):
    live = tmp_path / "live"
    write_lines(live / "live.txt", LIVE_LINES)
    delta_archive(tmp_path / "table", LIVE_LINES, [range(0, 3), range(3, 6)])
    options = {
        "history": "delta",
        "history.path": str(tmp_path / "table"),
        "history.boundary": "position",
        "history.sourceColumn": "file",
        "history.positionColumn": "offset",
        "history.maxRecordsPerTrigger": 4,
        "clock": "logical",
    }
    fronts, out = run_fronts_and_graph(spark, lambda: hybrid(spark, live, **options), tmp_path)
    # the archive's six (the snapshot's files oldest first), then live's last two
    assert sorted(r.value for r in fronts[:6]) == sorted(LIVE_LINES[:6])
    assert [r.value for r in fronts[6:]] == LIVE_LINES[6:]
    assert [r.source == "live.txt" for r in fronts] == [False] * 6 + [True] * 2
    want = expected(word_count(), fronts)
    got = sorted(
        (r.sink, r.ts, r.front, released_trace(bytes.fromhex(r.trace)), r.value) for r in out
    )
    assert got == want
    records = [o["history"] for o in offsets(tmp_path / "ck")]
    assert records[-1]["rowsRead"] == 6 and records[-1]["size"] == 6


def test_a_delta_history_without_the_boundary_column_fails_at_query_start(
    spark: SparkSession, tmp_path: Path
):
    live = tmp_path / "live"
    write_lines(live / "live.txt", LIVE_LINES)
    delta_archive(tmp_path / "table", LIVE_LINES, [range(0, 3)])
    options = {
        "history": "delta",
        "history.path": str(tmp_path / "table"),
        "history.boundary": "position",
        "history.sourceColumn": "file",
    }
    with pytest.raises(Exception, match=r"'history.positionColumn' = 'position'.*file, offset"):
        hybrid(spark, live, **options)


def test_watch_backfill_prints_the_backfill_then_the_switch(spark: SparkSession, tmp_path: Path):
    live, past = position_case(tmp_path, archived=5)
    options = {
        "history": "files",
        "history.path": str(past),
        "history.format": "json",
        "history.boundary": "position",
        "history.maxRecordsPerTrigger": 1,
        "clock": "logical",
    }
    query = (
        hybrid(spark, live, **options)
        .writeStream.format("flamestream")
        .option("sink", "files")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="50 milliseconds")
        .start()
    )
    shown = io.StringIO()
    try:
        last = watch_backfill(query, every=0.05, out=shown)
    finally:
        query.stop()
    lines = shown.getvalue().splitlines()
    assert last is not None and last.phase == "live" and last.rows_read == 5
    assert lines[0].startswith("backfill [") and "live [" in lines[-1]
    assert "switched in batch 5" in lines[-1]
    shares = [float(line.split("]")[1].split("%")[0]) for line in lines]
    assert shares == sorted(shares) and shares[-1] == 100.0
