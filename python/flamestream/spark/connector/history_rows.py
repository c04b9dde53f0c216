"""History rows: what a history-then-live front makes of a history's Arrow batches.

Pure functions over Arrow, run where the rows are read (executors, and the planner for the
boundary's columns): the boundary's columns of a batch (table columns, or the JSON fields of
an archive's lines), a files archive's JSON lines as the live columns, and any history row
projected onto the live front's columns.
"""

from __future__ import annotations

import io
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from flamestream.errors import ConfigError
from flamestream.spark.connector.offsets import OffsetError


def boundary_columns(batch: pa.RecordBatch, names: list[str], step: str, key: str) -> pa.Table:
    """``names`` from ``batch``: its columns, or the JSON fields of its ``value`` lines."""
    if all(n in batch.schema.names for n in names):
        return pa.Table.from_batches([batch]).select(names)
    if "value" not in batch.schema.names:
        missing = [n for n in names if n not in batch.schema.names]
        msg = f"{step}: {key} has no column {missing[0]!r} (columns: {batch.schema.names})"
        raise OffsetError(msg)
    text = "\n".join(v if v is not None else "{}" for v in batch.column("value").to_pylist())
    options = pa_json.ParseOptions(unexpected_field_behavior="ignore")
    try:
        table = pa_json.read_json(io.BytesIO(text.encode()), parse_options=options)
    except pa.ArrowInvalid as exc:
        msg = f"{step}: {key}'s lines are not JSON objects with the boundary's fields: {exc}"
        raise OffsetError(msg) from exc
    missing = [n for n in names if n not in table.column_names]
    if missing:
        msg = f"{step}: {key}'s lines have no field {missing[0]!r} (a boundary column)"
        raise OffsetError(msg)
    return table.select(names)


def int_column(table: pa.Table, name: str, option: str) -> Any:
    """A boundary column as an int64 numpy array; nulls or other types are errors."""
    column = table.column(name)
    if not pa.types.is_integer(column.type) or column.null_count:
        what = f"type {column.type}" if not pa.types.is_integer(column.type) else "nulls"
        step = "history"
        raise ConfigError(step, option, name, f"a column of integers without nulls ({what})")
    return column.to_numpy().astype("int64")


def row_topics(table: pa.Table, column: str | None, topics: list[str], rows: int) -> Any:
    """Each row's topic: the topic column, or the live front's only topic."""
    if column is not None:
        return pc.cast(table.column(column), pa.string())
    if len(topics) != 1:
        step = "history"
        raise ConfigError(
            step,
            "history.topicColumn",
            None,
            f"a column naming each row's topic: the live front subscribes to {topics}",
        )
    return pa.repeat(pa.scalar(topics[0], pa.string()), rows)


def json_rows(batch: pa.RecordBatch, fields: list[pa.Field], step: str, key: str) -> Any:
    """An archive's lines (JSON objects) as their fields named like the live columns.

    Binary live columns (Kafka's key and value) are read as text and cast to bytes.
    """
    wanted = pa.schema(
        [pa.field(f.name, pa.string() if pa.types.is_binary(f.type) else f.type) for f in fields]
    )
    options = pa_json.ParseOptions(explicit_schema=wanted, unexpected_field_behavior="ignore")
    lines = batch.column("value")
    text = "\n".join(v if v is not None else "{}" for v in lines.to_pylist()).encode()
    try:
        table = pa_json.read_json(io.BytesIO(text), parse_options=options)
    except pa.ArrowInvalid as exc:
        msg = f"{step}: {key}'s lines are not JSON objects with the live columns' types: {exc}"
        raise OffsetError(msg) from exc
    if table.num_rows != batch.num_rows:
        msg = f"{step}: {key}: {batch.num_rows} lines gave {table.num_rows} JSON objects"
        raise OffsetError(msg)
    columns = [batch.column("position"), *(table.column(f.name).combine_chunks() for f in fields)]
    return pa.RecordBatch.from_arrays(columns, names=["position", *(f.name for f in fields)])


def projected(batch: pa.RecordBatch, fields: list[pa.Field], step: str, key: str) -> Any:
    """History rows as the live front's columns: by name, cast; a missing one null."""
    columns = [batch.column("position")]
    for f in fields:
        if f.name in batch.schema.names:
            try:
                columns.append(pc.cast(batch.column(f.name), f.type))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                msg = f"{step}: {key}'s column {f.name!r} does not cast to {f.type}: {exc}"
                raise OffsetError(msg) from exc
        else:
            columns.append(pa.nulls(batch.num_rows, f.type))
    names = ["position", *(f.name for f in fields)]
    return pa.RecordBatch.from_arrays(columns, names=names)
