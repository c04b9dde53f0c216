"""``map_batches``: a map over batches, and the same output however items are batched.

The reference runtime calls a batch function on one payload at a time, the Spark stage runner
on a step's whole batch at once; for random stateless graphs mixing maps and map_batches (all
three formats), random items (replayed versions and tombstones among them) and random cuts of
the input into batches, both send every sink the same items. The graph API, the errors (a
raising function, a wrong number of results, a result or a payload the contract does not
take), swaps and arrival-order independence through a grouping are checked too. No Spark.
"""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flamestream import BatchStepError, Dataflow, GlobalTime, StepError, map_reduce
from flamestream.errors import GraphError
from flamestream.graph import MapBatches
from flamestream.graph.dataflow import Stream
from flamestream.model import DataItem, LocalTime, Meta
from flamestream.runtime import ReferenceRuntime
from flamestream.runtime.batches import call_batch
from flamestream.runtime.swaps import check_swappable
from flamestream.spark.exec.general.items import (
    ITEM_SCHEMA,
    MAY_INVALIDATE,
    TOMBSTONE,
    encode_payload,
)
from flamestream.spark.exec.general.stateless import StageRunner
from flamestream.spark.plan.stages import keyed_entries, plan_stages
from flamestream.testing import run_in_order, run_script

from ..examples import examples
from ..random_graphs import ALPHABET, _named, split_on, suffix, weight_filter
from .test_properties import front_inputs, shuffled_scripts
from .test_stage_runner import by_model, by_stage_runner

# --- batch functions over text payloads, each with a map doing the same per item ------------


def arrow_suffix(tag: str) -> Any:
    return _named(lambda a: pc.binary_join_element_wise(a, tag, ""), f"arrow_suffix_{tag}")


def list_reverse() -> Any:
    return _named(lambda xs: [x[::-1] for x in xs], "list_reverse")


def pandas_suffix(tag: str) -> Any:
    return _named(lambda s: s + tag, f"pandas_suffix_{tag}")


def batch_step(flow: Dataflow, name: str, up: Stream, rng: random.Random) -> Stream:
    """A random map_batches: Arrow (upper-casing or a suffix), pandas or a list."""
    choice = rng.randrange(4)
    if choice == 0:
        return flow.map_batches(name, up, pc.utf8_upper)
    if choice == 1:
        return flow.map_batches(name, up, arrow_suffix(rng.choice("xyz")), input_type=pa.string())
    if choice == 2:
        return flow.map_batches(name, up, pandas_suffix(rng.choice("xyz")), format="pandas")
    return flow.map_batches(name, up, list_reverse(), format="list")


def stateless_graph(seed: int) -> Dataflow:
    """A random valid graph of stateless steps, map_batches among them, with 1-3 sinks."""
    rng = random.Random(seed)
    flow = Dataflow(f"batches{seed}")
    pool: list[Stream] = [flow.source("lines")]
    kinds = ["map_batches", "map_batches", "map", "flat_map", "filter", "broadcast", "merge"]
    for count in range(1, rng.randint(2, 8)):
        up = pool.pop(rng.randrange(len(pool)))
        kind = rng.choice(kinds)
        name = f"{kind}{count}"
        if kind == "merge" and pool:
            pool.append(flow.merge(name, up, pool.pop(rng.randrange(len(pool)))))
        elif kind in ("broadcast", "merge"):
            pool.extend(flow.broadcast(name, up, rng.randint(2, 3)))
        elif kind == "map_batches":
            pool.append(batch_step(flow, name, up, rng))
        elif kind == "map":
            pool.append(flow.map(name, up, suffix(rng.choice("xyz"))))
        elif kind == "flat_map":
            pool.append(flow.flat_map(name, up, split_on(rng.choice(" a"))))
        else:
            pool.append(flow.filter(name, up, weight_filter(rng.randint(2, 3), rng.randint(0, 1))))
    while len(pool) > 3:
        pool.append(flow.merge(f"merge_end{len(pool)}", pool.pop(), pool.pop()))
    for number, stream in enumerate(pool):
        flow.sink(f"sink{number}", stream)
    return flow


