"""Kill a query around the batch that takes a function swap in, restart it: same bytes.

The swap is submitted between two runs on one checkpoint (see :mod:`.test_swap_on_spark`);
the second run is a child (:mod:`tests.spark.swap_job`) SIGKILLed while planning the swap
batch (swap decided, offsets not logged), after the swap batch's keyed state is saved, and
while the batch after it releases; each restart goes on from the checkpoint. Every file
released after a crash, and in the end every file, must be the unbroken run's.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from flamestream.spark import SparkGraph
from flamestream.spark.durable import QueryCheckpoint

from ..crash import (
    reachable_in_turn,
    released_files,
    released_so_far_is,
    run_chain,
    run_unbroken,
    work_args,
)
from . import swap_job
from .test_swap_on_spark import first_run, later_input, swap_time

JOB = "tests.spark.swap_job"


def unbroken_run(spark: SparkSession, work: Path) -> None:
    first_run(spark, work)
    SparkGraph.control(str(work / "ck")).swap("split", swap_job.shouting())
    later_input(work)
    run_unbroken(lambda s: swap_job.start(s, *work_args(work)), spark)


def test_killed_around_the_swap_batch_recovers_to_the_unbroken_output(
    spark: SparkSession, tmp_path: Path
):
    """Killed planning the swap batch, in its keyed stage, and releasing the batch after."""
    unbroken = tmp_path / "unbroken"
    unbroken_run(spark, unbroken)
    crashed = tmp_path / "crashed"
    first_run(spark, crashed)
    SparkGraph.control(str(crashed / "ck")).swap("split", swap_job.shouting())
    later_input(crashed)
    batch = QueryCheckpoint(str(crashed / "ck")).logged_batches()[-1] + 1
    assert batch == swap_time(unbroken)[0]
    chain = [
        f"control.plan:{batch}",  # before: the swap decided, the offsets not logged
        f"graph.keyed.saved:{batch}",  # during: the swap batch's keyed state saved
        f"sink.commit.released:{batch + 1}",  # after: the next batch's output released
    ]
    assert reachable_in_turn(chain)
    expected = released_files(unbroken / "out")
    run_chain(
        JOB,
        work_args(crashed),
        chain,
        released_so_far_is(expected, lambda: released_files(crashed / "out")),
    )
    assert released_files(crashed / "out") == expected
    assert swap_time(crashed) == swap_time(unbroken)
