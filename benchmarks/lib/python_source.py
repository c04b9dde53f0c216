"""The least a PySpark streaming data source can be: the floor of any Python front's batch.

``minimal`` yields, per micro-batch and partition, one Arrow batch of the records the rate
allows (``value`` long, ``key`` string, like the generator front's and the rate source's
keys), and keeps no state beyond a start time: no options checked, no offsets log, no
determinants. Whatever a batch of it costs more than Spark's ``rate`` source is what Spark
charges a Python data source (a Python planner process per query, each read task's round
trip to a Python worker); a flamestream front can come close to it, not below.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from itertools import pairwise
from typing import Any

#: The format name it registers as.
NAME = "flamestream_bench_minimal"


def register(spark: Any) -> None:
    """Register the source with ``spark`` (its classes shipped by value, not by import)."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(_source_class())


def _source_class() -> type:
    """The data source class (defined here so that pyspark is imported only when used)."""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    class MinimalReader(DataSourceStreamReader):  # type: ignore[misc]
        """Offsets are record counts since the query started, at ``rate`` a second."""

        def __init__(self, rate: int, partitions: int, keys: int) -> None:
            self.rate, self.parts, self.keys = rate, partitions, keys
            self.started = time.time()

        def initialOffset(self) -> dict[str, int]:
            return {"n": 0}

        def latestOffset(self) -> dict[str, int]:
            return {"n": int((time.time() - self.started) * self.rate)}

        def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[Any]:
            first, size = start["n"], end["n"] - start["n"]
            cuts = [first + size * i // self.parts for i in range(self.parts + 1)]
            return [InputPartition(pair) for pair in pairwise(cuts)]

        def read(self, partition: Any) -> Iterator[Any]:
            first, end = partition.value
            values = pa.array(range(first, end), pa.int64())
            keys = pa.array([f"k{v % self.keys}" for v in range(first, end)], pa.string())
            yield pa.RecordBatch.from_arrays([values, keys], names=["value", "key"])

        def commit(self, end: dict[str, int]) -> None:
            """Nothing kept, nothing to forget."""

    class MinimalSource(DataSource):  # type: ignore[misc]
        """``spark.readStream.format(NAME).option("rowsPerSecond", R)``."""

        @classmethod
        def name(cls) -> str:
            return NAME

        def schema(self) -> str:
            return "value long, key string"

        def streamReader(self, schema: Any) -> MinimalReader:
            options = self.options
            return MinimalReader(
                int(options.get("rowsPerSecond", "1000")),
                int(options.get("partitions", "2")),
                int(options.get("keys", "100")),
            )

    return MinimalSource
