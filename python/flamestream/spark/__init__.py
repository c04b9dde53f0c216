"""The Spark side of flamestream: graphs on DataFrames, options, offsets, stamping, the barrier.

``apply_graph(flow, df)`` runs a graph on the rows of ``format("flamestream")`` fronts
(:mod:`flamestream.spark.apply`); the rest is shared by every connector in
:mod:`pyspark_flamestream`. The model, graph and reference runtime never import pyspark, and
neither does the plan (:mod:`flamestream.spark.plan`): ``SparkGraph`` and ``apply_graph`` are
imported from :mod:`.apply` on first use, so planning a graph needs no Spark.
``watch_backfill(query)`` shows how far a history-then-live query's backfill has got
(:mod:`.backfill`). ``estimate_columns(df)`` parses released approximate rows (rendered by
``render_json``) into typed columns, the sketch as BINARY for Spark's sketch functions
(:mod:`.approximate`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flamestream.spark.apply import SparkGraph, apply_graph
    from flamestream.spark.approximate import estimate_columns
    from flamestream.spark.backfill import BackfillStatus, backfill_status, watch_backfill

__all__ = [
    "BackfillStatus",
    "SparkGraph",
    "apply_graph",
    "backfill_status",
    "estimate_columns",
    "watch_backfill",
]


def __getattr__(name: str) -> Any:
    if name in ("BackfillStatus", "backfill_status", "watch_backfill"):
        from flamestream.spark import backfill

        return getattr(backfill, name)
    if name == "estimate_columns":
        from flamestream.spark import approximate

        return approximate.estimate_columns
    if name in __all__:
        from flamestream.spark import apply

        return getattr(apply, name)
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
