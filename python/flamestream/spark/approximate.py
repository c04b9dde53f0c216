"""Released approximate rows as typed columns, the sketch as BINARY for Spark SQL.

``SparkGraph(flow, render=render_json)`` releases each approximate aggregation's
``Reduced(key, estimate)`` as JSON text (:func:`flamestream.approx.render_json`): text so that
every sink (files, Delta) and ``apply()``'s output carry it in their one ``value`` column,
whatever the kind. :func:`estimate_columns` turns that text back into columns, with one
schema for every kind, so released rows of several aggregations stay in one DataFrame and a
query can filter on ``kind``. The sketch comes out as BINARY, which is what Spark's sketch
functions take: ``hll_sketch_estimate``, ``hll_union_agg``, ``theta_sketch_estimate``,
``theta_union_agg``, ``kll_sketch_get_quantile_double``.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from flamestream.errors import ConfigError

#: What :class:`ConfigError` names as the step.
_WHERE = "estimate_columns"

_ITEM = StructType(
    [
        StructField("item", StringType()),
        StructField("estimate", LongType()),
        StructField("lower", LongType()),
        StructField("upper", LongType()),
    ]
)

#: Every field any estimate's ``columns()`` writes, each with its one type; the fields a kind
#: does not write are null in its rows. ``sketch`` is base64 text here, BINARY once parsed.
ESTIMATE_SCHEMA = StructType(
    [
        # a JSON string key as its text, any other key (a number, a list) as its JSON text
        StructField("key", StringType()),
        StructField("kind", StringType()),
        StructField("approximate", BooleanType()),
        # hll, theta, sum
        StructField("estimate", DoubleType()),
        StructField("lower", DoubleType()),
        StructField("upper", DoubleType()),
        StructField("confidence", DoubleType()),
        # kll
        StructField("ranks", ArrayType(DoubleType())),
        StructField("values", ArrayType(DoubleType())),
        StructField("values_lower", ArrayType(DoubleType())),
        StructField("values_upper", ArrayType(DoubleType())),
        StructField("rank_error", DoubleType()),
        StructField("n", LongType()),
        # frequent_items
        StructField("items", ArrayType(_ITEM)),
        StructField("guarantee", StringType()),
        StructField("threshold", LongType()),
        StructField("max_error", LongType()),
        StructField("total", LongType()),
        # sum
        StructField("terms", LongType()),
        StructField("sketch", StringType()),
    ]
)


def estimate_columns(df: DataFrame, column: str = "value") -> DataFrame:
    """``df`` with its JSON ``column`` replaced by the estimate's fields as typed columns.

    ``df`` holds rows released with ``render=render_json``: read back from the files or Delta
    sink, or ``SparkGraph.apply()``'s output. The other columns stay, first; then come the
    fields of :data:`ESTIMATE_SCHEMA` (``key``, ``kind``, ``approximate``, the estimate and
    its bounds or the quantiles or the items ...) and ``sketch`` as BINARY. A field the row's
    kind does not write is null, and so is every field of a row whose text is not an estimate
    (another sink's rows, say): select by ``kind`` or ``sink``.

    For instance, over a files sink's output (needs a Spark session, so not a doctest)::

        rows = estimate_columns(spark.read.json("out/"))
        rows.where("kind = 'hll'").select("key", "estimate", F.hll_sketch_estimate("sketch"))
    """
    if column not in df.columns:
        raise ConfigError(_WHERE, "column", column, f"one of {df.columns}")
    fields = [field.name for field in ESTIMATE_SCHEMA.fields]
    kept = [name for name in df.columns if name != column]
    clashing = sorted(set(kept) & set(fields))
    if clashing:
        raise ConfigError(
            _WHERE,
            "column",
            column,
            f"a DataFrame without columns named as the estimate's fields; rename {clashing}",
        )
    parsed = F.from_json(F.col(column).cast("string"), ESTIMATE_SCHEMA).alias("_estimate")
    estimate: Column = F.col("_estimate")
    typed = [
        F.unbase64(estimate["sketch"]).alias("sketch")
        if name == "sketch"
        else estimate[name].alias(name)
        for name in fields
    ]
    others = [F.col(f"`{name}`") for name in kept]
    return df.select(*others, parsed).select(*others, *typed)
