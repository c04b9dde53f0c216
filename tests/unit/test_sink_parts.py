"""A write task's part with ``release=tasks``: written block by block, in meta order only."""

from __future__ import annotations

import tempfile
from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.json
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from flamestream.model import GlobalTime
from flamestream.spark.connector.options import OptionReader
from flamestream.spark.connector.sink import OrderedPart, fill_part
from flamestream.spark.exec.items import MAY_INVALIDATE, TOMBSTONE
from pyspark_flamestream.sinks.files import FilesOutput

ROW = st.tuples(
    st.integers(0, 5),  # ts
    st.integers(0, 1),  # front
    st.sampled_from([b"", b"\x00", b"\x01", b"\x00\x02"]),  # trace
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


def read_part(folder: str, fmt: str) -> list[dict[str, Any]]:
    (path,) = Path(folder).glob(".part-*.tmp")  # the hidden name the commit publishes
    if fmt == "parquet":
        return pq.read_table(path).to_pylist()
    return pa.json.read_json(path).to_pylist() if path.stat().st_size else []


def key(row: dict[str, Any]) -> tuple[Any, ...]:
    trace = row["trace"]
    return (row["ts"], row["front"], trace if isinstance(trace, bytes) else trace.encode())


@settings(max_examples=150, deadline=None)
@given(
    blocks=st.lists(
        st.tuples(st.lists(ROW, min_size=0, max_size=6), st.booleans()), min_size=1, max_size=5
    ),
    min_ts=st.integers(0, 6),
    in_order=st.booleans(),
)
def test_a_part_takes_releasable_rows_in_meta_order_and_loses_none(blocks, min_ts, in_order):
    """Every row ends in the part or left for the commit, once; the part holds only rows
    below the min-time and unflagged, in meta order; blocks that come releasable and in
    order (a keyed stage's runs) all go into the part."""
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
        part = OrderedPart(sink(folder, "parquet"), 3, 1)
        rest = fill_part(part, tables, min_time)
        written = read_part(folder, "parquet") if part.rows and part.close() else []
    left = rest.to_pylist() if rest is not None else []
    everything = [row for t in tables for row in t.to_pylist()]
    assert Counter(map(str, written + left)) == Counter(map(str, everything))
    assert len(written) == part.rows
    assert [key(r) for r in written] == sorted(key(r) for r in written)
    assert all((r["ts"], r["front"]) < tuple(min_time) and r["flags"] == 0 for r in written)
    if in_order:
        assert rest is None and part.rows == len(everything)


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
    for fmt in ("parquet", "json"):
        with tempfile.TemporaryDirectory() as folder:
            part = OrderedPart(sink(folder, fmt), 4, 0)

            def blocks() -> Any:
                yield rows.slice(0, 5)
                raise RuntimeError("a step raised")

            try:
                fill_part(part, blocks(), GlobalTime(99, 0))
            except RuntimeError:
                part.abort()
            assert part.rows == 5
            assert not list(Path(folder).iterdir())
