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
from flamestream.spark import SparkGraph
from flamestream.spark.control.key_layout import ElasticPolicy

from ..random_graphs import random_graph
from .conftest import released, run_to_files
from .test_elastic_layout import layouts
from .test_random_graphs import FRONT_SETS, fronts, inputs, reference  # noqa: F401

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
            got = [(r["ts"], r["front"], r["value"]) for r in rows if r["sink"] == sink]
            assert got == want[sink], f"sink {sink} of {where}"
        found = layouts(work / "ck")
        # an unchanged offset is logged again for every batch: one entry per request name
        consumed = list({r["request"]: r for o in found for r in o.get("requests", [])}.values())
        assert len(consumed) == len(plan), where  # every request consumed, none refused
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
