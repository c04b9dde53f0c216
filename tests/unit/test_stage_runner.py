"""StageRunner (a fused stateless stage over Arrow batches) against the model's rules.

The rules for one item are written once, in ``reference.stateless_handler``; StageRunner
applies them step by step to whole batches. For random stateless graphs (maps, flat_maps
that may output nothing, filters, broadcast/merge diamonds, 1-3 sinks) and random items
(replayed versions and tombstones among them), both must send the same items to each sink:
same global time, same trace, same payload (as the sink renders it), same flags. No Spark.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flamestream import Dataflow
from flamestream.errors import StepError
from flamestream.graph.dataflow import Stream
from flamestream.graph.steps import Sink
from flamestream.model import DataItem, GlobalTime, Meta
from flamestream.runtime.reference import stateless_handler, versioned_handler
from flamestream.spark.exec.general.items import (
    ITEM_SCHEMA,
    MAY_INVALIDATE,
    TOMBSTONE,
    decode_trace,
    encode_payload,
    encode_trace,
)
from flamestream.spark.exec.general.stateless import StageRunner, render_default
from flamestream.spark.plan.stages import keyed_entries, plan_stages

from ..examples import examples
from ..random_graphs import ALPHABET, split_on, suffix, weight_filter

Out = tuple[str, int, int, tuple[Any, ...], Any, int]


def stateless_graph(seed: int) -> Dataflow:
    """A random valid graph of stateless steps only, with 1-3 sinks."""
    rng = random.Random(seed)
    flow = Dataflow(f"stateless{seed}")
    pool: list[Stream] = [flow.source("lines")]
    count = 0

    def name(kind: str) -> str:
        nonlocal count
        count += 1
        return f"{kind}{count}"

    for _ in range(rng.randint(1, 7)):
        up = pool.pop(rng.randrange(len(pool)))
        kind = rng.choice(["map", "flat_map", "filter", "broadcast", "merge"])
        if kind == "merge" and pool:
            pool.append(flow.merge(name("merge"), up, pool.pop(rng.randrange(len(pool)))))
        elif kind == "broadcast" or kind == "merge":
            pool.extend(flow.broadcast(name("broadcast"), up, rng.randint(2, 3)))
        elif kind == "map":
            pool.append(flow.map(name("map"), up, suffix(rng.choice("xyz"))))
        elif kind == "flat_map":
            pool.append(flow.flat_map(name("flat_map"), up, split_on(rng.choice(" a"))))
        else:
            fn = weight_filter(rng.randint(2, 3), rng.randint(0, 1))
            pool.append(flow.filter(name("filter"), up, fn))
    while len(pool) > 3:
        a, b = pool.pop(), pool.pop()
        pool.append(flow.merge(name("merge"), a, b))
    for number, stream in enumerate(pool):
        flow.sink(f"sink{number}", stream)
    return flow


def by_model(graph: Any, items: list[DataItem], swapped: Any = None) -> list[Out]:
    """Each item delivered to quiescence with the model's per-item rules.

    ``swapped``: per swapped step, its ``Versions`` (each item through the one its time picks).
    """

    def call(step: Any, fn: Any, item: DataItem, *, as_list: bool = False) -> Any:
        return list(fn(item.payload)) if as_list else fn(item.payload)

    def handler(sid: str, step: Any) -> Any:
        targets = [graph.consumer(sid, p) for p in range(step.outputs)]
        if swapped and sid in swapped:
            return versioned_handler(swapped[sid], targets, call)
        return stateless_handler(step, targets, call)

    handlers = {
        sid: handler(sid, step)
        for sid, step in graph.steps.items()
        if not isinstance(step, Sink) and sid != "lines"
    }
    out: list[Out] = []
    for item in items:
        queue = deque([(graph.consumer("lines"), item)])
        while queue:
            dest, current = queue.popleft()
            if dest in handlers:
                queue.extend(handlers[dest](current))
                continue
            flags = (MAY_INVALIDATE if current.may_invalidate else 0) | (
                TOMBSTONE if current.tombstone else 0
            )
            payload = None if current.tombstone else render_default(current.payload)
            gt = current.global_time
            out.append((dest, gt.ts, gt.front, current.meta.trace, payload, flags))
    return sorted(out, key=repr)


def by_stage_runner(graph: Any, items: list[DataItem]) -> list[Out]:
    """The same items as one Arrow batch through the graph's fused stage."""
    stages = plan_stages(graph)
    (stage,) = stages
    runner = StageRunner(graph, stage, keyed_entries(graph, stages))
    rows = [
        {
            "ts": item.global_time.ts,
            "front": item.global_time.front,
            "trace": encode_trace(item.meta.trace),
            "flags": (MAY_INVALIDATE if item.may_invalidate else 0)
            | (TOMBSTONE if item.tombstone else 0),
            "source": "in.txt",
            "position": n,
            "to": graph.consumer("lines"),
            "key": None,
            "payload": None if item.tombstone else encode_payload(item.payload),
            "value": None,
        }
        for n, item in enumerate(items)
    ]
    result = runner.run(pa.RecordBatch.from_pylist(rows, schema=ITEM_SCHEMA)).to_pylist()
    out = [
        (
            r["to"],
            r["ts"],
            r["front"],
            decode_trace(r["trace"]),
            r["value"],  # a sink's rows carry the payload rendered as text
            r["flags"],
        )
        for r in result
    ]
    return sorted(out, key=repr)


