"""Record time (``clock=record``): a record's own time, clamped monotonic per front."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pyarrow as pa

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


def _time_value(found: object) -> int | None:
    """``found`` as a record time (floats rounded down), or None if it is no usable number."""
    if isinstance(found, bool) or not isinstance(found, int | float):
        return None
    if not math.isfinite(found) or abs(found) >= 2**62:
        return None
    return math.floor(found)
