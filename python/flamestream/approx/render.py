"""Released approximate rows as JSON text: the estimate and its error as named fields.

``SparkGraph(flow, render=render_json)`` writes each ``Reduced(key, estimate)`` as one JSON
object (``{"key": ..., "kind": "hll", "estimate": ..., "lower": ..., ...}``, the sketch in
base64); ``flamestream.spark.estimate_columns`` turns that text into typed columns, the sketch
as BINARY for Spark SQL's sketch functions. Any other payload renders as the default does.
"""

from __future__ import annotations

import json
from typing import Any

from flamestream.approx.estimates import DistinctCount, EstimateSum, HeavyHitters, Quantiles

_ESTIMATES = (DistinctCount, Quantiles, HeavyHitters, EstimateSum)


def render_json(payload: Any) -> str:
    """``payload`` as text: an estimate's item as a JSON object, anything else as by default."""
    value = getattr(payload, "value", None)
    if isinstance(value, _ESTIMATES) and hasattr(payload, "key"):
        return json.dumps({"key": payload.key, **value.columns()}, default=repr)
    if isinstance(payload, _ESTIMATES):
        return json.dumps(payload.columns(), default=repr)
    if isinstance(payload, str):
        return payload
    if isinstance(payload, bytes):
        return payload.decode("utf-8", "backslashreplace")
    return repr(payload)
