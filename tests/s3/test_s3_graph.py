"""A word count with everything on S3: front input, Spark's checkpoint, graph state, output.

SeaweedFS serves S3; Spark writes its checkpoint on ``s3a://`` (hadoop-aws), flamestream its
grouping state, barrier staging and sink commits under it and the output on ``s3a://``
(s3fs), with the log of its committed files that Spark's readers go by. The released files
must be byte-identical to the same query on local disk, and their values the reference
runtime's.
"""

from __future__ import annotations

import json
from pathlib import Path

from pyspark.sql import SparkSession

from flamestream import Dataflow
from flamestream.testing import run_in_order

from ..crash import run_unbroken
from ..spark import graph_crash_job
from .helpers import BucketRun, make_graph_input


def local_outputs(spark: SparkSession, work: Path) -> dict[str, bytes]:
    make_graph_input(work / "in")
    urls = [str(work / d) for d in ("in", "out", "ck")]
    run_unbroken(lambda s: graph_crash_job.start(s, *urls), spark)
    return {p.name: p.read_bytes() for p in sorted((work / "out").glob("part-*"))}


def test_word_count_on_s3_releases_what_it_releases_on_local_disk(
    graph_on_s3: BucketRun, spark: SparkSession, tmp_path: Path
):
    on_s3 = graph_on_s3.outputs()
    assert len(on_s3) >= 2
    assert on_s3 == local_outputs(spark, tmp_path)


def test_word_count_on_s3_releases_the_reference_runtimes_values(
    graph_on_s3: BucketRun, tmp_path: Path
):
    make_graph_input(tmp_path)
    lines = [line for path in sorted(tmp_path.iterdir()) for line in path.read_text().splitlines()]
    flow: Dataflow = graph_crash_job.word_count()
    result = run_in_order(flow, lines)
    expected = sorted(result.payloads("out"))
    released = [
        json.loads(line)["value"]
        for data in graph_on_s3.outputs().values()
        for line in data.splitlines()
    ]
    # every word's count goes 1, 2, … n in any order of lines: the same updates, each once
    assert sorted(released) == expected
    assert len(released) == len(set(released))


def test_spark_and_flamestream_keep_their_state_in_the_bucket(graph_on_s3: BucketRun):
    objects = graph_on_s3.objects()
    for wanted in ("ck/offsets/0", "ck/commits/0", "ck/metadata", "ck/flamestream-graph/"):
        assert any(path.startswith(wanted) for path in objects), (wanted, objects)
    assert any(path.endswith(".state") for path in objects)  # the grouping's snapshots
    assert any(path.startswith("ck/flamestream-sink/commits/") for path in objects)
    assert "out/_spark_metadata/0" in objects  # the output's log of committed files
    assert graph_on_s3.logged() == sorted(
        f"{graph_on_s3.urls()[1]}/{name}" for name in graph_on_s3.outputs()
    )
    assert graph_on_s3.leftovers() == []
