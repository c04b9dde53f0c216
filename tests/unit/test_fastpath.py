"""The keyed stage's in-order fast path gives exactly what the general path gives.

A keyed stage running map_reduce's cycle is driven twice over the same random batches: once
with the fast path (:mod:`flamestream.spark.exec.declared.fastpath`) and once delivering every
item through
``GroupingState.receive`` and the stateless handlers. After every batch the leaving rows must
be equal, byte for byte, and so must the grouping states (buckets, clocks, the invalidation
index, GC bookkeeping, statistics). Batches are random: keys, global times going back and
forth across batches, siblings of one global time, versions that invalidate earlier ones,
tombstones, state snapshots restored between batches and garbage collection. No Spark runs.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flamestream import Dataflow, map_reduce
from flamestream.errors import InvariantError, StepError
from flamestream.graph.mapreduce import Mapped, Reduced
from flamestream.model import GlobalTime, LocalTime
from flamestream.runtime.grouping import TOMBSTONE as TOMBSTONE_KEY
from flamestream.runtime.grouping import GroupingState
from flamestream.spark.apply import SparkGraph
from flamestream.spark.exec.declared.fastpath import MapReduceCycle
from flamestream.spark.exec.general.items import (
    ITEM_SCHEMA,
    MAY_INVALIDATE,
    TOMBSTONE,
    encode_key,
    encode_payload,
    encode_trace,
    sorted_by_meta,
)
from flamestream.spark.exec.general.keyed import KeyedRunner, _run_bounds
from flamestream.spark.exec.shuffle.packed import DICTIONARY_ENCODED

from ..examples import examples, scaled, tier

#: Traces an item may carry when it enters the cycle: siblings (child indexes), versions
#: (logical times) and descendants (longer traces) of one global time.
TRACES = [
    ((0, 0), (0, 0)),
    ((0, 1), (0, 0)),
    ((0, 2), (0, 0)),
    ((0, 0),),
    ((0, 0), (0, 0), (0, 0)),
    ((1, 0), (0, 0)),
    ((2, 0), (0, 0)),
    ((0, 0), (1, 0)),
    ((0, 1), (2, 0)),
]
IN_ORDER_TRACES = [0, 1, 2, 0, 1, 2, 3, 4]  # no versions: what a stateless stage sends

REDUCERS: dict[str, tuple[Callable[[Any, Any], Any], Callable[[Any], Any] | None, bool]] = {
    "sum": (int.__add__, None, True),
    "count": (operator.add, None, True),  # adds up: in-order batches run in Arrow (summed)
    "history": (lambda acc, v: (*acc, v), lambda v: (v,), False),  # order-sensitive
}


def reduced(made: Dataflow, reducer: str) -> Any:
    """``made``'s source of pairs map_reduce'd with ``reducer``: the stream of reduced items."""
    combine, initial, commutative = REDUCERS[reducer]
    extra = {} if initial is None else {"initial": initial}
    return map_reduce(
        made,
        "count",
        made.source("pairs"),
        mapper=lambda p: p,
        reducer=combine,
        commutative=commutative,
        **extra,
    )


def flow(reducer: str) -> Dataflow:
    made = Dataflow("mr")
    made.sink("out", reduced(made, reducer))
    return made


def runner(reducer: str, *, latest: bool, fast: bool) -> KeyedRunner:
    graph = SparkGraph(flow(reducer))
    (stage,) = [s for s in graph.stages if s.grouping]
    keyed = KeyedRunner(graph.graph, stage, graph.keys, graph.render, latest=latest)
    assert keyed.cycle is not None
    keyed.fast = fast
    return keyed


Event = tuple[int, int, int, int, str, Any]  # ts, front, trace index, flags, key, payload kind


def table(events: list[Event]) -> pa.Table:
    """Item rows entering the cycle's merge, sorted by meta as the keyed task sorts them."""
    rows: dict[str, list[Any]] = {name: [] for name in ITEM_SCHEMA.names}
    for ts, front, trace, flags, key, value in events:
        payload = None if flags & TOMBSTONE else value
        rows["ts"].append(ts)
        rows["front"].append(front)
        rows["trace"].append(encode_trace(tuple(LocalTime(*lt) for lt in TRACES[trace])))
        rows["flags"].append(flags | (MAY_INVALIDATE if flags & TOMBSTONE else 0))
        rows["source"].append(f"f{front}")
        rows["position"].append(ts)
        rows["to"].append("count.merge")
        rows["key"].append(None if payload is None else encode_key(key))
        rows["payload"].append(None if payload is None else encode_payload(payload))
        rows["value"].append(None)
    return pa.Table.from_pydict(rows, schema=ITEM_SCHEMA).sort_by(
        [("ts", "ascending"), ("front", "ascending"), ("trace", "ascending")]
    )


