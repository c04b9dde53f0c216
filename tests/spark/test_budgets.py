"""Declared budgets on a running query (``budgets=BudgetPolicy(...)``): one policy decides read
limit, active partitions and slot moves; the released output is the unbudgeted run's, every
front records the published limit it read with, and the state budget holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from flamestream.spark import apply_graph
from flamestream.spark.control.budgeted import BudgetPolicy, LimitBoard

from .conftest import released, run_to_files
from .test_elastic_layout import word_count

#: Per keyed partition: the word count's 200 keys need about half of it over 4 partitions,
#: so the memory cap (a partition's burst bound of a tick's rows) binds.
BUDGET = 8_000


def generator(spark: SparkSession, total: int) -> Any:
    """A reader, not loaded: ``apply`` sets the budget policy's options on it."""
    return (
        spark.readStream.format("flamestream")
        .option("front", "generator")
        .option("partitions", 1)  # one front: global times are positions, whatever the batches
        .option("rowsPerSecond", 0)
        .option("totalRows", total)
        .option("keys", 200)
        .option("skewSteps", "0:0,600:1.6")  # a hot key range from record 600 on
        .option("clock", "logical")
        .option("maxRecordsPerTrigger", 300)
    )


def run(spark: SparkSession, work: Path, budgets: BudgetPolicy | None) -> list[tuple[Any, ...]]:
    reader = generator(spark, 1500)
    out = apply_graph(
        word_count(),
        reader if budgets else reader.load(),
        payload="key",
        checkpoint_location=str(work),
        partitions=4,
        budgets=budgets,
    )
    run_to_files(out, work / "out", work)
    return [(r["ts"], r["front"], r["value"]) for r in released(work / "out")]


def offsets_with(checkpoint: Path, key: str) -> list[dict[str, Any]]:
    """Per batch, the source offsets that have ``key``."""
    found = []
    offsets = checkpoint / "offsets"
    for batch in sorted(int(p.name) for p in offsets.iterdir() if p.name.isdigit()):
        for line in (offsets / str(batch)).read_text().splitlines()[2:]:
            if f'"{key}"' in line:
                found.append(json.loads(line))
    return found


def test_budgets_decide_limit_and_layout_and_change_nothing_released(
    spark: SparkSession, tmp_path: Path
):
    fixed = run(spark, tmp_path / "fixed", None)
    policy = BudgetPolicy(
        target_latency_ms=2000, max_state_bytes_per_partition=BUDGET, min_rows=20, cores=1
    )
    budgeted = run(spark, tmp_path / "budgeted", policy)
    assert budgeted == fixed and len(fixed) == 1500
    board = LimitBoard(str(tmp_path / "budgeted" / "flamestream-graph")).entries()
    assert len(board) >= 5
    # the key-creating first batches are forgotten: later ones grow the state less per item
    assert board[-1]["growthPerItem"] < board[0]["growthPerItem"] / 2, board
    # the state budget held after every batch, and it is what cut the read limit
    assert all(entry["peakPartitionBytes"] <= BUDGET for entry in board), board
    assert any("memory:" in reason for entry in board for reason in entry["reasons"]), board
    # each front read with the limit published by the decision it names (its offset says)
    published = {entry["after"]: entry["limit"] for entry in board}
    used = [o["budget"] for o in offsets_with(tmp_path / "budgeted", "budget")]
    assert len(used) >= 5 and used[0] == {"limit": 20, "rows": 20, "after": -1}
    for record in used[1:]:
        if record["after"] in published:  # older decisions are gone from the board
            assert record["limit"] == published[record["after"]]
        assert record["rows"] <= record["limit"]
    # the layout moved key ranges, recorded in the control channel's offsets
    layouts = offsets_with(tmp_path / "budgeted", "flamestreamLayout")
    decided = [layout for layout in layouts if "reason" in layout]  # the deciding batches'
    assert layouts[-1]["decisions"] >= 1 and "after batch" in decided[-1]["reason"]
    assert len({tuple(layout["assignment"]) for layout in layouts}) >= 2


def test_a_front_controller_beside_budgets_is_refused(spark: SparkSession, tmp_path: Path):
    """One owner of the read limit: the graph's policy, so ``controller=on`` cannot join it.

    Refused when the graph is applied (the front's options are read), before any query.
    """
    import pytest

    reader = generator(spark, 100).option("controller", "on")
    with pytest.raises(Exception, match="option 'controller' = 'on' is invalid") as raised:
        apply_graph(
            word_count(),
            reader,
            payload="key",
            checkpoint_location=str(tmp_path),
            partitions=2,
            budgets=BudgetPolicy(target_latency_ms=2000),
        )
    assert "BudgetPolicy(target_latency_ms=...)" in str(raised.value)
    assert not (tmp_path / "offsets").exists()  # no query started