def made_items(items: list[tuple[str, int, list[int]]]) -> list[DataItem]:
    """Items from (text, kind, upstream trace): kind 1 a replayed version, 2 a tombstone."""
    made = []
    for ts, (text, kind, trace) in enumerate(items):
        meta = Meta(GlobalTime(ts, 0), tuple(LocalTime(t, 0) for t in trace))
        tombstone = kind == 2
        made.append(
            DataItem(
                None if tombstone else text, meta, may_invalidate=kind > 0, tombstone=tombstone
            )
        )
    return made


item_lists = st.lists(
    st.tuples(
        st.lists(st.sampled_from(ALPHABET), max_size=3).map(" ".join),
        st.integers(0, 2),  # 0: plain; 1: a replayed version; 2: a tombstone (one too)
        st.lists(st.integers(0, 3), max_size=2),  # a trace from upstream
    ),
    min_size=1,
    max_size=10,
)


@settings(max_examples=examples(150), deadline=None)
@given(seed=st.integers(0, 10_000), items=item_lists, cut=st.integers(1, 10))
def test_a_batch_through_the_stage_runner_is_each_item_through_the_model(
    seed: int, items: list[tuple[str, int, list[int]]], cut: int
) -> None:
    """Same items to every sink (time, trace, payload, flags) from the stage runner on the
    whole batch, on the batch cut into pieces of ``cut`` rows, and item by item per model."""
    graph = stateless_graph(seed).build()
    made = made_items(items)
    expected = by_model(graph, made)
    assert by_stage_runner(graph, made) == expected, graph.describe()
    pieces = [by_stage_runner(graph, made[i : i + cut]) for i in range(0, len(made), cut)]
    # rows of a piece name positions within it: compare all but that
    assert sorted((row for piece in pieces for row in piece), key=repr) == expected


payload_values = st.one_of(
    st.text(max_size=3),
    st.binary(max_size=3),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.booleans(),
    st.none(),
)


@settings(max_examples=examples(200), deadline=None)
@given(payloads=st.lists(payload_values, max_size=12))
def test_mixed_payload_types_convert_as_they_would_alone(payloads: list[Any]) -> None:
    """Without input_type, a payload's Arrow type is its own Python type's, never what its
    neighbours make Arrow infer: a batch gives each payload what a batch of one gives it."""
    step = MapBatches("show", lambda a: [f"{a.type}:{v}" for v in a.to_pylist()])
    alone = [call_batch(step, [payload])[0] for payload in payloads]
    assert call_batch(step, payloads) == alone
    types = {int: "int64", float: "double", str: "string", bytes: "binary", bool: "bool"}
    for payload, shown in zip(payloads, alone, strict=True):
        assert shown.split(":")[0] == types.get(type(payload), "null")


# --- the graph API -------------------------------------------------------------------------


def test_describe_names_the_step_and_its_format() -> None:
    flow = Dataflow("lower")
    lowered = flow.map_batches("lower", flow.source("words"), pc.utf8_lower)
    lengths = flow.map_batches("len", lowered, lambda xs: [len(x) for x in xs], format="list")
    flow.sink("out", flow.map_batches("typed", lengths, pc.negate, input_type=pa.int32()))
    described = flow.build().describe()
    assert "map_batches lower format=arrow -> len" in described
    assert "map_batches len format=list -> typed" in described
    assert "map_batches typed format=arrow input_type=int32 -> out" in described
    assert run_in_order(flow, ["Spark", "FLAME"]).payloads() == [-5, -5]


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"format": "numpy"}, "format one of 'arrow', 'pandas', 'list'"),
        ({"format": "list", "input_type": pa.string()}, "no input_type with format='list'"),
        ({"input_type": "string"}, "input_type a pyarrow.DataType"),
    ],
)
def test_bad_options_fail_when_the_step_is_added(kwargs: dict[str, Any], expected: str) -> None:
    flow = Dataflow("bad")
    with pytest.raises(GraphError, match=expected) as caught:
        flow.map_batches("b", flow.source("in"), pc.utf8_lower, **kwargs)
    assert "'b'" in str(caught.value)