def view(state: GroupingState) -> Any:
    """Everything a grouping state holds, comparable with ``==``; checks index/bucket sharing.

    The index's times are compared as the list they are: equal states hold equal lists,
    whichever path made them (``GroupingState.collect_garbage`` sorts them).
    """

    def item(i: Any) -> Any:
        return (i.meta, i.payload, i.may_invalidate, i.tombstone)

    for entries in state._by_time.values():
        for key, held in entries:
            if key is not TOMBSTONE_KEY and held in state._buckets[key].items:  # by identity
                continue
            assert key is TOMBSTONE_KEY, "an indexed item is not (the same object) in its bucket"
    # the buckets a summing batch left as columns, made as objects without taking them out;
    # in key order, as the dict's order is not the block's (and no output depends on it)
    buckets = {**state._buckets, **(state.columns.buckets() if state.columns else {})}
    return (
        sorted(((k, b.clock, [item(i) for i in b.items]) for k, b in buckets.items()), key=repr),
        [(t, [(k, item(i)) for k, i in entries]) for t, entries in state._by_time.items()],
        list(state._times),
        sorted(state._oversized, key=repr),
        state.stats,
        state._where,  # the replay determinants of the indexed times
    )


@st.composite
def batches(draw: st.DrawFn, reducer: str) -> list[tuple[list[Event], GlobalTime | None]]:
    """Batches of entering items with unique metas, each with an optional GC min-time after.

    Out of order, a batch is sometimes late: wholly below the min-time after it, unflagged,
    of keys of its own. It may then run whole (``run_in_order``), not indexing its times,
    while the index holds times that came in any order, from three fronts.
    """
    keys = st.sampled_from(["a", "b", "c", "d", "e"])
    in_order = draw(st.booleans())  # mostly increasing global times: the fast path's case
    count = draw(st.integers(1, 5))
    seen: set[tuple[int, int, int]] = set()
    out = []
    base = 0
    for _ in range(count):
        late = not in_order and draw(st.integers(0, 3)) == 0
        plain = in_order or late
        events: list[Event] = []
        for _ in range(draw(st.integers(0, 12))):
            low, high = (base, base + 8) if in_order else (0, base + 5) if late else (0, 40)
            ts = draw(st.integers(low, high))
            front = draw(st.integers(0, 2))
            trace = draw(
                st.sampled_from(IN_ORDER_TRACES) if plain else st.integers(0, len(TRACES) - 1)
            )
            if (ts, front, trace) in seen:
                continue
            seen.add((ts, front, trace))
            flags = draw(
                st.just(0) if plain else st.sampled_from([0] * 8 + [MAY_INVALIDATE, TOMBSTONE])
            )
            key = draw(st.sampled_from(["f", "g"]) if late else keys)
            value: Any = Mapped(key, draw(st.integers(1, 3)))
            if draw(st.integers(0, 30)) == 0:
                initial = REDUCERS[reducer][1] or (lambda v: v)
                value = Reduced(key, initial(7))  # not a mapped item: the general path's
            events.append((ts, front, trace, flags, key, value))
        base += 9
        gc_at = None  # garbage collection after the batch: often above all of it
        if draw(st.integers(0, 3)):
            gc_at = GlobalTime(draw(st.integers(base - 3, base + 2)), draw(st.integers(0, 2)))
        out.append((events, gc_at))
    return out


#: What the property test's fast runs did: rows run() took fast, batches run whole (by
#: run_in_order), batches run in Arrow (by SummedCycle.run).
FAST_ROWS: list[int] = []
WHOLE_BATCHES: list[bool] = []
SUMMED_BATCHES: list[bool] = []


def as_unpacked(rows: pa.Table, distinct_traces: bool = False) -> pa.Table:
    """``rows`` with their payloads and sources dictionary-encoded, as ``packed.unpack`` gives
    them (its dictionaries are the packed rows' values: without nulls, perhaps repeated),
    and their traces too, as a keyed task's sort gives them (``sorted_by_meta``'s
    ``coded_traces``: a dictionary of distinct values if ``distinct_traces``; else each
    value twice)."""
    if distinct_traces:
        at = rows.schema.get_field_index("trace")
        rows = rows.set_column(at, "trace", pc.dictionary_encode(rows.column("trace")))
    for name in (*DICTIONARY_ENCODED, *([] if distinct_traces else ["trace"])):
        values = rows.column(name).combine_chunks()
        if values.null_count:
            continue
        doubled = pa.concat_arrays([values, values])  # each value twice in the dictionary
        indices = pa.array(np.arange(len(values)) + len(values) * (np.arange(len(values)) % 2))
        coded = pa.DictionaryArray.from_arrays(indices.cast(pa.int32()), doubled)
        rows = rows.set_column(rows.schema.get_field_index(name), name, coded)
    return rows


