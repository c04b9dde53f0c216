"""Approximate aggregations' values and folds: estimates with their error, sketches as bytes.

The builders are in :mod:`flamestream.graph` (``distinct_count``, ``quantiles``,
``heavy_hitters``, ``sum_estimates``); this package holds what they release
(:mod:`.estimates`), how they fold a value into a key's sketch (:mod:`.folds`) and the JSON
render of released rows (:mod:`.render`). See ``docs/approximate.md``.
"""

from flamestream.approx.estimates import (
    CONFIDENCE,
    DistinctCount,
    Estimate,
    EstimateSum,
    HeavyHitter,
    HeavyHitters,
    Quantiles,
)
from flamestream.approx.render import render_json

__all__ = [
    "CONFIDENCE",
    "DistinctCount",
    "Estimate",
    "EstimateSum",
    "HeavyHitter",
    "HeavyHitters",
    "Quantiles",
    "render_json",
]