def test_a_function_that_is_not_callable_is_refused() -> None:
    flow = Dataflow("bad")
    with pytest.raises(GraphError, match="callable fn"):
        flow.map_batches("b", flow.source("in"), "utf8_lower")  # type: ignore[arg-type]


# --- errors ---------------------------------------------------------------------------------


def runner_of(flow: Dataflow) -> StageRunner:
    graph = flow.build()
    (stage,) = stages = plan_stages(graph)
    return StageRunner(graph, stage, keyed_entries(graph, stages))


def rows(flags: list[int], payloads: list[Any] | None = None) -> pa.RecordBatch:
    """Input rows for source ``in`` -> step ``b``, at times 10, 11 …, positions 100, 101 …"""
    payloads = payloads or [f"P{n}" for n in range(len(flags))]
    return pa.RecordBatch.from_pylist(
        [
            {
                "ts": 10 + n,
                "front": 0,
                "trace": b"",
                "flags": flag,
                "source": "in.txt",
                "position": 100 + n,
                "to": "b",
                "key": None,
                "payload": None if flag & TOMBSTONE else encode_payload(payload),
                "value": None,
            }
            for n, (flag, payload) in enumerate(zip(flags, payloads, strict=True))
        ],
        schema=ITEM_SCHEMA,
    )


def one_step(fn: Any, **kwargs: Any) -> Dataflow:
    flow = Dataflow("one")
    flow.sink("out", flow.map_batches("b", flow.source("in"), fn, **kwargs))
    return flow


def _raises(batch: Any) -> Any:
    raise ValueError("no good")


def _short(batch: Any) -> Any:
    return batch[:-1]


@pytest.mark.parametrize(
    ("fn", "problem"),
    [
        (_raises, "called once on a batch of 3 payloads\\) raised ValueError: no good"),
        (_short, "returned 2 results for a batch of 3 payloads.*put a filter after"),
        (lambda batch: {"no": "list"}, "returns a pyarrow Array, a list or a pandas Series"),
    ],
)
def test_a_failing_batch_names_the_step_its_size_and_first_item(fn: Any, problem: str) -> None:
    """The first payload the function got (a tombstone comes first and is left out) names
    the record; the batch's size counts the payloads the function got."""
    with pytest.raises(BatchStepError, match=problem) as caught:
        runner_of(one_step(fn)).run(rows([TOMBSTONE, 0, MAY_INVALIDATE, 0]))
    error = caught.value
    assert isinstance(error, StepError)
    assert (error.step_id, error.size, error.function) == ("b", 3, fn)
    assert (error.global_time, error.determinant) == (GlobalTime(11, 0), ("in.txt", 101))
    assert "step 'b'" in str(error) and "in.txt" in str(error)


def test_the_reference_runtime_raises_the_same_errors_for_a_batch_of_one() -> None:
    for fn, returned in ((_raises, None), (_short, 0)):
        with pytest.raises(BatchStepError) as caught:
            run_in_order(one_step(fn), ["a", "b"])
        error = caught.value
        assert (error.step_id, error.size, error.returned) == ("b", 1, returned)
        assert error.global_time == GlobalTime(0, 0)
        assert str(error.determinant) == "front 0 record #0"


def test_payloads_without_an_arrow_type_need_input_type_or_a_list() -> None:
    pairs = [("a", 1), ("b", 2)]
    with pytest.raises(BatchStepError, match=r"type tuple has no Arrow type.*format='list'"):
        run_in_order(one_step(pc.list_value_length), pairs)
    struct = pa.struct([("word", pa.string()), ("n", pa.int64())])
    taken = one_step(lambda a: pc.struct_field(a, "n"), input_type=struct)
    assert run_in_order(taken, [{"word": "a", "n": 1}, {"word": "b", "n": 2}]).payloads() == [1, 2]
    listed = one_step(lambda xs: [n for _, n in xs], format="list")
    assert run_in_order(listed, pairs).payloads() == [1, 2]
    runner = runner_of(one_step(lambda xs: [w for w, _ in xs], format="list"))
    assert runner.run(rows([0, 0], pairs)).column("value").to_pylist() == ["a", "b"]