def counted(cycle: MapReduceCycle) -> None:
    """Record in FAST_ROWS and WHOLE_BATCHES what ``cycle`` does."""
    run, run_in_order = cycle.run, cycle.run_in_order

    def counting_run(*args: Any) -> int:
        FAST_ROWS.append(run(*args))
        return FAST_ROWS[-1]

    def counting_run_in_order(*args: Any) -> list[int] | None:
        latest = run_in_order(*args)
        WHOLE_BATCHES.append(latest is not None)
        return latest

    cycle.run = counting_run  # type: ignore[method-assign]
    cycle.run_in_order = counting_run_in_order  # type: ignore[method-assign]


def counted_summed(keyed: KeyedRunner) -> None:
    """Record in SUMMED_BATCHES whether ``keyed``'s summed cycle ran each batch it was given."""
    summed = keyed.summed
    if summed is None:
        return
    run = summed.run

    def counting_run(*args: Any) -> Any:
        ran = run(*args)
        SUMMED_BATCHES.append(ran is not None)
        return ran

    summed.run = counting_run  # type: ignore[method-assign]


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), reducer=st.sampled_from(sorted(REDUCERS)), latest=st.booleans())
def test_fast_path_equals_the_general_path(data, reducer, latest):
    script = data.draw(batches(reducer))
    fast = runner(reducer, latest=latest, fast=True)
    assert fast.cycle is not None
    assert (fast.summed is not None) == (reducer == "count")
    counted(fast.cycle)
    counted_summed(fast)
    general = runner(reducer, latest=latest, fast=False)
    both_paths_alike(script, fast, general, lambda: data.draw(st.booleans()))


def both_paths_alike(
    script: list[tuple[list[Any], GlobalTime | None]],
    fast: KeyedRunner,
    general: KeyedRunner,
    unpacked: Callable[[], bool],
    rows_of: Callable[[list[Any]], pa.Table] | None = None,
) -> None:
    """Run ``script`` through ``fast`` and ``general`` (the same stage, the general path):
    after every batch (and its GC), the leaving rows and the grouping states are equal, and
    again after both states are snapshotted and restored. ``unpacked()``: whether the fast
    path gets a batch's rows as ``packed.unpack`` gives them; ``rows_of``: a batch's events
    as item rows (default: :func:`table`)."""
    rows_of = rows_of or table
    g = fast.grouping
    states = [GroupingState(g.step_id, g.window, g.key) for _ in range(2)]
    min_time = GlobalTime(-1, 0)
    for events, gc_at in script:
        collect = gc_at is not None and gc_at > min_time  # the min-time never moves back
        if collect:
            min_time = gc_at
        if events:  # as a keyed task runs a batch: the rows, then GC below the min-time
            rows = rows_of(events)
            fast_rows = as_unpacked(rows) if unpacked() else rows
            got = fast._run(fast_rows, states[0], min_time if collect else None)
            want = general._run(rows, states[1], min_time if collect else None)
            assert got.equals(want), (got.to_pylist(), want.to_pylist())
        if collect:
            for state in states:
                state.collect_garbage(min_time)
        assert view(states[0]) == view(states[1])
        states = [restored(state) for state in states]  # as the next batch's task finds it


def _one(ts: int, front: int, key: str) -> Event:
    return (ts, front, 0, 0, key, Mapped(key, 1))


