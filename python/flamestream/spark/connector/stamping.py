"""Record time (``clock=record``): a record's own time, clamped monotonic per front."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from flamestream.errors import RecordError

#: The stamping modes (option ``clock``).
CLOCKS = ("wall", "logical", "record")


def clamp_times(times: Any, floor: int) -> tuple[pa.Array, int]:
    """Record times clamped monotonic: ``ts_i = max(times_i, ts_{i-1} + 1)``, from ``floor``.

    The first record's previous ts counts as ``floor - 1``.
    Returns the global times and the next floor (last ts + 1, or ``floor`` if there are none).
    ``ts_i - i`` is the running maximum of ``times_j - j`` and ``floor``, so it is vectorized.

    >>> ts, after = clamp_times([5, 3, 9, 9], 0)
    >>> ts.to_pylist(), after
    ([5, 6, 9, 10], 11)
    >>> clamp_times([1, 2], 7)[0].to_pylist()
    [7, 8]
    """
    values = np.asarray(times, dtype=np.int64)
    if not len(values):
        return pa.array([], pa.int64()), floor
    index = np.arange(len(values), dtype=np.int64)
    shifted = np.maximum.accumulate(np.maximum(values - index, floor))
    ts = shifted + index
    return pa.array(ts, pa.int64()), int(ts[-1]) + 1


def json_field_times(step: str, key: str, field: str, batch: pa.RecordBatch) -> pa.Array:
    """The numeric ``field`` of each row's ``value`` (a JSON object), as int64 record times.

    Floats are rounded down. A row that is no JSON object, lacks the field or has no number
    in it raises :class:`RecordError` naming ``step`` and ``(key, position)``.

    >>> batch = pa.record_batch({"position": [0, 9], "value": ['{"t": 5}', '{"t": 7.9}']})
    >>> json_field_times("front files", "f", "t", batch).to_pylist()
    [5, 7]
    """
    parsed = _parsed_int_times(field, batch.column("value"))
    return parsed if parsed is not None else _each_line_times(step, key, field, batch)


def _each_line_times(step: str, key: str, field: str, batch: pa.RecordBatch) -> pa.Array:
    """:func:`json_field_times` line by line, in Python: the reference, and its errors."""
    out = []
    positions = batch.column("position").to_pylist()
    for position, value in zip(positions, batch.column("value").to_pylist(), strict=True):
        try:
            found = _time_value(json.loads(value)[field]) if value is not None else None
        except (ValueError, TypeError, KeyError, IndexError):
            found = None
        if found is None:
            reason = (
                f"clock=record takes the record's time from timestampField {field!r}, a number "
                f"(|t| < 2**62) in a JSON object; found the line {str(value)[:200]!r}"
            )
            raise RecordError(step, (key, position), reason, problem="record has no time")
        out.append(found)
    return pa.array(out, pa.int64())


#: Record times must stay below this in magnitude (the clamp adds row numbers to them).
_TIME_BOUND = 2**62


def _parsed_int_times(field: str, values: pa.Array) -> pa.Array | None:
    """``field``'s values when Arrow's JSON reader finds an int in every line; else None.

    The Python loop below parses a line in ~1.9 µs, and ``clock=record`` parses every line
    twice (the planner records the clamp state, the read task stamps): Arrow's reader takes
    a fifth to a tenth of that. It gives the Python loop's result or None, never another
    answer: anything it cannot take as the loop would (a float to round down, a missing field
    or null, a duplicate key, a line that is no JSON object or holds two, a blank line, a
    time out of bounds) leaves the batch to the loop, which also makes the errors.
    """
    import pyarrow.json as pj

    if not len(values) or values.null_count or not pa.types.is_string(values.type):
        return None
    if pc.any(pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(values)), 0)).as_py():
        return None  # a blank line makes no row: the rows would not line up
    lines = pc.binary_join_element_wise(values, pa.scalar(""), pa.scalar("\n"))
    offsets = np.frombuffer(lines.buffers()[1], np.int32)[
        lines.offset : lines.offset + len(lines) + 1
    ]
    start, end = int(offsets[0]), int(offsets[-1])
    options = pj.ParseOptions(
        explicit_schema=pa.schema([(field, pa.int64())]), unexpected_field_behavior="ignore"
    )
    try:
        table = pj.read_json(
            pa.BufferReader(lines.buffers()[2].slice(start, end - start)),
            read_options=pj.ReadOptions(block_size=max(2**20, end - start + 1)),
            parse_options=options,
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if table.num_rows != len(values):  # a line holding two objects
        return None
    times = table.column(field).combine_chunks()
    bounds = pc.min_max(times).as_py()
    if times.null_count or not -_TIME_BOUND < bounds["min"] <= bounds["max"] < _TIME_BOUND:
        return None
    return times


def _time_value(found: object) -> int | None:
    """``found`` as a record time (floats rounded down), or None if it is no usable number."""
    if isinstance(found, bool) or not isinstance(found, int | float):
        return None
    if not math.isfinite(found) or abs(found) >= _TIME_BOUND:
        return None
    return math.floor(found)
