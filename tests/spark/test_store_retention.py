"""Every store keeps what a restart can still need and drops the rest, in step with Spark.

A graph query with a loop channel (grouping state, loop files, the ack table, the barrier
sink's staging, pending rows and markers) runs many small batches with Spark keeping
:data:`~tests.spark.retention_job.RETAIN` batches of its logs. However many batches ran, each
store's file count stays within a bound set by that retention and the stores' own margins,
nothing a crash left (temporaries, hidden parts) stays, and a run killed late, after the stores
had dropped their old files, still recovers to exactly the unbroken run's output.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from flamestream.spark.connector.sink import RETAIN_EVERY
from flamestream.spark.durable import GRAPH_DIR, SINK_DIR
from flamestream.spark.durable.barrier import KEEP_BATCHES as SINK_KEEP
from flamestream.spark.durable.barrier import KEEP_MARKERS
from flamestream.spark.durable.loop import KEEP_BATCHES as LOOP_KEEP
from flamestream.spark.durable.sink_log import DEFAULT_INTERVAL, METADATA_DIR, committed_files
from flamestream.spark.durable.state import KEEP_SNAPSHOTS

from ..crash import (
    reachable_in_turn,
    released_files,
    released_so_far_is,
    run_chain,
    run_unbroken,
    work_args,
)
from . import retention_job
from .conftest import write_lines
from .retention_job import RETAIN, RETAIN_CONF

JOB = "tests.spark.retention_job"

#: Killed late in the run, when every store has dropped files already (the run has more).
CRASHES = ["sink.commit.released:12"]


def make_input(folder: Path) -> None:
    """Many edges, each its own component: many batches, each light (one round in the loop)."""
    write_lines(folder / "a.txt", [f"{2 * n} {2 * n + 1}" for n in range(30)])
    write_lines(folder / "b.txt", [f"{2 * n} {2 * n + 1}" for n in range(30, 48)])


def entries(folder: Path) -> int:
    """Entries of ``folder`` but hidden ones (Spark's checksums; temporaries are checked apart)."""
    return sum(1 for p in folder.iterdir() if not p.name.startswith(".")) if folder.exists() else 0


def store_counts(ck: Path) -> dict[str, int]:
    """Entries in each folder of each store under the checkpoint (the largest per kind).

    And of the output's log (``out/_spark_metadata``, beside the checkpoint).
    """
    graph, sink = ck / GRAPH_DIR, ck / SINK_DIR
    states = [p for p in graph.glob("*/part-*") if p.is_dir()]
    return {
        "output log": entries(ck.parent / "out" / METADATA_DIR),
        "spark offsets": entries(ck / "offsets"),
        "sink markers": entries(sink / "commits"),
        "sink staging": entries(sink / "staging"),
        "sink pending": entries(sink / "pending"),
        "loop batches": entries(graph / "loop"),
        "ack batches": sum(1 for p in (graph / "ack").glob("[0-9]*")),
        "ack tables": entries(graph / "ack" / "table"),
        "state per partition": max((entries(p) for p in states), default=0),
    }


#: The most entries each folder may hold at a batch's end, whatever the number of batches.
#: The sink's retention runs every RETAIN_EVERY batches: its folders hold up to that many
#: batches more than Spark's logs. The output's log keeps from the compaction before the
#: oldest batch retained (a compaction every DEFAULT_INTERVAL batches).
BOUNDS = {
    "spark offsets": RETAIN + 1,
    "sink markers": max(RETAIN, KEEP_MARKERS) + 1 + RETAIN_EVERY,
    "output log": max(RETAIN, KEEP_MARKERS) + 1 + RETAIN_EVERY + DEFAULT_INTERVAL,
    "sink staging": SINK_KEEP + 2,
    "sink pending": SINK_KEEP + 2,
    "loop batches": LOOP_KEEP + 3,
    "ack batches": max(RETAIN, LOOP_KEEP) + 3,
    "ack tables": max(RETAIN, LOOP_KEEP) + 3,
    "state per partition": KEEP_SNAPSHOTS,
}


#: Folders the sink's retention keeps bounded, gaining an entry a batch until it runs.
PERIODIC = ("sink markers", "output log")


def check_bounded(work: Path) -> int:
    """Every store within its bound, nothing left by a crash; the number of batches run.

    The folders the sink's periodic retention keeps hold fewer entries than batches ran (one
    a batch, kept all, they would hold that many).
    """
    ck = work / "ck"
    counts = store_counts(ck)
    assert all(counts[name] <= bound for name, bound in BOUNDS.items()), (counts, BOUNDS)
    flamestream = [*(ck / GRAPH_DIR).rglob("*"), *(ck / SINK_DIR).rglob("*")]
    assert not [p for p in flamestream if p.name.endswith(".tmp")], "temporaries left"
    assert not list((work / "out").glob(".*")), "hidden parts left"
    batches = max(int(p.name) for p in (ck / "commits").iterdir() if p.name.isdigit()) + 1
    assert all(counts[name] < batches for name in PERIODIC), (counts, batches)
    return batches


@pytest.fixture(scope="module")
def unbroken(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("unbroken-retention")
    make_input(work / "in")
    before = spark.conf.get(RETAIN_CONF, None)
    try:
        run_unbroken(lambda s: retention_job.start(s, *work_args(work)), spark)
    finally:
        if before is None:
            spark.conf.unset(RETAIN_CONF)
        else:
            spark.conf.set(RETAIN_CONF, before)
    return work


def test_many_batches_leave_every_store_bounded(unbroken: Path, spark: SparkSession):
    batches = check_bounded(unbroken)
    every_batch = [bound for name, bound in BOUNDS.items() if name not in PERIODIC]
    assert batches >= 2 * max(every_batch), f"only {batches} batches: nothing to bound"
    assert batches >= 2 * RETAIN_EVERY  # the periodic retention ran twice, and dropped files
    assert len(released_files(unbroken / "out")) >= 5  # releases all along, not only at the end
    # the output's log, compacted and cleaned up meanwhile, names every released file
    out = unbroken / "out"
    released = sorted(str(p) for p in out.glob("part-*"))
    assert sorted(committed_files(str(out)) or []) == released
    lines = sorted(line for path in released for line in Path(path).read_text().splitlines())
    assert sorted(row.value for row in spark.read.text(str(out)).collect()) == lines


def test_a_run_killed_after_the_stores_dropped_files_recovers_exactly_once(
    unbroken: Path, tmp_path: Path
):
    assert reachable_in_turn(CRASHES)
    make_input(tmp_path / "in")
    want = released_files(unbroken / "out")
    run_chain(
        JOB,
        work_args(tmp_path),
        CRASHES,
        released_so_far_is(want, lambda: released_files(tmp_path / "out")),
    )
    assert released_files(tmp_path / "out") == want
    check_bounded(tmp_path)