@pytest.mark.parametrize("latest", [False, True])
@pytest.mark.parametrize("reducer", sorted(REDUCERS))
def test_a_batch_below_the_min_time_leaves_the_index_as_the_general_path(reducer, latest):
    """A draw of the property above that once failed: the index holds 15/0, then 15/1, then
    16/0 (each with times below the coming min-time, 2/0 and 2/1); a last batch lies wholly
    below the min-time (3/0). The fast path does not index that batch's time, the general
    path indexes it and the collection drops it again: the index must end the same."""
    script = [
        ([_one(15, 0, "a")], None),
        ([_one(2, 0, "b"), _one(15, 1, "c")], None),
        ([_one(2, 1, "d"), _one(16, 0, "e")], None),
        ([_one(3, 0, "f")], GlobalTime(10, 0)),
    ]
    fast = runner(reducer, latest=latest, fast=True)
    assert fast.cycle is not None
    run_in_order = fast.cycle.run_in_order
    whole: list[bool] = []

    def recording(*args: Any) -> list[int] | None:
        latest_rows = run_in_order(*args)
        whole.append(latest_rows is not None)
        return latest_rows

    fast.cycle.run_in_order = recording  # type: ignore[method-assign]
    both_paths_alike(script, fast, runner(reducer, latest=latest, fast=False), lambda: False)
    assert whole == [True]  # the last batch ran whole, without indexing its time


def test_the_random_batches_exercise_the_fast_paths():
    """A guard on the property above: both fast paths really ran, and often."""
    if not FAST_ROWS:  # run alone (or first): run the property test to fill the counters
        test_fast_path_equals_the_general_path()
    assert sum(FAST_ROWS) > scaled(500)
    assert sum(WHOLE_BATCHES) > scaled(50)
    assert not all(WHOLE_BATCHES)


def test_only_map_reduce_cycles_get_the_fast_path():
    graph = SparkGraph(flow("sum"))
    (stage,) = [s for s in graph.stages if s.grouping]
    assert graph.plan.path(stage).kind == "map-reduce-cycle"
    assert graph.plan.path(stage).cycle is not None
    other = Dataflow("window")
    other.sink("out", other.grouping("g", other.source("in"), window=2, key=str))
    plain = SparkGraph(other)
    (stage,) = [s for s in plain.stages if s.grouping]
    assert plain.plan.path(stage).kind == "in-order-grouping"  # its own lane, not the cycle's
    assert plain.plan.path(stage).cycle is None


def _fragile(acc: int, value: int) -> int:
    if value == 3:
        raise ValueError("three")
    return acc + value


def test_a_raising_reducer_fails_alike_on_both_paths():
    REDUCERS["fragile"] = (_fragile, None, False)
    try:
        events: list[Event] = [
            (1, 0, 0, 0, "a", Mapped("a", 1)),
            (2, 0, 0, 0, "a", Mapped("a", 3)),
        ]
        errors = []
        for fast in (True, False):
            keyed = runner("fragile", latest=False, fast=fast)
            g = keyed.grouping
            with pytest.raises(StepError) as caught:
                keyed._run(table(events), GroupingState(g.step_id, g.window, g.key))
            errors.append(str(caught.value))
    finally:
        del REDUCERS["fragile"]
    assert errors[0] == errors[1]
    assert "count.reduce" in errors[0] and "three" in errors[0] and "('f0', 2)" in errors[0]


def test_map_reduce_cycle_is_recognized_after_the_graph_travels_to_workers():
    """Spark's workers get the graph through cloudpickle: the public tags must survive it."""
    from pyspark import cloudpickle

    from flamestream.graph.mapreduce import is_map_reduce_grouping
    from flamestream.spark.plan.paths import map_reduce_cycle

    flow = Dataflow("wc")
    counts = map_reduce(
        flow, "count", flow.source("in"), mapper=lambda w: (w, 1), reducer=operator.add
    )
    flow.sink("out", counts)
    graph = SparkGraph(flow)
    travelled = cloudpickle.loads(cloudpickle.dumps(graph))
    stage = next(s for s in travelled.stages if s.grouping)
    assert is_map_reduce_grouping(travelled.graph.step(stage.grouping))
    assert map_reduce_cycle(travelled.graph, stage) is not None


def with_render_tail(reducer: str, *, handed: bool) -> Any:
    """``flow(reducer)`` with a render step and a filter after the cycle (the stage's tail),
    as the sink's task runs them: handing the tail the payload objects or the encoded rows."""
    from flamestream.spark.exec.general.tails import WithTails

    made = Dataflow("mr")
    shown = made.map("show", reduced(made, reducer), lambda r: f"{r.key}:{r.value}")
    made.sink("out", made.filter("short", shown, lambda text: len(text) < 9))
    graph = SparkGraph(made)
    (stage,) = [s for s in graph.stages if s.grouping]
    keyed = KeyedRunner(graph.graph, stage, graph.keys, graph.render)
    task = WithTails(keyed, [graph._runner(t, named=False) for t in graph.plan.tails(stage)])
    if not handed:
        keyed.exits.handed = frozenset()
    return task


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), reducer=st.sampled_from(sorted(REDUCERS)))
def test_tails_handed_objects_release_what_encoded_rows_release(data, reducer):
    """The keyed stage hands its tails payload objects instead of encoded rows: the rows
    leaving the tails are the same, batch after batch, replays and tombstones included."""
    script = data.draw(batches(reducer))
    tasks = [with_render_tail(reducer, handed=h) for h in (True, False)]
    g = tasks[0].keyed.grouping
    states = [GroupingState(g.step_id, g.window, g.key) for _ in tasks]
    for events, _ in script:
        if not events:
            continue
        outputs = []
        for task, state in zip(tasks, states, strict=True):
            rows = task.keyed._run(table(events), state)
            handed = task.keyed.handed_payloads
            outputs.append([b.to_pylist() for b in task.through_tails(rows, handed)])
        assert outputs[0] == outputs[1]
        assert tasks[0].keyed.handed_payloads is not None
        assert tasks[1].keyed.handed_payloads is None


