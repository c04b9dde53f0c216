"""The ``files`` sink: released rows as JSON lines or Parquet files, one file per batch.

Files are named ``part-<batch id>.jsonl`` (or ``.parquet``) under ``path``, written through a
temporary name: a replayed batch overwrites its own file, so readers never see a duplicate.

Options: ``path`` (required), ``format`` (``json`` or ``parquet``), plus the common sink
options (``checkpointLocation``, ``stateLocation``).
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from flamestream.spark.config import OptionReader
from flamestream.spark.sink import SinkOutput


class FilesOutput(SinkOutput):
    """JSON lines or Parquet files named by batch id."""

    kind = "files"

    def __init__(self, options: OptionReader) -> None:
        self.path = options.string("path", required=True).rstrip("/")
        self.format = options.choice("format", ["json", "parquet"], "json")

    def release(self, batch_id: int, rows: pa.Table) -> None:
        """Write the batch's file atomically."""
        fs, root = fsspec.core.url_to_fs(self.path)
        fs.makedirs(root, exist_ok=True)
        suffix = "jsonl" if self.format == "json" else "parquet"
        target = posixpath.join(root, f"part-{batch_id:012d}.{suffix}")
        temporary = posixpath.join(root, f".part-{batch_id:012d}.{suffix}.tmp")
        with fs.open(temporary, "wb") as out:
            if self.format == "parquet":
                pq.write_table(rows, out)
            else:
                out.write(_json_lines(rows))
        fs.mv(temporary, target)


def _json_lines(rows: pa.Table) -> bytes:
    def plain(value: Any) -> Any:
        return value.hex() if isinstance(value, bytes) else value

    lines = (
        json.dumps({k: plain(v) for k, v in row.items()}, separators=(",", ":"))
        for row in rows.to_pylist()
    )
    return ("\n".join(lines) + "\n").encode()
