"""Which path each stage takes (``flamestream.spark.plan.paths``): one rule, named by describe().

The plan decides every stage's path once; the runners build their Arrow shortcut from that
decision and ``describe()`` prints it. On random graphs with declared steps, the path each
runner takes is the one ``describe()`` names; the decision's cases one by one below.
"""

from __future__ import annotations

import operator
import re
from dataclasses import replace
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flamestream import Dataflow, Template, count, map_reduce
from flamestream.errors import GraphError
from flamestream.graph.dataflow import Stream
from flamestream.graph.mapreduce import CountMapper, MapStep
from flamestream.graph.steps import Grouping, Map, Merge
from flamestream.spark.apply import SparkGraph
from flamestream.spark.exec.general.items import ITEM_SCHEMA, encode_payload
from flamestream.spark.exec.general.keyed import KeyedRunner
from flamestream.spark.exec.general.stateless import StageRunner
from flamestream.spark.plan import plan_execution
from flamestream.spark.plan.paths import (
    CYCLE,
    DECLARED_COUNT,
    GENERAL,
    LANE,
    RENDERED,
    SUMMED,
    StagePath,
    TextCount,
    stage_path,
    text_count,
)
from flamestream.spark.plan.stages import Stage

from ..examples import examples
from ..random_graphs import random_graph

#: A stage line of ``describe()``: its index and the path it names.
_STAGE_LINE = re.compile(r"^  stage (\d+) \[.*; path ([a-z-]+)[,)]")


def described(text: str) -> dict[int, str]:
    """Per stage index, the path ``describe()`` names."""
    found = {}
    for line in text.splitlines():
        if line.startswith("  stage "):
            match = _STAGE_LINE.match(line)
            assert match is not None, line
            found[int(match[1])] = match[2]
    return found


def runner_of(graph: SparkGraph, stage: Stage) -> StageRunner | KeyedRunner:
    """The stage's runner, built as ``apply`` builds it (with the plan's decision)."""
    if stage.grouping is None:
        runner: StageRunner = graph._runner(stage, named=False)
        return runner
    path = graph.plan.path(stage)
    return KeyedRunner(graph.graph, stage, graph.keys, graph.render, path=path)


def taken(runner: StageRunner | KeyedRunner) -> str:
    """The path a runner takes on a plain batch, from the shortcut it built."""
    if isinstance(runner, KeyedRunner):
        assert runner.cycle is None or runner.lane is None
        if runner.summed is not None:
            return SUMMED
        if runner.lane is not None:
            return LANE
        return CYCLE if runner.cycle is not None else GENERAL
    assert runner.counted is None or runner.rendered is None
    if runner.counted is not None:
        return DECLARED_COUNT
    return RENDERED if runner.rendered is not None else GENERAL


def text_rows(to: str, lines: list[str]) -> pa.RecordBatch:
    """A front's rows for step ``to``: rising global times, no trace, no flags, text."""
    rows = [
        {"ts": ts, "front": 0, "trace": b"", "flags": 0, "to": to, "payload": encode_payload(line)}
        for ts, line in enumerate(lines, start=1)
    ]
    return pa.RecordBatch.from_pylist(rows, schema=ITEM_SCHEMA)


def _spark_graph(grown_flow: Dataflow, **options: Any) -> SparkGraph:
    """The graph as ``SparkGraph`` compiles it; ``release="latest"`` only where it can run."""
    try:
        return SparkGraph(grown_flow, **options)
    except GraphError:  # a grouping without a reduce step: latest cannot run it
        return SparkGraph(grown_flow, **{**options, "release": "every"})


@settings(max_examples=examples(300), deadline=None)
@given(
    seed=st.integers(0, 100_000),
    fusion=st.booleans(),
    release=st.sampled_from(["every", "latest"]),
    swappable=st.booleans(),
    own_render=st.booleans(),
)
def test_each_runner_takes_the_path_describe_names(
    seed: int, fusion: bool, release: str, swappable: bool, own_render: bool
):
    grown = random_graph(seed, declared=True)
    options: dict[str, Any] = {"fusion": fusion, "release": release, "swappable": swappable}
    if own_render:
        options["render"] = lambda payload: f"<{payload}>"
    graph = _spark_graph(grown.flow, **options)
    named = described(graph.describe())
    assert sorted(named) == [stage.index for stage in graph.stages], str(grown)
    for stage in graph.stages:
        runner = runner_of(graph, stage)
        assert taken(runner) == named[stage.index] == runner.path.kind, str(grown)
        assert runner.path == graph.plan.path(stage)
        if stage.index not in graph.plan.hosts:
            # built alone (no plan, no swaps), a runner asks the same rule: the same answer
            alone = _alone(graph, stage).path
            assert replace(alone, swappable=swappable) == runner.path, str(grown)
        if named[stage.index] == DECLARED_COUNT:
            _runs_counted(runner, stage)