#: Keys of summed batches: text (non-ASCII, empty); rarely one too long for a short pickle,
#: or not text (both the Python fold's).
SUMMED_KEYS = st.sampled_from(["a", "b", "", "é", "a b", "\U0001f600"])
ANY_TEXT = st.text(max_size=4)
RARE_KEYS = st.sampled_from(["x" * 300, 2])
#: Values: mostly small counts; pickled as 1, 2 or 4 bytes; rarely longer, or a bool (both the
#: Python fold's).
SUMMED_VALUES = st.integers(0, 3) | st.integers(-(2**31), 2**31 - 1) | st.sampled_from([255, 256])
RARE_VALUES = st.sampled_from([2**40, -(2**31) - 1, True])


@st.composite
def summed_batches(draw: st.DrawFn) -> list[list[Event]]:
    """In-order batches of Mapped items, as count's keyed stage gets them, below the min-time."""
    out = []
    for batch in range(draw(st.integers(1, 4))):
        events: list[Event] = []
        seen: set[tuple[int, int, int]] = set()
        late = draw(st.sampled_from([0] * 3 + [8]))  # sometimes late: before the last batch's
        for _ in range(draw(st.integers(1, 14))):
            ts = draw(st.integers(10 * batch - late, 10 * batch + 4))
            front = draw(st.integers(0, 1))
            trace = draw(st.sampled_from(IN_ORDER_TRACES))
            rare = draw(st.integers(0, 80))
            if rare == 3 and events:  # rarely: the item before again, an invariant broken
                events.append(events[-1])
                continue
            if (ts, front, trace) in seen:
                continue
            seen.add((ts, front, trace))
            key = draw(RARE_KEYS if rare == 0 else ANY_TEXT if rare > 60 else SUMMED_KEYS)
            value: Any = Mapped(key, draw(RARE_VALUES if rare == 1 else SUMMED_VALUES))
            if rare == 2:
                value = Reduced(key, 7)
            events.append((ts, front, trace, 0, key, value))
        out.append(events)
    return out


def outcome(keyed: KeyedRunner, rows: pa.Table, state: GroupingState, min_time: GlobalTime) -> Any:
    """The rows ``keyed`` makes of ``rows`` (as Python values), or the invariant it finds broken."""
    try:
        return keyed._run(rows, state, min_time).to_pylist()
    except InvariantError as error:
        return str(error)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=summed_batches(), latest=st.booleans(), data=st.data())
def test_summed_batches_equal_the_python_fold(script, latest, data):
    """``count``'s in-order batches in Arrow (``SummedCycle``) give the rows, byte for byte,
    and the state of the general path; most of the random batches do run in Arrow."""
    fast = runner("count", latest=latest, fast=True)
    general = runner("count", latest=latest, fast=False)
    counted_summed(fast)
    g = fast.grouping
    states = [GroupingState(g.step_id, g.window, g.key) for _ in range(2)]
    low = data.draw(st.booleans())  # collect below some items: they stay in the index
    coded = data.draw(st.booleans())  # payloads dictionary-encoded, as unpacked rows have them
    for number, events in enumerate(script):
        min_time = GlobalTime(10 * number + (2 if low and number % 2 else 5), 0)
        rows = table(events)
        fed = as_unpacked(rows, distinct_traces=data.draw(st.booleans())) if coded else rows
        got = outcome(fast, fed, states[0], min_time)
        want = outcome(general, rows, states[1], min_time)
        assert got == want
        if isinstance(want, str):  # two items of one meta: an invariant broken, on both paths
            return
        for state in states:
            state.collect_garbage(min_time)
        assert view(states[0]) == view(states[1])
        if data.draw(st.booleans()):  # as the next batch's task finds them (a column block too)
            states = [restored(state) for state in states]


