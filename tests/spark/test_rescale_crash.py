"""A crash during a migration batch of a rescale: the restarts release the unbroken run's bytes.

The child (:mod:`tests.spark.rescale_crash_job`, word count on 4 key partitions) is given two
rescale requests before its first run; it is killed at crash points inside the migration,
restarted from its checkpoint each time, and run to its end.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from flamestream.spark import SparkGraph

from ..crash import reachable_in_turn, released_so_far_is, run_chain, run_unbroken
from . import graph_crash_job
from .test_elastic_layout import layouts
from .test_graph_crash_recovery import make_input

JOB = "tests.spark.rescale_crash_job"


def test_a_crash_during_a_migration_batch_recovers_to_the_same_bytes(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
):
    """Scale 4 -> 1 from batch 1 (12 slots, 3 per batch), back to 4 from batch 3: killed when the
    controller had consumed the request but Spark had not logged it, then after a keyed task
    of a later migration batch saved its slots. The restarts release, file by file, the bytes
    of the same word count run unbroken on a fixed layout."""
    fixed = tmp_path_factory.mktemp("fixed")
    make_input(fixed / "in")
    paths = [str(fixed / d) for d in ("in", "out", "ck")]
    run_unbroken(lambda s: graph_crash_job.start(s, *paths), spark)
    unbroken = files(fixed / "out")
    assert len(unbroken) >= 2
    work = tmp_path_factory.mktemp("crashed")
    make_input(work / "in")
    control = SparkGraph.control(str(work / "ck"))
    control.rescale(1, not_before_batch=1)
    control.rescale(4, not_before_batch=3)
    chain = ["control.plan:1", "graph.keyed.saved:2"]
    assert reachable_in_turn(chain)
    check = released_so_far_is(unbroken, lambda: files(work / "out"))
    run_chain(JOB, [str(work / d) for d in ("in", "out", "ck")], chain, check)
    assert files(work / "out") == unbroken
    found = layouts(work / "ck")
    moving = [batch for batch, offset in enumerate(found) if offset.get("moved")]
    assert moving[:3] == [1, 2, 3], found  # batch 2 crashed and replayed mid-migration
    assert found[-1]["active"] == 4 and found[-1]["target"] is None
    assert max(len(offset.get("moved", ())) for offset in found) == 3
    assert found[2]["assignment"].count(0) == 4 + 3 + 3 and found[2]["active"] == 1
    # each request consumed once, though batch 1 was planned again after the first crash
    consumed = {r["request"]: r["decision"] for o in found for r in o.get("requests", [])}
    assert len(consumed) == 2 and not any(d.startswith("refused") for d in consumed.values())


def files(out: Path) -> dict[str, bytes]:
    """The released files by name."""
    return {p.name: p.read_bytes() for p in sorted(out.glob("part-*"))}
