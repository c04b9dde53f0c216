"""The files sink's Parquet: what it summarizes and encodes, on a released batch's rows."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from flamestream.spark.connector.options import OptionReader
from flamestream.spark.exec.general.items import RELEASED_COLUMNS
from pyspark_flamestream.sinks.files import FilesOutput


def test_released_rows_as_parquet_keep_their_values_and_summarize_what_prunes(tmp_path: Path):
    """Min/max statistics on times, positions and values (readers prune by them), none on
    the encoded traces; dictionaries on the columns that repeat; the rows read back equal."""
    rows = 50
    table = pa.table(
        {
            "ts": pa.array(range(rows), pa.int64()),
            "front": pa.array([0] * rows, pa.int32()),
            "trace": pa.array([bytes([0, n % 7, 0, 0]) for n in range(rows)], pa.binary()),
            "flags": pa.array([0] * rows, pa.int8()),
            "source": ["in.txt"] * rows,
            "position": pa.array(range(rows), pa.int64()),
            "sink": ["out"] * rows,
            "value": [f"w{n}=1" for n in range(rows)],
        }
    )
    assert tuple(table.column_names) == RELEASED_COLUMNS
    sink = FilesOutput(OptionReader("sink files", {"path": str(tmp_path), "format": "parquet"}))
    sink.release(7, table)
    (part,) = tmp_path.glob("part-*.parquet")
    assert pq.read_table(part).equals(table)
    group = pq.ParquetFile(part).metadata.row_group(0)
    columns = {group.column(i).path_in_schema: group.column(i) for i in range(group.num_columns)}
    summarized = {name for name, column in columns.items() if column.is_stats_set}
    assert summarized == set(RELEASED_COLUMNS) - {"trace"}
    coded = {name for name, column in columns.items() if "RLE_DICTIONARY" in column.encodings}
    assert coded == {"source", "sink"}
