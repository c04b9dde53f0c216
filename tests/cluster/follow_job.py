"""An elastic word count whose active partitions follow the application's cores, in a child
driver with flamestream's plugin.

    python -m tests.cluster.follow_job <master> <work dir>

Input from ``<work>/in`` (files fronts, ``clock=logical``, a few records a batch, so the
global times are a function of the input); the query starts with one active partition of
``P = 2`` and follows the cores (``follow_cluster``, ``settle=1``), writing ``<work>/out`` and
``<work>/ck``; ``<work>/layouts.json`` holds its control channel's offsets, batch by batch.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from flamestream.spark import apply_graph
from flamestream.spark.control.key_layout import ElasticPolicy
from flamestream.spark.durable import QueryCheckpoint
from flamestream.testing.standalone import app_conf

from ..sessions import local_session
from .wordcount_job import word_count

RECORDS_PER_BATCH = 4
PARTITIONS = 2


def run(spark: SparkSession, source: Path, work: Path, policy: ElasticPolicy) -> None:
    """The word count over ``source`` into ``work/out`` (``work/ck``), to the input's end."""
    reader = (
        spark.readStream.format("flamestream")
        .option("front", "files")
        .option("path", str(source))
        .option("maxRecordsPerTrigger", RECORDS_PER_BATCH)
        .option("clock", "logical")
    )
    checkpoint = str(work / "ck")
    rows = apply_graph(
        word_count(),
        reader,
        checkpoint_location=checkpoint,
        partitions=PARTITIONS,
        elastic=policy,
    )
    query = (
        rows.writeStream.format("flamestream")
        .option("sink", "files")
        .option("path", str(work / "out"))
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def layouts(checkpoint: Path) -> list[dict[str, Any]]:
    """The control channel's end offset of every logged batch."""
    log = QueryCheckpoint(str(checkpoint))
    found = []
    for batch in log.logged_batches():
        mine = log.offsets_where(batch, lambda o: o.get("flamestreamLayout") == 1)
        found.append({"batch": batch, **mine[0]})
    return found


def main(master: str, work: str) -> None:
    """Run the following query on ``master``; write ``layouts.json``."""
    folder = Path(work)
    conf = app_conf() if master.startswith("spark://") else {}
    spark = local_session(master, conf)
    run(spark, folder / "in", folder, ElasticPolicy(active=1, follow_cluster=True, settle=1))
    (folder / "layouts.json").write_text(json.dumps(layouts(folder / "ck")))
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
