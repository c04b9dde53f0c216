"""Stage planning on random graphs: every stage is wired after the stages it reads from.

Found by the random graphs on Spark (seed 19 of ``tests/random_graphs.py``): two branches at
the same keyed depth, one through a later keyed stage, met in a merge; the fused stage was
ordered by its first step and wired before one of its inputs existed.
"""

from __future__ import annotations

import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from flamestream.spark.plan import ExecutionPlan, plan_execution

from ..examples import examples
from ..random_graphs import random_graph


def wired_in_order(plan: ExecutionPlan) -> bool:
    """Whether each stage's entries read only stages before it (or the source, or the loop)."""
    done: set[int] = set()
    for stage in plan.stages:
        for entry in stage.entries:
            for producer in plan.graph.producers(entry):
                other = plan.stage_of.get(producer)
                if other is None or other is stage or (producer, entry) in plan.cut:
                    continue
                if other.index not in done:
                    return False
        done.add(stage.index)
    return True


@settings(max_examples=examples(300), deadline=None)
@given(seed=st.integers(0, 100_000), fusion=st.booleans())
def test_stages_come_after_the_stages_they_read(seed: int, fusion: bool):
    grown = random_graph(seed)
    plan = plan_execution(grown.flow.build(), fusion=fusion)
    assert wired_in_order(plan), str(grown)
    # every step but the source and sinks runs in exactly one stage; describe names them all
    steps = [sid for stage in plan.stages for sid in stage.steps]
    assert sorted(steps) == sorted(set(plan.graph.steps) - {plan.source, *plan.sinks})
    text = plan.describe()
    assert all(f"sink {sink}" in text for sink in plan.sinks), text


def test_the_graph_that_found_it():
    plan = plan_execution(random_graph(19).flow.build())
    assert wired_in_order(plan)
    assert [s.index for s in plan.stages] == list(range(1, len(plan.stages) + 1))


def test_planning_imports_no_spark():
    """The plan is unit-testable without Spark: importing and running it loads no pyspark."""
    code = (
        "import sys\n"
        "from flamestream.examples.wordcount import build_flow\n"
        "from flamestream.spark.plan import plan_execution\n"
        "plan_execution(build_flow().build(), release='latest').describe()\n"
        "assert 'pyspark' not in sys.modules, sorted(m for m in sys.modules if 'spark' in m)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@settings(max_examples=examples(300), deadline=None)
@given(seed=st.integers(0, 100_000))
def test_tails_read_only_their_keyed_host(seed: int):
    """A stage run in a keyed stage's tasks gets every input from that stage, none by loop."""
    plan = plan_execution(random_graph(seed).flow.build())
    by_index = {stage.index: stage for stage in plan.stages}
    for tail, host in plan.hosts.items():
        assert by_index[host].grouping is not None and by_index[tail].grouping is None
        for entry in by_index[tail].entries:
            for producer in plan.graph.producers(entry):
                if producer not in by_index[tail].steps:
                    assert plan.stage_of.get(producer) is by_index[host]
                    assert (producer, entry) not in plan.cut
    assert plan.passes() <= len(plan.stages) + 1
    assert not plan_execution(plan.graph, fusion=False).hosts