@settings(max_examples=examples(150), deadline=None)
@given(
    seed=st.integers(0, 10_000),
    items=st.lists(
        st.tuples(
            st.lists(st.sampled_from(ALPHABET), max_size=3).map(" ".join),
            st.integers(0, 2),  # 0: plain; 1: a replayed version; 2: a tombstone (one too)
            st.lists(st.integers(0, 3), max_size=2),  # a trace from upstream
        ),
        min_size=1,
        max_size=8,
    ),
)
def test_stage_runner_sends_what_the_model_sends(seed: int, items):
    from flamestream.model import LocalTime

    graph = stateless_graph(seed).build()
    made = []
    for ts, (text, kind, trace) in enumerate(items):
        meta = Meta(GlobalTime(ts, 0), tuple(LocalTime(t, 0) for t in trace))
        tombstone = kind == 2
        made.append(
            DataItem(
                None if tombstone else text,
                meta,
                may_invalidate=kind > 0,
                tombstone=tombstone,
            )
        )
    assert by_stage_runner(graph, made) == by_model(graph, made), stateless_graph(seed)


@settings(max_examples=examples(200), deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.integers(0, 5), st.sampled_from("abc"), st.integers(1, 9), st.booleans()),
        max_size=30,
    ),
    shuffle=st.booleans(),
)
def test_combining_in_order_is_combining_by_meta(
    rows: list[tuple[int, str, int, bool]], shuffle: bool
):
    """Map-side combining (release="latest"): the in-order shortcut (a key's last item is its
    latest) folds the same values and keeps the same item as comparing metas does."""
    from flamestream.graph.mapreduce import Mapped
    from flamestream.model import LocalTime
    from flamestream.spark.exec.general import combine

    # input rows 0..5 with increasing metas; items in (row, child) order unless shuffled
    order = [(10 + r, 0, b"") for r in range(6)]
    suffixes = {child: (LocalTime(0, child),) for child in range(len(rows))}
    items = combine.Items(table=tuple(suffixes.values()))
    ordered = sorted(enumerate(rows), key=lambda e: (e[1][0], e[0]))
    if shuffle:
        random.Random(len(rows)).shuffle(ordered)
    for child, (row, key, value, replay) in ordered:
        items.rows.append(row)
        items.sids.append(child)
        items.payloads.append(Mapped(key, value))
        items.flags.append(MAY_INVALIDATE if replay else 0)
    in_order = combine.in_meta_order(order, items)
    assert in_order or shuffle
    general = combine.combined_any_order(order, items, int.__add__)
    if in_order:
        fast = combine.combined_in_order(items, int.__add__)
        assert combined_rows(fast) == combined_rows(general)
    combined = [p for p, f in zip(general.payloads, general.flags, strict=True) if not f]
    totals: dict[str, int] = {}
    for _, key, value, replay in rows:
        if not replay:
            totals[key] = totals.get(key, 0) + value
    assert {p.key: p.value for p in combined} == totals


def combined_rows(items: Any) -> list[tuple[Any, ...]]:
    suffixes = [items.suffix(k) for k in range(len(items.rows))]
    items.materialize()  # a fast path hands pairs on: compare the Mapped items they stand for
    rows = zip(items.rows, suffixes, map(repr, items.payloads), items.flags, strict=True)
    return sorted(rows)


def pairs_graph(mapper: Any, *, fan_in: bool) -> Dataflow:
    """Lines split into words, map_reduce'd with ``mapper`` and ``+``, rendered to a sink.

    ``fan_in``: every word reaches the grouping twice, by two producers (a broadcast's
    copies merged again), so the items in the map's queue are not in meta order.
    """
    from operator import add

    from flamestream import map_reduce

    flow = Dataflow("pairs")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    if fan_in:
        # port 0's copies reach the merge after port 1's (one step more) yet order first
        left, right = flow.broadcast("copy", words, 2)
        words = flow.merge("again", flow.map("same", left, str.lower), right)
    counts = map_reduce(flow, "count", words, mapper=mapper, reducer=add, commutative=True)
    flow.sink("out", flow.map("render", counts, lambda r: f"{r.key}={r.value}"))
    return flow


def _pair(word: str) -> tuple[str, int]:
    return word, len(word)


def _pair_as_list(word: str) -> list[Any]:
    return [word, 1]