def restored(state: GroupingState) -> GroupingState:
    """A new state restored from ``state``'s snapshot."""
    again = GroupingState(state.step_id, state.window, state._key)
    again.restore(state.snapshot())
    return again


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(script=summed_batches(), parts=st.integers(1, 3))
def test_summed_column_buckets_read_as_the_python_folds_objects(script, parts):
    """Whatever reads a state a summing batch left as columns sees the Python fold's buckets:
    keys, entries, one key's bucket, a split by key and its merge (the elastic layouts')."""
    fast = runner("count", latest=True, fast=True)
    general = runner("count", latest=True, fast=False)
    g = fast.grouping
    states = [GroupingState(g.step_id, g.window, g.key) for _ in range(2)]
    for number, events in enumerate(script):
        min_time = GlobalTime(10 * number + 5, 0)
        for keyed, state in zip((fast, general), states, strict=True):
            if isinstance(outcome(keyed, table(events), state, min_time), str):
                return  # an invariant broken (the property above compares the errors)
            state.collect_garbage(min_time)
    key = events[0][4]
    one = [[(i.meta, i.payload, i.may_invalidate) for i in s.bucket(key)] for s in states]
    assert one[0] == one[1]  # one key's bucket, taken out of the block
    assert sorted(map(repr, states[0].bucket_keys())) == sorted(map(repr, states[1].bucket_keys()))
    assert states[0].entries() == states[1].entries()

    def part_of(key: Any) -> int:
        return len(repr(key)) % parts

    cut = [restored(state).split(part_of, into=range(parts)) for state in states]
    for number in range(parts):
        assert view(cut[0][number]) == view(cut[1][number])
    merged = [GroupingState.merge(g.step_id, g.window, g.key, list(c.values())) for c in cut]
    assert view(merged[0]) == view(merged[1])


def test_the_summed_batches_mostly_run_in_arrow():
    """A guard on the property above: the Arrow path ran most batches, not all."""
    SUMMED_BATCHES.clear()
    test_summed_batches_equal_the_python_fold()
    # the fast tier's few draws are mostly Hypothesis's simplest examples, fewer of them summed
    assert sum(SUMMED_BATCHES) > len(SUMMED_BATCHES) / (3 if tier() == "full" else 4)
    assert not all(SUMMED_BATCHES)


#: Templates of a render step after count: plain ones run in Arrow, the last ones in Python.
TEMPLATES = ["{key}={value}", "{value}", "[{value}] {key}!", "plain", "{key}{key}{{x}}", ""]
TEMPLATES += ["{value:>4}", "{key!r}"]
RENDERED_BATCHES: list[bool] = []


def rendered_task(template: str, *, fast: bool, declared: bool, latest: bool) -> Any:
    """count's keyed stage with a render tail into the sink, as the sink's task runs them:
    the render a ``Template`` (``declared``) or the same text from a lambda."""
    from flamestream import Template
    from flamestream.spark.exec.general.tails import WithTails

    made = Dataflow("mr")
    declared_fn = Template(template)
    fn = declared_fn if declared else (lambda r: template.format(key=r.key, value=r.value))
    made.sink("out", made.map("render", reduced(made, "count"), fn))
    graph = SparkGraph(made)
    (stage,) = [s for s in graph.stages if s.grouping]
    keyed = KeyedRunner(graph.graph, stage, graph.keys, graph.render, latest=latest)
    keyed.fast = fast
    (tail,) = [graph._runner(t, named=False) for t in graph.plan.tails(stage)]
    if tail.rendered is not None:
        run = tail.rendered.run

        def counting_run(*args: Any) -> Any:
            out = run(*args)
            RENDERED_BATCHES.append(out is not None)
            return out

        tail.rendered.run = counting_run
    return WithTails(keyed, [tail])


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    script=summed_batches(),
    template=st.sampled_from(TEMPLATES),
    latest=st.booleans(),
)
def test_templates_render_sums_in_arrow_as_python_does(script, template, latest):
    """A sum's rows rendered by a ``Template`` tail in Arrow (``RenderedTail``) equal, byte
    for byte, those of the general path rendering them with the template or a lambda."""
    tasks = [
        rendered_task(template, fast=True, declared=True, latest=latest),
        rendered_task(template, fast=False, declared=True, latest=latest),
        rendered_task(template, fast=False, declared=False, latest=latest),
        rendered_task(template, fast=True, declared=True, latest=latest),
    ]
    # the last one's rows go to a sink writing values only (BarrierWriter tells the stage)
    tasks[-1].keep_only(VALUE_KEPT)
    g = tasks[0].keyed.grouping
    states = [GroupingState(g.step_id, g.window, g.key) for _ in tasks]
    for number, events in enumerate(script):
        min_time = GlobalTime(10 * number + 5, 0)
        ran = zip(tasks, states, strict=True)
        outputs = [task_rows(task, events, state, min_time) for task, state in ran]
        assert outputs[0] == outputs[1] == outputs[2]
        if isinstance(outputs[0], str):
            assert outputs[3] == outputs[0]
            return
        assert kept_of(outputs[3]) == kept_of(outputs[0])  # what the sink keeps: the same
        for state in states:
            state.collect_garbage(min_time)


