"""A write task's parts with ``release=tasks``: written block by block, each in meta order."""

from __future__ import annotations

import contextlib
import tempfile
from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flamestream.model import GlobalTime, LocalTime
from flamestream.spark.connector.options import OptionReader
from flamestream.spark.connector.sink import (
    STREAMED_PARTS,
    BackgroundPart,
    TaskParts,
    _ready,
    fill_parts,
)
from flamestream.spark.exec.general.items import MAY_INVALIDATE, TOMBSTONE, encode_trace
from pyspark_flamestream.sinks.files import FilesOutput

from ..examples import examples

#: Encoded traces in every order relation (a prefix, siblings), logical times 0: as released.
TRACES = [
    encode_trace(()),
    encode_trace((LocalTime(0, 0),)),
    encode_trace((LocalTime(0, 1),)),
    encode_trace((LocalTime(0, 0), LocalTime(0, 2))),
]

ROW = st.tuples(
    st.integers(0, 5),  # ts
    st.integers(0, 1),  # front
    st.sampled_from(TRACES),  # trace
    st.sampled_from([0, 0, 0, 0, MAY_INVALIDATE, TOMBSTONE]),  # flags
)


def table(rows: list[tuple[int, int, bytes, int]], first: int) -> pa.Table:
    """Released rows; ``value`` numbers them, so that each row is told from the others."""
    return pa.table(
        {
            "ts": pa.array([r[0] for r in rows], pa.int64()),
            "front": pa.array([r[1] for r in rows], pa.int32()),
            "trace": pa.array([r[2] for r in rows], pa.binary()),
            "flags": pa.array([r[3] for r in rows], pa.int8()),
            "value": [f"row {first + n}" for n in range(len(rows))],
        }
    )


def sink(folder: str, fmt: str) -> FilesOutput:
    return FilesOutput(OptionReader("sink files", {"path": folder, "format": fmt}))


def read_part(folder: str, fmt: str, name: str | None = None) -> list[dict[str, Any]]:
    if name is None:
        (path,) = Path(folder).glob(".part-*.tmp")  # the hidden name the commit publishes
    else:
        path = Path(folder) / name  # the attempt's hidden file, named by close()
    if fmt == "parquet":
        return pq.read_table(path).to_pylist()
    return pa.json.read_json(path).to_pylist() if path.stat().st_size else []


def key(row: dict[str, Any]) -> tuple[Any, ...]:
    trace = row["trace"]
    return (row["ts"], row["front"], trace if isinstance(trace, bytes) else trace.encode())


