"""The sinks' ``columns`` option: validated at start, kept for a checkpoint, a projection only.

Whatever a sink writes of each released row, the parts a write task releases hold the same
rows in the same order as with every column: the written columns, byte for byte.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from flamestream.errors import ConfigError
from flamestream.model import GlobalTime
from flamestream.spark.connector.options import OptionReader
from flamestream.spark.connector.sink import (
    COLUMNS,
    COLUMNS_FILE,
    BarrierWriter,
    TaskParts,
    _released,
    fill_parts,
    released_form,
    written_columns,
)
from flamestream.spark.exec.general.items import RELEASED_COLUMNS
from pyspark_flamestream.sinks.files import FilesOutput

from ..examples import examples
from .test_sink_parts import ROW, table

FRONT_ROWS = StructType(
    [
        StructField("ts", LongType()),
        StructField("front", IntegerType()),
        StructField("source", StringType()),
        StructField("position", LongType()),
        StructField("value", StringType()),
    ]
)


def writer(folder: Path, schema: StructType = FRONT_ROWS, **options: str) -> BarrierWriter:
    """The sink's writer as ``streamWriter`` makes it at query start."""
    given = {"path": str(folder / "out"), "checkpointLocation": str(folder / "ck"), **options}
    reader = OptionReader("sink files", given)
    made = BarrierWriter(FilesOutput(reader), reader, schema)
    reader.finish()
    return made


# --- the option -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "chosen"),
    [
        ("all", "all"),
        ("VALUE", "value"),
        ("value,time", "value,time"),
        (" time , value", "value,time"),
    ],
)
def test_the_option_reads_its_names_in_any_order_and_case(given: str, chosen: str):
    reader = OptionReader("sink files", {"columns": given})
    assert reader.name_list("columns", COLUMNS, "all") == chosen


@pytest.mark.parametrize("bad", ["trace", "value,trace", "", "time", "value,,time,flags"])
def test_a_bad_choice_names_the_option_the_value_and_what_is_allowed(tmp_path: Path, bad: str):
    with pytest.raises(ConfigError) as raised:
        writer(tmp_path, columns=bad)
    message = str(raised.value)
    assert "sink files" in message
    assert f"option 'columns' = {bad!r}" in message
    assert "one of all, value, value,time" in message
    assert not (tmp_path / "ck").exists()  # nothing written: it failed before the query ran


def test_a_choice_that_leaves_no_column_is_refused_at_start(tmp_path: Path):
    meta_only = StructType([StructField("ts", LongType()), StructField("front", IntegerType())])
    with pytest.raises(ConfigError, match=r"'columns' = 'value'.*no payload column"):
        writer(tmp_path, meta_only, columns="value")
    assert writer(tmp_path, meta_only).columns is None  # all: the meta is what it writes


def test_written_columns_keep_the_payload_and_on_request_the_global_time():
    graph = list(RELEASED_COLUMNS)
    assert written_columns("all", graph) is None
    assert written_columns("value", graph) == ("value",)
    assert written_columns("value,time", graph) == ("ts", "front", "value")
    front = ["ts", "front", "source", "position", "key", "value", "topic"]
    assert written_columns("value", front) == ("key", "value", "topic")


def test_a_task_keeps_what_the_barrier_reads_and_what_the_sink_writes(tmp_path: Path):
    assert writer(tmp_path / "a", columns="value").kept == ["ts", "front", "value"]
    assert writer(tmp_path / "b").kept is None
    items = pa.RecordBatch.from_pydict(
        {
            **{name: [1] for name in ("ts", "front", "flags", "position")},
            "trace": [b"\x01"],
            "source": ["s"],
            "to": ["out"],
            "value": ["v"],
        }
    )
    kept = [n for n in RELEASED_COLUMNS if n in ("ts", "front", "trace", "flags", "value")]
    assert _released(items, kept).schema.names == ["ts", "front", "trace", "flags", "value"]
    assert _released(items).schema.names == list(RELEASED_COLUMNS)


def test_the_choice_stays_the_same_for_a_checkpoint_once_the_sink_ran(tmp_path: Path):
    state = tmp_path / "ck" / "flamestream-sink"
    writer(tmp_path, columns="value")
    writer(tmp_path, columns="value,time")  # nothing staged yet: a first start that failed
    assert (state / COLUMNS_FILE).read_text() == "value,time"
    (state / "staging" / "0").mkdir(parents=True)  # batch 0 ran its tasks
    writer(tmp_path, columns="time,value")  # a restart with the same choice
    with pytest.raises(ConfigError, match=r"'columns' = 'all'.*value,time, the columns"):
        writer(tmp_path)


def test_a_sink_state_from_before_the_option_wrote_every_column(tmp_path: Path):
    (tmp_path / "ck" / "flamestream-sink" / "commits").mkdir(parents=True)
    writer(tmp_path)
    with pytest.raises(ConfigError, match=r"'columns' = 'value'.*all, the columns"):
        writer(tmp_path, columns="value")


# --- the projection -----------------------------------------------------------------------


def released_part(rows: list[pa.Table], fmt: str, columns: Any) -> tuple[bytes, pa.Table]:
    """What a write task releases of ``rows`` (everything below the min-time) in one part."""
    with tempfile.TemporaryDirectory() as folder:
        output = FilesOutput(OptionReader("sink files", {"path": folder, "format": fmt}))
        parts = TaskParts(output, 0, 0, columns=columns)
        rest = fill_parts(parts, rows, GlobalTime(99, 0))
        names = parts.close()
        assert rest is None or not rest.num_rows
        if not names:
            return b"", pa.table({})
        (name,) = names  # the blocks come in meta order: one part
        data = (Path(folder) / name).read_bytes()
        return data, pq.read_table(Path(folder) / name) if fmt == "parquet" else pa.table({})


@settings(max_examples=examples(60), deadline=None)
@given(
    blocks=st.lists(st.lists(ROW, min_size=1, max_size=6), min_size=1, max_size=4),
    fmt=st.sampled_from(["json", "parquet"]),
    choice=st.sampled_from(["value", "value,time"]),
)
def test_a_projected_part_is_the_full_parts_columns_byte_for_byte(
    blocks: list[list[tuple[int, int, bytes, int]]], fmt: str, choice: str
):
    plain = [(ts, front, trace, 0) for rows in blocks for ts, front, trace, _ in rows]
    ordered = sorted(plain, key=lambda r: (r[0], r[1], r[2]))
    rows = [table(ordered[i : i + 3], i) for i in range(0, len(ordered), 3)]
    columns = written_columns(choice, rows[0].column_names)
    full, full_table = released_part(rows, fmt, None)
    narrow, narrow_table = released_part(rows, fmt, columns)
    assert columns is not None
    if fmt == "json":
        picked = [
            json.dumps({c: row[c] for c in columns}, separators=(",", ":"))
            for row in map(json.loads, full.decode().splitlines())
        ]
        assert narrow.decode().splitlines() == picked
    else:
        assert narrow_table.equals(full_table.select(list(columns)))
        assert narrow_table.schema.names == list(columns)


def test_released_form_selects_the_written_columns():
    rows = table([(1, 0, b"", 0)], 0)
    assert released_form(rows, None).equals(rows)
    assert released_form(rows, ("value", "ts")).column_names == ["value", "ts"]
