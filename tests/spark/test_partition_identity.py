"""A keyed stage's state belongs to its key partition, wherever Spark's plan puts the task.

Under a union (a second sink, a merge fed by a stateless branch, the loop or control channels)
a keyed task's ``TaskContext.partitionId()`` is shifted by the partitions of the other union
branches, which vary with how many fronts moved in the batch. The state must follow the keys
(the partition the shuffle sent them to), not the task's position in the plan.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from pyspark.sql import SparkSession

from flamestream import Dataflow
from flamestream.spark import apply_graph

from .conftest import files_front, released, run_to_files, write_lines


def two_sinks_first_stateless() -> Dataflow:
    """``lines -> broadcast(2)``: a stateless sink declared first, then a window-2 grouping."""
    flow = Dataflow("two-sinks")
    raw, keyed = flow.broadcast("copy", flow.source("lines"), 2)
    flow.sink("raw", raw)
    pairs = flow.grouping("pairs", keyed, window=2, key=lambda _: 0)
    flow.sink("out", flow.map("join", pairs, "+".join))
    return flow


def test_grouping_under_a_union_keeps_its_state_across_batches(spark: SparkSession, tmp_path: Path):
    folder = tmp_path / "in"
    # batch 0 reads a1 and b1 (two fronts move), batch 1 a2 and a3 (one front moves)
    write_lines(folder / "a.txt", ["a1", "a2", "a3"])
    write_lines(folder / "b.txt", ["b1"])
    front = files_front(spark, folder, clock="logical", maxRecordsPerTrigger=2)
    checkpoint = str(tmp_path / "ck")
    rows = apply_graph(
        two_sinks_first_stateless(), front, partitions=1, checkpoint_location=checkpoint
    )
    run_to_files(rows, tmp_path / "out", tmp_path / "ck")
    out = released(tmp_path / "out")
    assert sorted(r["value"] for r in out if r["sink"] == "raw") == ["a1", "a2", "a3", "b1"]
    tuples = [r["value"] for r in out if r["sink"] == "out"]
    # every tuple after the first pairs an item with the one before it in global-time order,
    # across the batch boundary too: four items, one key, window 2
    assert len(tuples) == 4
    assert tuples[0].count("+") == 0
    assert all(t.count("+") == 1 for t in tuples[1:]), tuples
    ordered = [
        r["value"] for r in sorted(out, key=lambda r: (r["ts"], r["front"])) if r["sink"] == "raw"
    ]
    assert tuples == [ordered[0]] + [f"{a}+{b}" for a, b in itertools.pairwise(ordered)]


def test_applying_a_graph_to_a_stream_turns_adaptive_streaming_off(
    spark: SparkSession, tmp_path: Path
):
    """Adaptive execution would plan the one front of two shuffles from two threads at once."""
    spark.conf.set("spark.sql.adaptive.streaming.stateless.enabled", "true")
    write_lines(tmp_path / "in" / "a.txt", ["a"])
    front = files_front(spark, tmp_path / "in")
    apply_graph(two_sinks_first_stateless(), front, checkpoint_location=str(tmp_path / "ck"))
    assert spark.conf.get("spark.sql.adaptive.streaming.stateless.enabled") == "false"
    assert spark.conf.get("spark.sql.adaptive.enabled") == "true"  # batch queries keep it


def test_the_fronts_hash_keys_as_spark_does(spark: SparkSession):
    """Fronts put items in blocks by key partition themselves (``exec.shuffle.blocks``): their hash
    must be Spark's, or a key's state would live in two partitions."""
    import random

    import pyarrow as pa
    from pyspark.sql import functions as F

    from flamestream.spark.exec.general.partitioning import spark_hashes

    rng = random.Random(7)
    keys = [rng.randbytes(rng.randrange(0, 30)) for _ in range(300)] + [b"", b"\xff\x80"]
    frame = spark.createDataFrame([(i, k) for i, k in enumerate(keys)], "i int, key binary")
    hashed = frame.select("i", F.hash("key").alias("h")).orderBy("i").collect()
    assert [r["h"] for r in hashed] == spark_hashes(pa.array(keys, pa.binary())).tolist()