def _alone(graph: SparkGraph, stage: Stage) -> StageRunner | KeyedRunner:
    """The stage's runner built without the plan's decision."""
    if stage.grouping is None:
        return StageRunner(graph.graph, stage, graph.keys, graph.render, graph.plan.precombine)
    return KeyedRunner(graph.graph, stage, graph.keys, graph.render)


def _runs_counted(runner: StageRunner | KeyedRunner, stage: Stage) -> None:
    """A plain batch of text goes through the declared count, not item by item."""
    assert isinstance(runner, StageRunner) and runner.counted is not None
    calls: list[bool] = []
    run = runner.counted.run

    def counting(batch: pa.RecordBatch) -> Any:
        out = run(batch)
        calls.append(out is not None)
        return out

    runner.counted.run = counting  # type: ignore[method-assign]
    runner.run(text_rows(stage.entries[0], ["a b a", "c a"]))
    assert calls == [True]


def test_random_declared_graphs_take_every_path():
    """The property above meets every path (the seeds are fixed: this cannot flake)."""
    kinds = set()
    for seed in range(100):
        plan = plan_execution(random_graph(seed, declared=True).flow.build())
        kinds |= {plan.path(stage).kind for stage in plan.stages}
    assert kinds == {GENERAL, DECLARED_COUNT, CYCLE, SUMMED, LANE, RENDERED}


@settings(max_examples=examples(100), deadline=None)
@given(seed=st.integers(0, 100_000))
def test_graphs_without_declared_steps_are_as_before(seed: int):
    """``declared=False`` draws the same graphs: no declared count, sum or render in them."""
    plan = plan_execution(random_graph(seed).flow.build())
    assert {plan.path(s).kind for s in plan.stages} <= {GENERAL, CYCLE, LANE}


# the decision's cases, one by one


def _word_count(*, split: bool = True, render: Any = None, how: str = "count") -> Dataflow:
    flow = Dataflow("wc")
    words: Stream = flow.source("lines")
    if split:
        words = flow.flat_map("split", words, str.split)
    if how == "count":
        counts = count(flow, "count", words)
    elif how == "count_by_key":
        counts = count(flow, "count", words, key=str.lower)
    else:
        reducer = operator.add if how == "sum" else (lambda a, b: a + b)
        counts = map_reduce(flow, "count", words, mapper=lambda w: (w, 1), reducer=reducer)
    flow.sink("out", flow.map("show", counts, render or Template("{key}={value}")))
    return flow


def _kinds(flow: Dataflow, **options: Any) -> list[str]:
    plan = plan_execution(flow.build(), **options)
    return [plan.path(stage).kind for stage in plan.stages]


@pytest.mark.parametrize("split", [True, False])
@pytest.mark.parametrize("release", ["every", "latest"])
def test_a_count_of_text_sums_and_renders_in_arrow(split: bool, release: str):
    plan = plan_execution(_word_count(split=split).build(), release=release)
    first, keyed, tail = (plan.path(stage) for stage in plan.stages)
    assert (first.kind, keyed.kind, tail.kind) == (DECLARED_COUNT, SUMMED, RENDERED)
    entry = "split" if split else "count.map"
    assert first.count == TextCount(entry, split, "count.merge", combined=release == "latest")
    assert keyed.cycle is not None and keyed.cycle.merge == "count.merge"
    assert tail.render is not None and tail.render.sink == "out"
    done = ("split and " if split else "") + ("counted" if release == "latest" else "keyed")
    assert f"path declared-count, a declared count of text: {done} in Arrow" in plan.describe()


