"""Declared aggregations (``sum_by``, ``min_by``, ``max_by``) are their map_reduce written out.

On random orders of (key, value) items admitted from several fronts and delivered in random
order, each declared aggregation releases exactly what the same map_reduce with a lambda
mapper and reducer releases on the in-order run, and a key's last release is the fold of its
values. No Spark runs.
"""

from __future__ import annotations

import operator
import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flamestream import Dataflow, GraphError, map_reduce, max_by, min_by, sum_by
from flamestream.graph.mapreduce import AggregateMapper
from flamestream.testing import RandomScheduler, Script, run_in_order, run_script

from ..examples import examples

DECLARED = {"sum": (sum_by, operator.add), "min": (min_by, min), "max": (max_by, max)}


def first(item: tuple[str, int]) -> str:
    return item[0]


def second(item: tuple[str, int]) -> int:
    return item[1]


def declared(kind: str) -> Dataflow:
    flow = Dataflow(kind)
    aggregate = DECLARED[kind][0]
    flow.sink("out", aggregate(flow, "agg", flow.source("in"), key=first, value=second))
    return flow


def written_out(kind: str) -> Dataflow:
    flow = Dataflow(kind)
    reducer: Callable[[Any, Any], Any] = DECLARED[kind][1]
    up = flow.source("in")
    pairs = map_reduce(flow, "agg", up, mapper=lambda i: (i[0], i[1]), reducer=reducer)
    flow.sink("out", pairs)
    return flow


ITEMS = st.lists(st.tuples(st.sampled_from("abcd"), st.integers(-50, 50)), max_size=30)


@settings(max_examples=examples(60), deadline=None)
@given(kind=st.sampled_from(sorted(DECLARED)), items=ITEMS, seed=st.integers(0, 2**16))
def test_a_declared_aggregation_releases_its_map_reduce_written_out(kind, items, seed):
    inputs = {front: [(n + 1, item) for n, item in enumerate(items[front::2])] for front in (0, 1)}
    oracle = run_in_order(written_out(kind), inputs)
    rng = random.Random(seed)
    script = Script()
    queues = {front: list(rows) for front, rows in inputs.items()}
    while any(queues.values()):
        front = rng.choice([f for f, rows in queues.items() if rows])
        ts, item = queues[front].pop(0)
        script.admit(front, item, ts=ts).deliver(rng.randint(0, 20))
    shuffled = run_script(declared(kind), script, scheduler=RandomScheduler(seed))
    assert shuffled.rows() == oracle.rows()
    last = {r.payload.key: r.payload.value for r in shuffled.released()}
    folded: dict[str, int] = {}
    for key, value in items:
        folded[key] = value if key not in folded else DECLARED[kind][1](folded[key], value)
    assert last == folded


def test_without_key_and_value_the_item_is_both():
    assert AggregateMapper()("x") == ("x", "x")
    assert AggregateMapper(len)("abc") == (3, "abc")
    assert AggregateMapper(None, len)("abc") == ("abc", 3)


@pytest.mark.parametrize("kind", sorted(DECLARED))
def test_a_key_or_value_that_is_not_callable_is_refused_naming_the_step(kind):
    flow = Dataflow("bad")
    with pytest.raises(GraphError) as caught:
        DECLARED[kind][0](flow, "agg", flow.source("in"), value="amount")
    assert caught.value.step_id == "agg"
    assert "a callable value" in str(caught.value)
