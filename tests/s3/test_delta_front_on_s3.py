"""``front=delta`` with the table on S3 (SeaweedFS): a snapshot, then one appended version.

The table is written with delta-rs; the front reads its log with delta-rs and its commits and
data files with pyarrow's S3 file system, both configured from the one ``storageOptions``
option (endpoint, region, credentials), in planning and in Spark's read tasks.
"""

from __future__ import annotations

import json

import pyarrow as pa
from deltalake import write_deltalake
from pyspark.sql import SparkSession

from flamestream.spark.connector.offsets import FrontRange
from flamestream.spark.connector.options import OptionReader
from flamestream.testing.seaweedfs import SeaweedFS
from pyspark_flamestream.fronts.delta import DeltaSource, position_of

from .conftest import BucketRun
from .test_delta_on_s3 import store


def test_the_delta_front_reads_a_snapshot_and_an_appended_version_from_s3(
    spark: SparkSession, seaweedfs: SeaweedFS, run: BucketRun
):
    table, options = f"s3://{run.bucket}/table", store(seaweedfs)
    write_deltalake(table, pa.table({"value": ["a", "b"]}), storage_options=options)
    write_deltalake(table, pa.table({"value": ["c"]}), mode="append", storage_options=options)
    given = {"path": table, "storageOptions": json.dumps(options)}
    front = DeltaSource(OptionReader("front delta", given))
    key, end = next(iter(front.discover({}).items()))
    assert key == f"{table}@{1:020d}" and end == position_of(1, 3)
    snapshot = spark.read.format("flamestream").option("front", "delta").options(**given).load()
    assert sorted(r.value for r in snapshot.collect()) == ["a", "b", "c"]

    write_deltalake(table, pa.table({"value": ["d", "e"]}), mode="append", storage_options=options)
    assert front.discover({key: end}) == {key: position_of(2, 2)}
    part = FrontRange(key, 0, end, position_of(2, 2), 0)
    read = [b.to_pydict() for b in front.read_range(part)]
    assert read == [{"position": [position_of(2, 0), position_of(2, 1)], "value": ["d", "e"]}]