@pytest.mark.parametrize(
    ("flow", "kinds"),
    [
        (_word_count(how="count_by_key"), [GENERAL, SUMMED, RENDERED]),  # a key function
        (_word_count(how="sum"), [GENERAL, SUMMED, RENDERED]),  # a lambda mapper
        (_word_count(how="lambda"), [GENERAL, CYCLE, GENERAL]),  # no sum: objects to render
        (_word_count(render=Template("{key!r}")), [DECLARED_COUNT, SUMMED, GENERAL]),
        (_word_count(render=lambda r: f"{r.key}={r.value}"), [DECLARED_COUNT, SUMMED, GENERAL]),
    ],
    ids=["count-by-key", "lambda-mapper", "lambda-reducer", "non-plain-template", "lambda-render"],
)
def test_what_is_not_declared_takes_the_general_path(flow: Dataflow, kinds: list[str]):
    assert _kinds(flow) == kinds


def test_a_render_of_the_callers_own_keeps_the_template_general():
    """Only the default render is what the Arrow render reproduces."""
    assert _kinds(_word_count(), default_render=False) == [DECLARED_COUNT, SUMMED, GENERAL]
    graph = SparkGraph(_word_count(), render=lambda payload: f"<{payload}>")
    assert "rendered in Arrow" not in graph.describe()
    assert SparkGraph(_word_count()).plan.path(graph.stages[2]).kind == RENDERED


def test_a_template_not_after_a_sum_stays_general():
    """Without fusion the render has a pass of its own: nothing hands it a sum's columns."""
    assert _kinds(_word_count(), fusion=False) == [GENERAL, DECLARED_COUNT, SUMMED, GENERAL]


def test_a_grouping_alone_takes_its_lane_and_other_cycles_the_general_path():
    flow = Dataflow("window")
    flow.sink("out", flow.grouping("g", flow.source("in"), window=2, key=str))
    assert _kinds(flow) == [LANE]  # a grouping alone: the in-order lane
    # count's map into a map_reduce-like cycle keyed by another function than mapped_key
    flow = Dataflow("other")
    (mapped,) = flow.add_step(Map("m", MapStep(CountMapper())), flow.source("in"))
    (merged,) = flow.add_step(Merge("merge"), mapped)
    (tuples,) = flow.add_step(Grouping("g", 2, lambda m: getattr(m, "key", m)), merged)
    out, back = flow.broadcast("b", tuples, 2)
    flow.add_merge_input(merged, flow.filter("f", back, lambda t: len(t) < 0))
    flow.sink("out", out)
    plan = plan_execution(flow.build())
    (stage,) = [s for s in plan.stages if "m" in s.steps]
    assert text_count(plan.graph, stage, {}) is not None  # a count, but into another key
    assert plan.path(stage).kind == GENERAL
    keys = {"merge": lambda m: m}
    assert stage_path(plan.graph, stage, keys=keys, precombine={}).kind == GENERAL


def test_a_swap_in_a_batch_sends_it_the_general_way():
    plan = plan_execution(_word_count().build(), swappable=True)
    first, keyed, tail = (plan.path(stage) for stage in plan.stages)
    assert all(path.swappable for path in (first, keyed, tail))
    assert [p.in_batch() for p in (first, keyed, tail)] == [DECLARED_COUNT, SUMMED, RENDERED]
    assert [p.in_batch({"split"}) for p in (first, keyed, tail)] == [GENERAL] * 3
    assert "in Arrow, unless a step is swapped" in plan.describe()
    assert "unless" not in plan_execution(_word_count().build()).describe()


def test_a_sum_without_a_min_time_runs_the_cycle():
    """A bounded run (no checkpoint) has no min-time: the sum's Arrow batches need one."""
    (_, keyed, _) = (p for _, p in sorted(plan_execution(_word_count().build()).paths.items()))
    assert keyed.in_batch(min_time=False) == CYCLE
    assert StagePath().in_batch(min_time=False) == GENERAL


def test_the_keying_stage_takes_the_general_path():
    """The source's keying pass (no steps) is no stage of the plan."""
    flow = Dataflow("direct")
    flow.sink("out", count(flow, "count", flow.source("lines")))
    graph = SparkGraph(flow)
    assert graph.plan.path(graph._keying()) == StagePath()
    assert graph._runner(graph._keying(), named=False).path == StagePath()