#: What a write task keeps of the released rows of a sink with ``columns=value``.
VALUE_KEPT = ("ts", "front", "trace", "flags", "sink", "value")


def task_rows(task: Any, events: list[Event], state: GroupingState, at: GlobalTime) -> Any:
    """The rows ``task`` (a keyed stage and its tails) sends its sink for ``events``, or the
    invariant it finds broken."""
    try:
        rows = task.keyed._run(table(events), state, at)
    except InvariantError as error:  # an item sent twice: broken on every path
        return str(error)
    return [b.to_pylist() for b in task.through_tails(rows, task.keyed.handed_payloads)]


def kept_of(batches: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The columns of ``VALUE_KEPT`` of every row (``to`` is the released rows' ``sink``)."""
    names = [("to" if name == "sink" else name) for name in VALUE_KEPT]
    return [{name: row[name] for name in names} for rows in batches for row in rows]


def test_a_sink_writing_values_only_spares_the_determinants():
    """With ``columns=value`` (``keep_only``) the rows rendered in Arrow carry no determinant
    (the sink drops it); with every column kept they do, as the general path makes them."""
    events = [(1, 0, 0, 0, "a", Mapped("a", 1)), (2, 0, 0, 0, "a", Mapped("a", 1))]
    made = {}
    for kept in (None, VALUE_KEPT):
        task = rendered_task("{key}={value}", fast=True, declared=True, latest=False)
        if kept is not None:
            task.keep_only(kept)
        g = task.keyed.grouping
        state = GroupingState(g.step_id, g.window, g.key)
        (rows,) = task_rows(task, events, state, GlobalTime(5, 0))
        made[kept] = rows
    assert [r["value"] for r in made[VALUE_KEPT]] == ["a=1", "a=2"]
    assert kept_of([made[VALUE_KEPT]]) == kept_of([made[None]])
    assert {(r["source"], r["position"]) for r in made[VALUE_KEPT]} == {(None, None)}
    assert None not in {r["position"] for r in made[None]}


def test_the_plain_templates_mostly_render_in_arrow():
    """A guard on the property above: Arrow rendered most plain-template batches."""
    RENDERED_BATCHES.clear()
    test_templates_render_sums_in_arrow_as_python_does()
    assert sum(RENDERED_BATCHES) > len(RENDERED_BATCHES) / 2


#: How many runs each batch of the property below was cut into.
RUNS: list[int] = []


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), reducer=st.sampled_from(sorted(REDUCERS)), run_rows=st.integers(1, 5))
def test_a_batch_in_runs_leaves_what_it_leaves_whole(data, reducer, run_rows):
    """Releasing every update, a keyed task delivers a big batch in runs (``_runs``): the
    rows (in meta order, as the sink releases them) and the state are the whole batch's on
    the general path, whatever the run length and wherever global times fall."""
    script = data.draw(batches(reducer))
    fast = runner(reducer, latest=False, fast=True)
    general = runner(reducer, latest=False, fast=False)
    g = fast.grouping
    states = [GroupingState(g.step_id, g.window, g.key) for _ in range(2)]
    min_time = GlobalTime(-1, 0)
    for events, gc_at in script:
        collect = gc_at is not None and gc_at > min_time
        if collect:
            min_time = gc_at
        if events:
            rows = table(events)
            fast_rows = as_unpacked(rows) if data.draw(st.booleans()) else rows
            at = min_time if collect else None
            runs = list(fast._runs(fast_rows, states[0], at, run_rows))
            RUNS.append(len(runs))
            got = sorted_by_meta(pa.Table.from_batches(runs)).to_pylist()
            want = sorted_by_meta(pa.Table.from_batches([general._run(rows, states[1], at)]))
            assert got == want.to_pylist()
        if collect:
            for state in states:
                state.collect_garbage(min_time)
        assert view(states[0]) == view(states[1])