def _unhashable_for_z(word: str) -> tuple[Any, int]:
    return ([word] if word.startswith("z") else word), 1


@settings(max_examples=examples(150), deadline=None)
@given(
    lines=st.lists(
        st.tuples(
            st.lists(st.sampled_from(["a", "bb", "a", "c", "zz"]), max_size=6),
            st.integers(0, 3),  # ts step (0: same ts as the row before)
            st.sampled_from([0, 0, 0, MAY_INVALIDATE, MAY_INVALIDATE | TOMBSTONE]),
        ),
        max_size=12,
    ),
    mapper=st.sampled_from([_pair, _pair_as_list, _unhashable_for_z]),
    latest=st.booleans(),
    fan_in=st.booleans(),
)
def test_pairs_path_sends_what_the_general_path_sends(
    lines: list[tuple[list[str], int, int]], mapper: Any, latest: bool, fan_in: bool
):
    """map_reduce's map sending (key, value) pairs to the grouping's exit (combined there
    with release="latest", encoded as they are otherwise), and trusting the order the items
    are known to have, sends the same rows, byte for byte, as making a Mapped item per pair
    and checking the order item by item; and raises the same error for an unhashable key."""
    import pytest

    from flamestream.spark.exec.general import stateless
    from flamestream.spark.plan.stages import precombiners

    graph = pairs_graph(mapper, fan_in=fan_in).build()
    stages = plan_stages(graph)
    first = stages[0]  # producers first: split and the map, up to the grouping
    assert "count.map" in first.steps
    precombine = precombiners(graph, stages) if latest else {}
    runner = StageRunner(graph, first, keyed_entries(graph, stages), precombine=precombine)
    ts, rows = 0, []
    for n, (words, step, flag) in enumerate(lines):
        ts += step
        rows.append(
            {
                "ts": ts,
                "front": 0,
                "trace": b"",
                "flags": flag,
                "source": "in.txt",
                "position": n,
                "to": graph.consumer("lines"),
                "key": None,
                "payload": None if flag & TOMBSTONE else encode_payload(" ".join(words)),
                "value": None,
            }
        )
    batch = pa.RecordBatch.from_pylist(rows, schema=ITEM_SCHEMA)

    def outcome() -> Any:
        try:
            return runner.run(batch).to_pylist()
        except Exception as exc:  # the same error either way: type and message
            return type(exc).__name__, str(exc)

    fast = outcome()
    with pytest.MonkeyPatch.context() as patch:
        # the general path: Mapped items, and no order known before it is checked per item
        patch.setattr(stateless, "_all_pairs", lambda results: False)
        patch.setattr(stateless, "rows_in_meta_order", lambda metas: False)
        general = outcome()
    assert fast == general


class _FailsAt:
    """A map function that raises at its ``at``-th call and counts every call."""

    def __init__(self, at: int) -> None:
        self.at, self.calls = at, 0

    def __call__(self, payload: str) -> str:
        self.calls += 1
        if self.calls == self.at + 1:
            raise ValueError(f"bad {payload}")
        return payload


@settings(max_examples=examples(60), deadline=None)
@given(
    flags=st.lists(st.sampled_from([0, 0, 0, MAY_INVALIDATE, TOMBSTONE]), min_size=1, max_size=12),
    data=st.data(),
)
def test_a_raising_function_names_its_record_and_runs_once_per_item(
    flags: list[int], data: Any
) -> None:
    """The stage stops at the first payload whose call raises, names that record (global
    time, source, position), and calls the function on no payload twice (a function may
    have effects, and a second run may not fail where the first did)."""
    plain = [n for n, flag in enumerate(flags) if not flag & TOMBSTONE]
    if not plain:
        return
    failing = data.draw(st.sampled_from(plain))
    fn = _FailsAt(plain.index(failing))
    flow = Dataflow("fails")
    flow.sink("out", flow.map("m", flow.source("lines"), fn))
    graph = flow.build()
    (stage,) = stages = plan_stages(graph)
    runner = StageRunner(graph, stage, keyed_entries(graph, stages))
    rows = [
        {
            "ts": 10 + n,
            "front": 0,
            "trace": b"",
            "flags": flag,
            "source": "in.txt",
            "position": 100 + n,
            "to": graph.consumer("lines"),
            "key": None,
            "payload": None if flag & TOMBSTONE else encode_payload(f"p{n}"),
            "value": None,
        }
        for n, flag in enumerate(flags)
    ]
    with pytest.raises(StepError, match=f"bad p{failing}") as caught:
        runner.run(pa.RecordBatch.from_pylist(rows, schema=ITEM_SCHEMA))
    error = caught.value
    assert (error.step_id, error.global_time) == ("m", GlobalTime(10 + failing, 0))
    assert error.determinant == ("in.txt", 100 + failing)
    assert fn.calls == plain.index(failing) + 1
