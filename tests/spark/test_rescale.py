"""Rescaling a running graph query (``QueryControl.rescale``): whatever the schedule, the
released output is the one without any rescale, byte for byte, and the reference runtime's.

Requests are submitted before the query starts, each with ``not_before_batch``: the control
channel consumes it at the first planning of a batch with at least that id, so a schedule
lands on chosen batches, in any run and in its replays. The migrations move a few slots per
batch, so they overlap the batches that carry data.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from flamestream.errors import ConfigError
from flamestream.spark import SparkGraph, apply_graph
from flamestream.spark.control.key_layout import ElasticPolicy, Layout

from ..random_graphs import random_graph
from .conftest import released, run_to_files
from .test_elastic_layout import generator, layouts, word_count
from .test_random_graphs import COMPARED, FRONT_SETS, fronts, inputs, reference  # noqa: F401

#: Seeds of the random graphs run with random rescale schedules.
SEEDS = (1, 4)
FRONT_SET = "two"  # 7 lines per front, one of them read 1 per batch: 7 batches with data


def out_bytes(out: Path) -> bytes:
    """Every released line, file by file in batch order."""
    return b"".join(p.read_bytes() for p in sorted(out.glob("part-*.jsonl")))


@pytest.fixture(scope="module")
def stamped(spark: SparkSession, inputs: Path, tmp_path_factory: pytest.TempPathFactory):  # noqa: F811
    """The rows the fronts admit: (ts, front, value), as stamped on Spark."""
    work = tmp_path_factory.mktemp("stamped")
    run_to_files(fronts(spark, inputs, FRONT_SETS[FRONT_SET]), work / "out", work / "ck")
    return released(work / "out")


#: The control offset's fields that explain a planning's decision (``decisions`` counts them).
EXPLAINING = {"reason", "requests", "moved", "movedBytes", "cluster"}


def explained_where_decided(found: list[dict[str, Any]], where: str = "") -> None:
    """Each batch's control offset explains a decision only if its planning made one."""
    previous = 0
    for batch, offset in enumerate(found):
        decided = offset["decisions"] > previous
        assert decided == bool(EXPLAINING & offset.keys()), (batch, offset, where)
        assert not decided or offset.get("reason"), (batch, offset, where)
        previous = offset["decisions"]


def schedule(rng: random.Random, partitions: int) -> list[tuple[int, int]]:
    """(batch, active count) requests: scale in to 1 and out to P, plus a random one."""
    ends = [1, partitions]
    rng.shuffle(ends)
    counts = [*ends, rng.randint(1, partitions)]
    batches = sorted(rng.sample(range(5), len(counts)))
    return list(zip(batches, counts, strict=True))


def run(spark: SparkSession, graph: SparkGraph, inputs: Path, work: Path) -> bytes:  # noqa: F811
    rows = fronts(spark, inputs, FRONT_SETS[FRONT_SET])
    run_to_files(graph.apply(rows, checkpoint_location=str(work / "ck")), work / "out", work / "ck")
    return out_bytes(work / "out")


def test_random_graphs_release_the_same_bytes_under_random_rescale_schedules(
    spark: SparkSession,
    inputs: Path,  # noqa: F811
    stamped: list[dict[str, Any]],
    tmp_path: Path,
):
    moved = 0
    for seed in SEEDS:
        grown = random_graph(seed)
        rng = random.Random(seed)
        partitions = rng.randint(2, 4)
        policy = ElasticPolicy(
            active=rng.randint(1, partitions), max_move_slots=rng.randint(1, 6), min_items=10**9
        )
        plan = schedule(rng, partitions)
        where = f"{grown}; P={partitions}, {policy}, requests (batch, active) {plan}"
        fixed = run(
            spark, SparkGraph(grown.flow, partitions=partitions), inputs, tmp_path / f"{seed}-fixed"
        )
        work = tmp_path / f"{seed}-rescaled"
        graph = SparkGraph(grown.flow, partitions=partitions, elastic=policy)
        for batch, active in plan:
            graph.control(str(work / "ck")).rescale(active, not_before_batch=batch)
        assert run(spark, graph, inputs, work) == fixed, where
        rows = [json.loads(line) for line in fixed.splitlines()]
        want = reference(grown, stamped)
        for sink in grown.sinks:
            got = [tuple(r[c] for c in COMPARED) for r in rows if r["sink"] == sink]
            assert got == want[sink], f"sink {sink} of {where}"
        found = layouts(work / "ck")
        explained_where_decided(found, where)
        consumed = [r for o in found for r in o.get("requests", [])]
        assert len(consumed) == len(plan), where  # every request consumed once, none refused
        assert not any(r["decision"].startswith("refused") for r in consumed), consumed
        assert found[-1]["active"] == plan[-1][1] and found[-1]["target"] is None, where
        assert all(len(o.get("moved", ())) <= policy.max_move_slots for o in found), where
        moved += sum(len(o.get("moved", ())) for o in found)
    assert moved > 0  # the schedules did move state


def test_an_initial_active_count_above_p_is_refused_before_the_query_starts(
    spark: SparkSession,
    inputs: Path,  # noqa: F811
    tmp_path: Path,
):
    graph = SparkGraph(random_graph(1).flow, partitions=2, elastic=ElasticPolicy(active=3))
    rows = fronts(spark, inputs, FRONT_SETS[FRONT_SET])
    with pytest.raises(ConfigError, match=r"'active' = 3 .*from 1 to 2"):
        graph.apply(rows, checkpoint_location=str(tmp_path / "ck"))
    assert not (tmp_path / "ck" / "flamestream-graph" / "layout.json").exists()


def test_asking_for_the_count_held_moves_nothing_and_a_rescale_moves_once(
    spark: SparkSession, tmp_path: Path
):
    """``rescale(2)`` on a query that started with 2, then ``rescale(3)`` twice: the slots move
    for the first ``3`` only, though the keys are skewed enough for a repacking to move them."""
    ck = tmp_path / "ck"
    policy = ElasticPolicy(active=2, max_move_slots=2, min_items=10**9)  # no moves for loads
    control = SparkGraph.control(str(ck))
    asked = [
        control.rescale(2, not_before_batch=1),  # the starting count
        control.rescale(3, not_before_batch=2),
        control.rescale(3, not_before_batch=7),  # after the migration, under other loads
    ]
    rows = apply_graph(
        word_count(),
        generator(spark, 1500),
        payload="key",
        checkpoint_location=str(ck),
        partitions=4,
        elastic=policy,
    )
    run_to_files(rows, tmp_path / "out", ck)
    assert len(released(tmp_path / "out")) == 1500
    found = layouts(ck)
    explained_where_decided(found)
    decided = {
        r["request"]: (b, r["decision"]) for b, o in enumerate(found) for r in o.get("requests", [])
    }
    assert list(decided) == [r.name for r in asked]
    (b1, first), (b2, second), (b3, third) = (decided[r.name] for r in asked)
    assert (b1, b2) == (1, 2) and b3 >= 7
    assert first == "2 active partitions already: nothing new"
    assert third == "3 active partitions already: nothing new"
    assert second.startswith("2 -> 3 active partitions, ")
    to_move = int(second.split(", ")[1].split()[0])
    default = list(Layout.default(4, 2).assignment)
    assert all(o["assignment"] == default for o in found[:b2])  # nothing moved before the 3
    moved = [len(o.get("moved", ())) for o in found]
    assert sum(moved) == to_move > 0 and max(moved) <= 2  # the slots moved once, 2 a batch
    assert found[-1]["assignment"] == found[b3]["assignment"] and found[-1]["active"] == 3