# --- swaps and arrival order ------------------------------------------------------------------


def test_a_map_batches_function_can_be_swapped_and_keeps_its_format() -> None:
    flow = one_step(pc.utf8_upper)
    assert check_swappable(flow.build(), "b").kind == "map_batches"
    runtime = ReferenceRuntime(flow)
    runtime.admit(0, "ab")
    runtime.swap("b", lambda a: pc.binary_join_element_wise(a, "!", ""))
    runtime.admit(0, "cd")
    runtime.close()
    runtime.run_until_idle()
    assert [r.payload for r in runtime.released()] == ["AB", "cd!"]


def test_the_stage_runner_runs_a_swapped_batch_step_by_the_version_each_item_picks() -> None:
    """A batch mixing items below and above the swap time (rows at ts 10, 11 …): each part
    through its version in one call, in item order."""
    graph = one_step(pc.utf8_upper).build()
    runtime = ReferenceRuntime(graph)
    runtime.swap("b", arrow_suffix("!"), GlobalTime(13, 0))
    versions = runtime._versions["b"]
    runner = runner_of(one_step(pc.utf8_upper))
    runner._versions = {"b": versions}
    texts = ["ab", "c", "de", "f", "gh", "i"]
    made = runner._run(rows([0] * len(texts), texts), None).column("value").to_pylist()
    assert made == ["AB", "C", "DE", "f!", "gh!", "i!"]


def lower_words(*, batched: bool = True) -> Dataflow:
    """Word count with the words lower-cased in Arrow, the counts' text made by a list step,
    and a grouping's tuples filtered by arity (replays drop versions: tombstones) before a
    map_batches; ``batched=False``: the same with maps."""
    flow = Dataflow("batches")

    def step(name: str, up: Stream, fn: Any, per_item: Any, **kwargs: Any) -> Stream:
        if batched:
            return flow.map_batches(name, up, fn, **kwargs)
        return flow.map(name, up, per_item)

    words = flow.flat_map("split", flow.source("lines"), str.split)
    lowered = step("lower", words, pc.utf8_lower, str.lower)
    counts, pairs = flow.broadcast("both", lowered, 2)
    counted = map_reduce(flow, "count", counts, mapper=lambda w: (w, 1), reducer=_add)
    shown = step("show", counted, _shown, lambda r: _shown([r])[0], format="list")
    flow.sink("counts", shown)
    grouped = flow.grouping("pairs", pairs, window=2, key=lambda w: w[:1])
    whole = flow.filter("whole", grouped, lambda t: len(t) == 2)
    flow.sink("joined", step("join", whole, _joined, lambda t: _joined([t])[0], format="list"))
    return flow


def _add(a: int, b: int) -> int:
    return a + b


def _shown(reduced: list[Any]) -> list[str]:
    return [f"{r.key}={r.value}" for r in reduced]


def _joined(tuples: list[tuple[str, ...]]) -> list[str]:
    return ["+".join(t) for t in tuples]


lines = st.lists(st.sampled_from(["a", "B", "ab", "Ba", "c"]), max_size=4).map(" ".join)


@settings(max_examples=examples(60), deadline=None)
@given(data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_map_batches_through_groupings_is_independent_of_arrival_order(
    data: Any, seed: int
) -> None:
    """Any interleaving of several fronts, with replays and tombstones, releases what the
    in-order run releases; and that is what the same graph with maps releases."""
    from flamestream.runtime import RandomScheduler

    inputs = data.draw(front_inputs(lines))
    expected = run_in_order(lower_words(), inputs)
    script = data.draw(shuffled_scripts(inputs))
    actual = run_script(lower_words(), script, scheduler=RandomScheduler(seed))
    mapped = run_in_order(lower_words(batched=False), inputs)
    for sink in ("counts", "joined"):
        assert actual.timed(sink) == expected.timed(sink) == mapped.timed(sink)
    words = [w.lower() for items in inputs.values() for _, line in items for w in line.split()]
    assert len(expected.payloads("counts")) == len(words)
