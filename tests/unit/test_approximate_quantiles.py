"""KLL quantiles as Spark reads them (DataSketches Java's rules), without Spark.

``tests/spark/test_approximate_on_spark.py`` checks the same values against Spark's
``kll_sketch_get_quantile_double``; here the rules themselves, where the C++ library differs.
"""

from __future__ import annotations

import json

from flamestream.approx import render_json
from flamestream.approx.folds import QuantileFold, SortedView, datasketches
from flamestream.graph.mapreduce import Reduced


def folded(fold: QuantileFold, values: list[int]):
    quantiles = fold.initial(values[0])
    for value in values[1:]:
        quantiles = fold.reducer(quantiles, value)
    return quantiles


def test_a_natural_rank_is_rounded_before_its_ceiling():
    # 0.55 * 180 is 99.00000000000001: Java reads the 99th value, C++ the 100th
    exact = folded(QuantileFold((0.55,), k=200), list(range(1, 181)))
    cpp = datasketches().kll_doubles_sketch.deserialize(exact.sketch)
    assert exact.values == (99.0,) and cpp.get_quantile(0.55, True) == 100.0
    assert not exact.approximate


def test_a_compaction_that_dropped_the_max_puts_it_back():
    compacted = folded(QuantileFold((0.0, 0.9, 1.0), k=8), [5, 99, 3, 42, 7, 96, 12, 60, 33])
    sketch = datasketches().kll_doubles_sketch.deserialize(compacted.sketch)
    assert 99.0 not in [item for item, _ in sketch]  # dropped by the compaction
    assert compacted.values == (3.0, 99.0, 99.0)
    assert sketch.get_quantile(0.9, True) == 96.0  # C++ reads what is left
    view = SortedView.of(sketch)
    assert view.items[-1] == 99.0 and view.cumulative[-2:] == (8, 9)


def test_quantiles_release_their_bounds_as_values_lower_and_upper():
    quantiles = folded(QuantileFold((0.5,), k=8), list(range(20)))
    row = json.loads(render_json(Reduced("api", quantiles)))
    assert row["values_lower"] == list(quantiles.lower)
    assert row["values_upper"] == list(quantiles.upper)
    assert "lower" not in row and "upper" not in row
