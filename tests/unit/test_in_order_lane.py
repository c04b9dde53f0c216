"""A keyed stage's in-order lane (a grouping alone) gives exactly what the general path gives.

A keyed stage that is a grouping alone is driven twice over the same
random batches: once with the lane (:mod:`flamestream.spark.exec.general.in_order`), once
delivering every item through ``GroupingState.receive`` and the merges' handlers. After every
batch the leaving rows must be equal, byte for byte, and so must the grouping states
(buckets, clocks, the invalidation index, GC bookkeeping, statistics). Batches are random:
windows, keys, global times going back and forth across
batches, siblings and versions of one global time, tombstones, snapshots restored between
batches, garbage collection. No Spark runs.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flamestream import Dataflow
from flamestream.errors import UnhashableKeyError
from flamestream.model import GlobalTime, LocalTime
from flamestream.runtime.grouping import GroupingState
from flamestream.spark.apply import SparkGraph
from flamestream.spark.exec.general.items import (
    ITEM_SCHEMA,
    MAY_INVALIDATE,
    TOMBSTONE,
    encode_key,
    encode_payload,
    encode_trace,
)
from flamestream.spark.exec.general.keyed import KeyedRunner
from flamestream.spark.plan.paths import grouping_alone

from ..examples import examples, scaled
from .test_fastpath import IN_ORDER_TRACES, TRACES, as_unpacked, view


def first(payload: Any) -> Any:
    """The grouping's key: the payload's first element."""
    return payload[0]


def flow(window: int) -> Dataflow:
    """A source -> grouping(window, by ``first``) -> map -> sink."""
    made = Dataflow("pairs")
    tuples = made.grouping("pairs", made.source("in"), window=window, key=first)
    made.sink("out", made.map("sizes", tuples, len))
    return made


def runner(window: int, *, fast: bool, latest: bool = False) -> KeyedRunner:
    graph = SparkGraph(flow(window))
    (stage,) = [s for s in graph.stages if s.grouping]
    keyed = KeyedRunner(graph.graph, stage, graph.keys, graph.render, latest=latest)
    assert keyed.lane is not None and keyed.cycle is None
    keyed.fast = fast
    return keyed


Event = tuple[int, int, int, int, str, int]  # ts, front, trace, flags, key, n


def table(events: list[Event]) -> pa.Table:
    """Item rows entering the stage, sorted by meta as the keyed task sorts them."""
    rows: dict[str, list[Any]] = {name: [] for name in ITEM_SCHEMA.names}
    for ts, front, trace, flags, key, n in events:
        payload = None if flags & TOMBSTONE else (key, n)
        rows["ts"].append(ts)
        rows["front"].append(front)
        rows["trace"].append(encode_trace(tuple(LocalTime(*lt) for lt in TRACES[trace])))
        rows["flags"].append(flags | (MAY_INVALIDATE if flags & TOMBSTONE else 0))
        rows["source"].append(f"f{front}")
        rows["position"].append(ts)
        rows["to"].append("pairs")
        rows["key"].append(None if payload is None else encode_key(key))
        rows["payload"].append(None if payload is None else encode_payload(payload))
        rows["value"].append(None)
    return pa.Table.from_pydict(rows, schema=ITEM_SCHEMA).sort_by(
        [("ts", "ascending"), ("front", "ascending"), ("trace", "ascending")]
    )


@st.composite
def batches(draw: st.DrawFn) -> list[tuple[list[Event], GlobalTime | None]]:
    """Batches of entering items with unique metas, each with an optional GC min-time after."""
    in_order = draw(st.booleans())  # mostly increasing global times: the lane's case
    seen: set[tuple[int, int, int]] = set()
    out = []
    base = 0
    for _ in range(draw(st.integers(1, 5))):
        events: list[Event] = []
        for _ in range(draw(st.integers(0, 12))):
            ts = draw(st.integers(base, base + 8) if in_order else st.integers(0, 40))
            front = draw(st.integers(0, 2))
            trace = draw(
                st.sampled_from(IN_ORDER_TRACES) if in_order else st.integers(0, len(TRACES) - 1)
            )
            if (ts, front, trace) in seen:
                continue
            seen.add((ts, front, trace))
            flags = draw(
                st.just(0) if in_order else st.sampled_from([0] * 8 + [MAY_INVALIDATE, TOMBSTONE])
            )
            key = draw(st.sampled_from(["a", "b", "c", "d", "e"]))
            events.append((ts, front, trace, flags, key, draw(st.integers(1, 3))))
        base += 9
        gc_at = None
        if draw(st.integers(0, 3)):
            gc_at = GlobalTime(draw(st.integers(base - 3, base + 2)), draw(st.integers(0, 2)))
        out.append((events, gc_at))
    return out


#: Rows the property test's lane took, and rows it was given; whether each batch given to
#: run_in_order (below a min-time) ran whole.
TAKEN: list[tuple[int, int]] = []
WHOLE: list[bool] = []


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), window=st.integers(1, 3), latest=st.booleans())
def test_the_lane_equals_the_general_path(data, window, latest):
    script = data.draw(batches())
    fast = runner(window, fast=True, latest=latest)
    general = runner(window, fast=False, latest=latest)
    assert fast.lane is not None
    run = fast.lane.run

    def counting(*args: Any) -> int:
        TAKEN.append((run(*args), len(args[1]["ts"])))
        return TAKEN[-1][0]

    fast.lane.run = counting  # type: ignore[method-assign]
    run_in_order = fast.lane.run_in_order

    def counting_whole(*args: Any) -> bool:
        WHOLE.append(run_in_order(*args))
        return WHOLE[-1]

    fast.lane.run_in_order = counting_whole  # type: ignore[method-assign]
    g = fast.grouping
    states = [GroupingState(g.step_id, g.window, g.key) for _ in range(2)]
    min_time = GlobalTime(-1, 0)
    for events, gc_at in script:
        collect = gc_at is not None and gc_at > min_time  # the min-time never moves back
        if collect:
            min_time = gc_at
        if events:
            rows = table(events)
            fast_rows = as_unpacked(rows) if data.draw(st.booleans()) else rows
            got = fast._run(fast_rows, states[0], min_time if collect else None)
            want = general._run(rows, states[1], min_time if collect else None)
            assert got.equals(want), (got.to_pylist(), want.to_pylist())
        if collect:
            for state in states:
                state.collect_garbage(min_time)
        assert view(states[0]) == view(states[1])
        restored = []
        for state in states:  # as the next batch's task finds it
            again = GroupingState(g.step_id, g.window, g.key)
            again.restore(state.snapshot())
            restored.append(again)
        states = restored


def test_the_random_batches_exercise_the_lane():
    """A guard on the property above: the lane took most rows, and left some to the general
    path (flags, versions, rows out of order); batches below the min-time often ran whole."""
    if not TAKEN or not WHOLE:
        test_the_lane_equals_the_general_path()
    taken, given_rows = sum(t for t, _ in TAKEN), sum(n for _, n in TAKEN)
    assert taken > scaled(1000)
    assert taken < given_rows
    assert sum(WHOLE) > scaled(30)  # batches below the min-time ran whole, and
    assert not all(WHOLE)  # some that were not in order (or of window 1) did not


def _grouping_stage(made: Dataflow) -> tuple[Any, Any]:
    graph = SparkGraph(made)
    (stage,) = [s for s in graph.stages if s.grouping]
    return graph.graph, stage


def test_only_a_grouping_alone_gets_the_lane():
    assert grouping_alone(*_grouping_stage(flow(2))) is not None
    looped = Dataflow("loop")  # the grouping's tuples go round to its merge: a cycle
    merged = looped.merge("m", looped.source("in"))  # the loop's input added below
    tuples = looped.broadcast("copy", looped.grouping("g", merged, window=2, key=first), 2)
    short = looped.filter("short", tuples[0], lambda t: len(t) < 2)
    looped.add_merge_input(merged, looped.map("again", short, lambda t: t[-1]))
    looped.sink("out", tuples[1])
    assert grouping_alone(*_grouping_stage(looped)) is None


@pytest.mark.parametrize("fast", [True, False])
def test_an_unhashable_key_in_the_lane_is_reported_as_on_the_general_path(fast):
    keyed = runner(2, fast=fast)
    rows = table([(1, 0, 0, 0, "a", 1)])
    bad = pa.array([encode_payload((["not", "hashable"], 1))], pa.binary())
    rows = rows.set_column(rows.schema.get_field_index("payload"), "payload", bad)
    g = keyed.grouping
    with pytest.raises(UnhashableKeyError) as caught:
        keyed._run(rows, GroupingState(g.step_id, g.window, g.key))
    assert caught.value.step_id == "pairs"
    assert caught.value.determinant == ("f0", 1)