def test_the_batches_were_cut_into_runs():
    """A guard on the property above: most batches were cut, some into many runs."""
    RUNS.clear()
    test_a_batch_in_runs_leaves_what_it_leaves_whole()
    assert sum(n > 1 for n in RUNS) > len(RUNS) / 2
    assert max(RUNS) >= 4


@given(
    st.lists(st.tuples(st.integers(0, 6), st.integers(0, 1)), min_size=1, max_size=40),
    st.integers(1, 8),
)
def test_runs_end_where_global_times_do(times, rows):
    """Runs cover the rows in order, each at least ``rows`` long but the last, and never cut
    a global time."""
    times = sorted(times)
    batch = pa.table(
        {"ts": [t for t, _ in times], "front": pa.array([f for _, f in times], pa.int32())}
    )
    bounds = _run_bounds(batch, rows)
    assert [b for _, b in bounds][-1] == len(times) and bounds[0][0] == 0
    assert all(end == start for (_, end), (start, _) in pairwise(bounds))
    assert all(end - start >= rows for start, end in bounds[:-1])
    assert all(times[end - 1] != times[end] for _, end in bounds[:-1])


@given(
    keys=st.lists(ANY_TEXT, min_size=1, max_size=4, unique=True),
    data=st.data(),
    template=st.sampled_from(TEMPLATES[:5]),
)
def test_coded_keys_read_and_render_as_the_key_column(keys, data, template):
    """Reduced payloads whose keys are codes into a dictionary (a sum's) read, filter and
    render in Arrow as the same payloads with the keys as a column."""
    from flamestream import Template
    from flamestream.spark.exec.declared.rendered import ReducedColumns, RenderedTail
    from flamestream.spark.plan.paths import TemplateRender

    codes = np.array(data.draw(st.lists(st.integers(0, len(keys) - 1), max_size=12)), np.int64)
    sums = pa.array(
        data.draw(st.lists(st.integers(-5, 5), min_size=len(codes), max_size=len(codes))),
        pa.int64(),
    )
    dictionary = pa.array(keys, pa.string())
    coded = ReducedColumns.coded(dictionary, codes, sums)
    plain = ReducedColumns(dictionary.take(pa.array(codes)), sums)
    mask = pa.array(
        data.draw(st.lists(st.booleans(), min_size=len(codes), max_size=len(codes))), pa.bool_()
    )
    tail = RenderedTail(TemplateRender(Template(template).plain_parts(), "out"))
    for got, want in ((coded, plain), (coded.filter(mask), plain.filter(mask))):
        assert got.coding is not None
        assert tail.rendered(got).equals(tail.rendered(want))
        assert got.keys.equals(want.keys) and got.objects() == want.objects()


def _appending(acc: Any, value: Any) -> Any:
    """A reducer that changes its new value (a list) before keeping it: sharing shows."""
    value.append(len(acc))
    return (*acc, tuple(value))


@pytest.mark.parametrize("value", [[1], 1, "x"])
def test_repeated_payloads_decode_alike_on_both_paths(value):
    """The whole-batch fold decodes a repeated payload once when its key and value are
    immutable, and shares the pair; a mutable value (a list a reducer changes) is decoded
    per row, as the general path does: the released rows and the states are the same."""
    REDUCERS["appending"] = (_appending, lambda v: (tuple(v) if type(v) is list else v,), False)
    if type(value) is not list:
        REDUCERS["appending"] = (lambda acc, v: (*acc, v), lambda v: (v,), False)
    try:
        events = [(ts, 0, 0, 0, "a", Mapped("a", value)) for ts in range(1, 6)]
        events += [(ts, 1, 0, 0, "b", Mapped("b", value)) for ts in range(1, 4)]
        events.sort(key=lambda e: (e[0], e[1]))
        script = [(events, GlobalTime(100, 0))]
        fast = runner("appending", latest=False, fast=True)
        assert fast.cycle is not None
        whole: list[bool] = []
        run_in_order = fast.cycle.run_in_order

        def recording(*args: Any) -> list[int] | None:
            latest_rows = run_in_order(*args)
            whole.append(latest_rows is not None)
            return latest_rows

        fast.cycle.run_in_order = recording  # type: ignore[method-assign]
        general = runner("appending", latest=False, fast=False)
        both_paths_alike(script, fast, general, lambda: True)
        assert whole == [True]  # the batch ran whole, by the fold
    finally:
        del REDUCERS["appending"]
