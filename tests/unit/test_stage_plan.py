"""Stage planning on random graphs: every stage is wired after the stages it reads from.

Found by the random graphs on Spark (seed 19 of ``tests/random_graphs.py``): two branches at
the same keyed depth, one through a later keyed stage, met in a merge; the fused stage was
ordered by its first step and wired before one of its inputs existed.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from flamestream.spark.apply import SparkGraph

from ..random_graphs import random_graph


def wired_in_order(graph: SparkGraph) -> bool:
    """Whether each stage's entries read only stages before it (or the source, or the loop)."""
    done: set[int] = set()
    for stage in graph.stages:
        for entry in stage.entries:
            for producer in graph.graph.producers(entry):
                other = graph._stage_of.get(producer)
                if other is None or other is stage or (producer, entry) in graph.cut:
                    continue
                if other.index not in done:
                    return False
        done.add(stage.index)
    return True


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 100_000), fusion=st.booleans())
def test_stages_come_after_the_stages_they_read(seed: int, fusion: bool):
    grown = random_graph(seed)
    assert wired_in_order(SparkGraph(grown.flow, fusion=fusion)), str(grown)


def test_the_graph_that_found_it():
    graph = SparkGraph(random_graph(19).flow)
    assert wired_in_order(graph)
    assert [s.index for s in graph.stages] == list(range(1, len(graph.stages) + 1))