@settings(max_examples=examples(150), deadline=None)
@given(
    blocks=st.lists(
        st.tuples(st.lists(ROW, min_size=0, max_size=6), st.booleans()), min_size=1, max_size=5
    ),
    min_ts=st.integers(0, 6),
    in_order=st.booleans(),
)
def test_parts_take_releasable_rows_in_meta_order_and_lose_none(blocks, min_ts, in_order):
    """Every row ends in a part or left for the commit, once; the parts hold only rows
    below the min-time and unflagged, each part in meta order; the commit gets only the
    others; blocks that come releasable and in order (a keyed stage's runs) all go into one
    part."""
    if in_order:  # as a keyed stage yields them: each run sorted, runs one after another
        rows = sorted(r[:3] for rows, _ in blocks for r in rows)
        cuts = [len(rows) * n // len(blocks) for n in range(len(blocks) + 1)]
        blocks = [([(*r, 0) for r in rows[a:b]], True) for a, b in pairwise(cuts)]
        min_ts = 9
    tables, first = [], 0
    for rows, ordered in blocks:
        rows = sorted(rows) if ordered else rows
        tables.append(table(rows, first))
        first += len(rows)
    min_time = GlobalTime(min_ts, 0)
    with tempfile.TemporaryDirectory() as folder:
        parts = TaskParts(sink(folder, "parquet"), 3, 1, background=True)  # as keyed tasks
        rest = fill_parts(parts, tables, min_time)
        names = parts.close()
        written = [read_part(folder, "parquet", name) for name in names]
    left = rest.to_pylist() if rest is not None else []
    everything = [row for t in tables for row in t.to_pylist()]
    rows = [row for part in written for row in part]
    assert Counter(map(str, rows + left)) == Counter(map(str, everything))
    assert len(rows) == parts.rows and len(names) <= STREAMED_PARTS + 1
    for part in written:
        assert [key(r) for r in part] == sorted(key(r) for r in part)
    assert all((r["ts"], r["front"]) < tuple(min_time) and r["flags"] == 0 for r in rows)
    if rest is not None:  # only what a task may not release waits for the commit
        assert not pc.any(_ready(rest, min_time)).as_py()
    if in_order:
        assert rest is None
        # outside a task the attempt is 0: the hidden name of attempt 0's one part
        assert names == ([".part-000000000003-00001.parquet.0.tmp"] if everything else [])


@settings(max_examples=examples(30), deadline=None)
@given(ranges=st.lists(st.lists(st.integers(0, 30), max_size=12), min_size=1, max_size=12))
def test_a_read_tasks_ranges_make_a_part_each_and_wait_for_nothing(ranges):
    """A packed read task's rows: range after range, each in meta order, overlapping in
    global time. Each range's blocks go into a part of their own as they come, up to
    STREAMED_PARTS; the later ones are held and end in one more part, sorted."""
    tables, first = [], 0
    for front, times in enumerate(ranges):
        rows = [(ts, front, b"", 0) for ts in sorted(times)]
        half = len(rows) // 2
        tables += [table(rows[:half], first), table(rows[half:], first + half)]
        first += len(rows)
    with tempfile.TemporaryDirectory() as folder:
        parts = TaskParts(sink(folder, "json"), 0, 2)
        rest = fill_parts(parts, tables, GlobalTime(99, 0))
        names = parts.close()
        written = [read_part(folder, "json", name) for name in names]
    assert rest is None or not rest.num_rows  # nothing left to the commit
    assert sum(map(len, written)) == first
    for part in written:
        assert [key(r) for r in part] == sorted(key(r) for r in part)
    assert len(names) <= min(STREAMED_PARTS + 1, sum(1 for times in ranges if times))


def test_a_files_part_written_in_blocks_is_the_part_written_at_once():
    """Parquet row groups or JSON lines, appended block by block, read back as one write."""
    rows = table([(n // 3, n % 2, bytes([n % 5]), 0) for n in range(40)], 0)
    blocks = [rows.slice(0, 7), rows.slice(7, 0), rows.slice(7, 20), rows.slice(27)]
    for fmt in ("parquet", "json"):
        with tempfile.TemporaryDirectory() as streamed, tempfile.TemporaryDirectory() as whole:
            part = sink(streamed, fmt).open_part(5, 2)
            for block in blocks:
                part.write(block)
            name = part.close()
            assert name == sink(whole, fmt).write_part(5, 2, rows)
            (a,), (b,) = Path(streamed).glob(".part-*"), Path(whole).glob(".part-*")
            if fmt == "json":
                assert a.read_bytes() == b.read_bytes()
            else:
                assert pq.read_table(a).equals(pq.read_table(b))
                assert pq.ParquetFile(a).metadata.num_row_groups == 3  # one per non-empty block


def test_an_aborted_part_leaves_no_file():
    """A task that fails mid-way (a step raised after some blocks were written) drops its
    attempt's file; an ordered part whose blocks stop with an error does the same."""
    rows = table([(n, 0, b"", 0) for n in range(10)], 0)
    for fmt, background in [(f, b) for f in ("parquet", "json") for b in (False, True)]:
        with tempfile.TemporaryDirectory() as folder:
            parts = TaskParts(sink(folder, fmt), 4, 0, background)

            def blocks() -> Any:
                yield rows.slice(5, 5)
                yield rows.slice(0, 5)  # a second part
                raise RuntimeError("a step raised")

            try:
                fill_parts(parts, blocks(), GlobalTime(99, 0))
            except RuntimeError:
                parts.abort()
            assert parts.rows == 10 and len(parts.parts) == 2
            assert not list(Path(folder).iterdir())


@pytest.mark.parametrize("after", [0, 1, 2], ids=["last", "then-one", "then-two"])
def test_a_failed_background_write_fails_the_part_and_leaves_no_file(tmp_path, after):
    """A keyed task writes its parts on a thread (``BackgroundPart``), one run at a time. A
    failed write is raised by the part's next write or its close, before the task could
    report the part, and its file is gone."""
    folder = str(tmp_path)
    part = BackgroundPart(sink(folder, "parquet").open_part(3, 0))
    part.write(table([(1, 0, b"", 0)], 0))
    part.write(table([(2, 0, b"", 0)], 1).drop_columns(["value"]))  # not the part's schema
    with pytest.raises(ValueError, match="schema"):
        for n in range(after):  # the first of these waits for the bad run's write
            part.write(table([(3 + n, 0, b"", 0)], 2 + n))
        part.close()
    part.abort()  # what a task does when its write raises
    assert not list(tmp_path.iterdir())  # neither the attempt's file nor a hidden part


def test_a_background_part_writes_every_run_in_order(tmp_path):
    part = BackgroundPart(sink(str(tmp_path), "parquet").open_part(5, 0))
    for t in range(5):
        part.write(table([(t, 0, b"", 0)], t))
    name = part.close()
    written = pq.read_table(tmp_path / name)
    assert written.column("value").to_pylist() == [f"row {t}" for t in range(5)]


def test_an_aborted_background_part_waits_for_its_write_and_leaves_no_file(tmp_path):
    folder = str(tmp_path)
    bad = table([(2, 0, b"", 0)], 1).drop_columns(["value"])
    good = table([(2, 0, b"", 0)], 1)
    for runs in ([good], [good, good], [bad, good], [good, bad, good]):
        part = BackgroundPart(sink(folder, "parquet").open_part(4, 0))
        part.write(table([(1, 0, b"", 0)], 0))
        # a bad run's failure is raised by the write after it
        failing = any(run is bad for run in runs[:-1])
        with pytest.raises(ValueError) if failing else contextlib.nullcontext():
            for run in runs:  # each goes to the thread; a bad one fails there
                part.write(run)
        part.abort()
        assert not list(tmp_path.iterdir())
