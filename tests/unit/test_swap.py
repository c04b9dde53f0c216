"""Function swaps on the reference runtime: the piecewise contract, refusals, errors.

A swap ``(step, fn, at)`` is input: items below ``at`` go through the old function, items at
or above it through ``fn``. The oracle for the piecewise definition is the same graph whose
payloads carry their own global time, with a function that picks old or new by it.
"""

from __future__ import annotations

import json
from itertools import accumulate, count
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flamestream import Dataflow, GlobalTime, map_reduce
from flamestream.errors import ConfigError, StepError, SwapError
from flamestream.model import DataItem, Meta
from flamestream.runtime import RandomScheduler, ReferenceRuntime
from flamestream.runtime.swaps import check_swappable, swappable_steps
from flamestream.spark.control.channels import ControlReader
from flamestream.spark.control.handle import QueryControl
from flamestream.spark.control.swaps import SWAPS, SwapRaised, SwapReader
from flamestream.spark.durable import QueryCheckpoint
from flamestream.spark.durable.functions import (
    FunctionStore,
    Withdrawals,
    pickled,
    record_steps,
)
from flamestream.spark.exec.general.items import ITEM_SCHEMA, decode_trace, encode_payload
from flamestream.spark.exec.general.stateless import StageRunner
from flamestream.spark.plan.stages import keyed_entries, plan_stages
from flamestream.testing import Script, run_in_order, run_script

from ..examples import examples
from ..random_graphs import ALPHABET, split_on, suffix, weight_filter
from .test_stage_runner import by_model, stateless_graph

PROPERTY = settings(
    max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def old_map(x: int) -> int:
    return x + 1


def new_map(x: int) -> int:
    return 10 * x


def old_split(x: int) -> list[int]:
    return [x]


def new_split(x: int) -> list[int]:
    return [x, -x] if x % 2 else []


def keep_all(x: int) -> bool:
    return True


def keep_even(x: int) -> bool:
    return x % 2 == 0


def graph(m: Any = old_map, f: Any = old_split, p: Any = keep_all) -> Any:
    """source -> map m -> flat_map f -> filter p -> grouping(2, mod 3) -> sink."""
    flow = Dataflow("swapped")
    up = flow.map("m", flow.source("in"), m)
    up = flow.flat_map("f", up, f)
    up = flow.filter("p", up, p)
    flow.sink("out", flow.grouping("g", up, window=2, key=lambda x: abs(x) % 3))
    return flow


def piecewise(old: Any, new: Any, at: GlobalTime) -> Any:
    """``old`` below ``at``, ``new`` from it on, for payloads tagged ``(ts, front, x)``."""

    def pick(tagged: tuple[int, int, Any]) -> Any:
        ts, front, x = tagged
        return (new if GlobalTime(ts, front) >= at else old)(x)

    return pick


def tagged_graph(step: str, old: Any, new: Any, at: GlobalTime) -> Any:
    """The graph with ``step`` applying old/new by the tagged global time (the oracle)."""
    flow = Dataflow("oracle")
    up = flow.map("tag", flow.source("in"), lambda t: t)
    fns = {"m": old_map, "f": old_split, "p": keep_all}

    def untag(fn: Any, name: str) -> Any:
        if name == step:
            return piecewise(old, new, at)
        return lambda t: fn(t[2])

    # map: (ts, front, x) -> (ts, front, m(x)); flat_map keeps the tag on each child
    m = untag(fns["m"], "m")
    up = flow.map("m", up, lambda t: (t[0], t[1], m(t)))
    f = untag(fns["f"], "f")
    up = flow.flat_map("f", up, lambda t: [(t[0], t[1], c) for c in f(t)])
    p = untag(fns["p"], "p")
    up = flow.filter("p", up, p)
    up = flow.map("x", up, lambda t: t[2])
    flow.sink("out", flow.grouping("g", up, window=2, key=lambda x: abs(x) % 3))
    return flow


@st.composite
def front_inputs(draw: Any) -> dict[int, list[tuple[int, int]]]:
    inputs = {}
    for front in range(draw(st.integers(1, 3))):
        stamps = list(accumulate(draw(st.lists(st.integers(1, 4), max_size=8))))
        inputs[front] = [(ts, draw(st.integers(-5, 9))) for ts in stamps]
    return inputs


PAIRS = {"m": (old_map, new_map), "f": (old_split, new_split), "p": (keep_all, keep_even)}


def timed(result: Any) -> list[tuple[GlobalTime, Any]]:
    """Global time and payload: what a graph of another shape releases alike."""
    return [(r.global_time, r.payload) for r in result.released()]


def rows(result: Any) -> list[tuple[GlobalTime, Any, Any]]:
    """Every released column: global time, released trace, payload (one graph's runs)."""
    return [(r.global_time, r.trace, r.payload) for r in result.released()]


@PROPERTY
@given(
    inputs=front_inputs(),
    step=st.sampled_from(sorted(PAIRS)),
    at=st.tuples(st.integers(0, 35), st.integers(0, 3)),
)
def test_output_is_the_piecewise_definition(inputs: Any, step: str, at: Any) -> None:
    old, new = PAIRS[step]
    at = GlobalTime(*at)
    swapped = run_in_order(graph(), inputs, swaps=[(step, new, at)])
    tagged = {f: [(ts, (ts, f, x)) for ts, x in items] for f, items in inputs.items()}
    oracle = run_in_order(tagged_graph(step, old, new, at), tagged)
    assert timed(swapped) == timed(oracle)


@PROPERTY
@given(inputs=front_inputs(), step=st.sampled_from(sorted(PAIRS)))
def test_swap_above_every_input_changes_nothing_below_every_input_is_the_new_graph(
    inputs: Any, step: str
) -> None:
    _, new = PAIRS[step]
    after = run_in_order(graph(), inputs, swaps=[(step, new, GlobalTime(10**6, 0))])
    assert rows(after) == rows(run_in_order(graph(), inputs))
    before = run_in_order(graph(), inputs, swaps=[(step, new, GlobalTime(0, 0))])
    built = {"m": graph(m=new), "f": graph(f=new), "p": graph(p=new)}[step]
    assert rows(before) == rows(run_in_order(built, inputs))


@PROPERTY
@given(
    values=st.lists(st.integers(0, 9), min_size=1, max_size=12),
    cut=st.integers(0, 12),
    seed=st.integers(0, 1000),
)
def test_swap_mid_run_at_the_frontier_under_any_delivery_order(
    values: list[int], cut: int, seed: int
) -> None:
    """A swap between admissions takes effect after them, whatever is still in flight."""
    script = Script()
    for ts, x in enumerate(values[:cut]):
        script.admit(0, x, ts=ts).deliver(seed % 3)
    script.swap("m", new_map)
    for ts, x in enumerate(values[cut:], start=min(cut, len(values))):
        script.admit(0, x, ts=ts).deliver(seed % 2)
    result = run_script(graph(), script, scheduler=RandomScheduler(seed))
    at = GlobalTime(min(cut, len(values)), 0)
    oracle = run_in_order(graph(), list(values), swaps=[("m", new_map, at)])
    assert rows(result) == rows(oracle)


def test_grouping_state_carries_over_the_swap() -> None:
    """The grouping after the swapped map still holds what came before: tuples mix both."""
    flow = Dataflow("carry")
    up = flow.map("m", flow.source("in"), old_map)
    flow.sink("out", flow.grouping("g", up, window=2, key=lambda x: 0))
    runtime = ReferenceRuntime(flow)
    runtime.admit(0, 1)
    runtime.admit(0, 2)
    runtime.run_until_idle()
    assert runtime.swap("m", new_map) == GlobalTime(2, 0)
    runtime.admit(0, 3)
    runtime.close()
    runtime.run_until_idle()
    assert [r.payload for r in runtime.released()] == [(2,), (2, 3), (3, 30)]


@pytest.mark.parametrize(
    ("step", "fn", "found"),
    [
        ("nope", new_map, "no such step"),
        ("g", lambda x: 1, "a grouping"),
        ("in", new_map, "a source"),
        ("out", new_map, "a sink"),
        ("m", 42, "int 42"),
    ],
)
def test_refused_swaps_name_the_step_and_change_nothing(step: str, fn: Any, found: str) -> None:
    runtime = ReferenceRuntime(graph())
    runtime.admit(0, 1)
    with pytest.raises(SwapError, match=f"step '{step}'.*{found}") as raised:
        runtime.swap(step, fn)
    assert raised.value.step_id == step
    assert "Hint" in str(raised.value) or found in {"a source", "a sink"}
    runtime.admit(0, 2)
    runtime.close()
    runtime.run_until_idle()
    assert [r.payload for r in runtime.released()] == [(2,), (3,)]


def test_map_reduce_own_steps_are_refused_and_the_map_before_is_swappable() -> None:
    flow = Dataflow("wc")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    flow.sink("out", map_reduce(flow, "count", words, mapper=lambda w: (w, 1), reducer=int.__add__))
    graph_ = flow.build()
    assert swappable_steps(graph_) == ["split"]
    internal = [sid for sid in graph_.steps if sid.startswith("count") and sid != "count"]
    for sid in internal:
        kind = graph_.step(sid).kind
        if kind in {"map", "filter"}:
            with pytest.raises(SwapError, match="map_reduce's own steps"):
                check_swappable(graph_, sid)


def test_a_raising_swapped_function_names_the_step_the_new_function_and_the_item() -> None:
    def explode(x: int) -> int:
        raise ValueError(f"no {x}")

    runtime = ReferenceRuntime(graph())
    runtime.admit(0, 1)
    runtime.swap("m", explode)
    runtime.admit(0, 2)
    with pytest.raises(StepError, match=r"step 'm': function .*explode raised ValueError") as e:
        runtime.run_until_idle()
    assert e.value.global_time == GlobalTime(1, 0)
    assert str(e.value.determinant) == "front 0 record #1"


def test_script_swap_action_at_an_explicit_time() -> None:
    script = Script().swap("p", keep_even, GlobalTime(2, 0))
    for ts in range(4):
        script.admit(0, ts, ts=ts)
    got = [r.payload for r in run_script(graph(), script).released()]
    # m: x+1, f: [x], p: keep_all below ts 2 (items 1, 2), keep_even from it (4 kept, 3 not)
    assert got == [(1,), (2,), (1, 4)]


# --- the Spark runtime's stage runner with swaps from an offset log (no Spark) -------------

NEW_FUNCTIONS = {
    "map": suffix("!"),
    "flat_map": split_on("b"),
    "filter": weight_filter(2, 1),
}


#: Batch ids for the examples below.
BATCHES = count()


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("swap-checkpoint")


def log_swaps(checkpoint: Path, batch: int, swaps: list[tuple[str, Any, GlobalTime]]) -> None:
    """Write batch ``batch``'s offset log line of the control channel, functions stored."""
    store = FunctionStore(QueryCheckpoint(str(checkpoint)).graph_url)
    recorded = [
        {"step": step, "at": list(at), "fn": store.put(pickled(step, fn))} for step, fn, at in swaps
    ]
    control = {"flamestreamLayout": 1, "partitions": 1, "assignment": [0], SWAPS: recorded}
    (checkpoint / "offsets").mkdir(exist_ok=True)
    (checkpoint / "offsets" / str(batch)).write_text(f"v1\n{{}}\n{json.dumps(control)}\n")


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    texts=st.lists(st.lists(st.sampled_from(ALPHABET), max_size=3).map(" ".join), max_size=8),
    at=st.integers(0, 8),
    pick=st.integers(0, 100),
)
def test_stage_runner_runs_each_item_with_the_version_its_time_picks(
    checkpoint: Path, seed: int, texts: list[str], at: int, pick: int
) -> None:
    """Random stateless graphs, one step swapped at a random time: a batch mixing items below
    and above it gives what the model gives with the same swap (StageRunner vs reference)."""
    graph = stateless_graph(seed).build()
    candidates = swappable_steps(graph)
    if not candidates:
        return
    step = candidates[pick % len(candidates)]
    fn = NEW_FUNCTIONS[graph.step(step).kind]
    batch = next(BATCHES)  # a batch's offsets are written once: one batch per example
    log_swaps(checkpoint, batch, [(step, fn, GlobalTime(at, 0))])
    items = [DataItem(t, Meta(GlobalTime(ts, 0), ())) for ts, t in enumerate(texts)]
    stages = plan_stages(graph)
    (stage,) = stages
    runner = StageRunner(graph, stage, keyed_entries(graph, stages))
    runner._versions = SwapReader(str(checkpoint)).versions(batch, runner.steps)
    rows = [
        {
            "ts": ts,
            "front": 0,
            "trace": b"",
            "flags": 0,
            "source": "in",
            "position": ts,
            "to": graph.consumer("lines"),
            "key": None,
            "payload": encode_payload(t),
            "value": None,
        }
        for ts, t in enumerate(texts)
    ]
    made = runner._run(pa.RecordBatch.from_pylist(rows, schema=ITEM_SCHEMA), None).to_pylist()
    got = sorted(
        (
            (r["to"], r["ts"], r["front"], decode_trace(r["trace"]), r["value"], r["flags"])
            for r in made
        ),
        key=repr,
    )
    runtime_graph = ReferenceRuntime(graph)
    runtime_graph.swap(step, fn, GlobalTime(at, 0))
    versions = runtime_graph._versions[step]
    want = by_model(graph, items, swapped={step: versions})
    assert got == want


# --- the control channel's reader: requests in, swaps recorded in its end offset ------------

FRONT_OFFSET = {
    "flamestream": 2,
    "front": "files",
    "seq": 1,
    "idBase": 0,
    "clock": "logical",
    "base": 0,
    "horizon": 22,
    "fronts": [["file:///in/a.txt", 0, 17, 17], ["file:///in/b.txt", 1, 9, 31]],
    "firstSeen": [],
}


def undecided(offset: dict[str, Any]) -> dict[str, Any]:
    """``offset`` as the next batch has it when that batch's planning decides nothing."""
    why = {"reason", "requests", "moved", "movedBytes", "cluster"}
    return {k: v for k, v in offset.items() if k not in why}


def test_the_control_reader_records_each_swap_at_the_newest_fronts_next_ts(tmp_path: Path):
    checkpoint = str(tmp_path)
    state = QueryCheckpoint(checkpoint).graph_url
    record_steps(state, graph().build(), swappable=True)
    reader = ControlReader(checkpoint, 1)
    start = reader.initialOffset()
    assert reader.latestOffset(start) == start  # nothing asked: nothing changes
    control = QueryControl(checkpoint)
    control.swap("m", new_map)  # no batch logged yet: from the very start
    first = reader.latestOffset(start)
    assert first[SWAPS][0]["at"] == [0, 0] and first["consumed"]
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "0").write_text(f"v1\n{{}}\n{json.dumps(FRONT_OFFSET)}\n")
    control.submit("rescale", {"partitions": 3})  # another kind: its own handler refuses it
    control.swap("p", keep_even)
    second = reader.latestOffset(first)
    assert [s["step"] for s in second[SWAPS]] == ["m", "p"]
    assert second[SWAPS][1]["at"] == [31, 0]  # the largest next ts of the logged fronts
    assert second[SWAPS][0] == first[SWAPS][0]  # the swaps in force stay, in order
    # consumed once: the next batch decides nothing, its offset keeps the swaps, not the why
    assert reader.latestOffset(second) == undecided(second)
    assert FunctionStore(state).load(second[SWAPS][1]["fn"])(4) is True


def test_swaps_are_checked_against_the_recorded_graph(tmp_path: Path):
    state = QueryCheckpoint(str(tmp_path)).graph_url
    record_steps(state, graph().build(), swappable=False)
    with pytest.raises(SwapError, match=r"swappable=True"):
        QueryControl(str(tmp_path)).swap("m", new_map)
    with pytest.raises(ConfigError, match="swappable"):
        record_steps(state, graph().build(), swappable=True)  # fixed per checkpoint
    assert QueryControl(str(tmp_path)).requests() == []


def zero_is_an_error(x: int) -> int:
    return 10 // x


def test_a_raising_swapped_function_withdraws_its_swap_from_that_batch_on(tmp_path: Path):
    """The batch the function raised in, and every later one, run the function from before
    the swap; an earlier batch (committed) keeps it; the planner drops it from those in force."""
    checkpoint = str(tmp_path)
    state = QueryCheckpoint(checkpoint).graph_url
    record_steps(state, graph().build(), swappable=True)
    at = GlobalTime(5, 0)
    for batch in (3, 4, 5):
        log_swaps(tmp_path, batch, [("m", zero_is_an_error, at)])
    steps = list(graph().build().steps.values())
    (swapped,) = SwapReader(checkpoint).versions(4, steps).values()
    assert swapped.at(at).fn(5) == 2  # the swap's function, guarded
    with pytest.raises(SwapRaised, match="withdrawn from batch 4 on") as raised:
        swapped.at(at).fn(0)
    assert isinstance(raised.value.cause, ZeroDivisionError)
    (withdrawal,) = Withdrawals(state).read().values()
    assert withdrawal["batch"] == 4 and "ZeroDivisionError" in withdrawal["error"]
    assert SwapReader(checkpoint).versions(4, steps) == {}  # the failed batch's next run
    assert SwapReader(checkpoint).versions(5, steps) == {}
    assert SwapReader(checkpoint).versions(3, steps)["m"].at(at).fn(5) == 2
    # the planner: the swap leaves the list in force, and the offset says why
    reader = ControlReader(checkpoint, 1)
    start = reader.initialOffset()
    start[SWAPS] = json.loads((tmp_path / "offsets" / "5").read_text().splitlines()[2])[SWAPS]
    planned = reader.latestOffset(start)
    assert planned[SWAPS] == []
    assert "withdrawn: its function raised in batch 4 (ZeroDivisionError" in planned["reason"]
    assert reader.latestOffset(planned) == undecided(planned)  # withdrawn once


def test_an_old_function_raising_is_reported_and_withdraws_nothing(tmp_path: Path):
    checkpoint = str(tmp_path)
    record_steps(QueryCheckpoint(checkpoint).graph_url, graph().build(), swappable=True)
    log_swaps(tmp_path, 0, [("m", new_map, GlobalTime(9, 0))])
    steps = list(graph(m=zero_is_an_error).build().steps.values())
    versions = SwapReader(checkpoint).versions(0, steps)["m"]
    with pytest.raises(ZeroDivisionError):
        versions.at(GlobalTime(0, 0)).fn(0)  # the graph's own step: not guarded
    assert Withdrawals(QueryCheckpoint(checkpoint).graph_url).read() == {}


# --- a keyed stage whose cycle holds the swapped step (KeyedRunner, no Spark) ---------------


def countdown(m: Any) -> Dataflow:
    """merge -> grouping(1, one key) -> map m -> filter (> 0) -> broadcast: out, and round."""
    flow = Dataflow("countdown")
    loop = flow.merge("in", flow.source("n"))
    grouped = flow.grouping("g", loop, window=1, key=lambda x: 0)
    kept = flow.filter("f", flow.map("m", grouped, m), lambda x: x > 0)
    out, back = flow.broadcast("b", kept, 2)
    flow.add_merge_input(loop, back)
    flow.sink("out", out)
    return flow


def minus_one(t: tuple[int]) -> int:
    return t[0] - 1


def minus_two(t: tuple[int]) -> int:
    return t[0] - 2


@settings(max_examples=examples(25), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(values=st.lists(st.integers(1, 6), min_size=1, max_size=6), at=st.integers(0, 6))
def test_keyed_runner_runs_a_swapped_step_of_its_cycle_by_each_items_time(
    checkpoint: Path, values: list[int], at: int
) -> None:
    """Round the cycle an item keeps its global time, so its version too."""
    from flamestream.runtime.grouping import GroupingState
    from flamestream.spark.apply import SparkGraph
    from flamestream.spark.exec.general.items import encode_key
    from flamestream.spark.exec.general.keyed import KeyedRunner

    flow = countdown(minus_one)
    graph = SparkGraph(flow)
    (stage,) = [s for s in graph.stages if s.grouping]
    assert "m" in stage.steps
    batch = next(BATCHES)
    log_swaps(checkpoint, batch, [("m", minus_two, GlobalTime(at, 0))])
    keyed = KeyedRunner(graph.graph, stage, graph.keys, graph.render)
    keyed._versions = SwapReader(str(checkpoint)).versions(batch, keyed.steps.values())
    assert set(keyed._versions) == {"m"}
    rows = [
        {
            "ts": ts,
            "front": 0,
            "trace": b"",
            "flags": 0,
            "source": "n",
            "position": ts,
            "to": "in",
            "key": encode_key(0),
            "payload": encode_payload(v),
            "value": None,
        }
        for ts, v in enumerate(values)
    ]
    g = graph.graph.step("g")
    state = GroupingState("g", 1, g.key)
    made = keyed._run(pa.Table.from_pylist(rows, schema=ITEM_SCHEMA), state).to_pylist()
    # what leaves the stage for the sink (rendered as text) against the reference's release
    got = sorted((r["ts"], r["front"], r["value"]) for r in made if r["to"] == "out")
    want = run_in_order(flow, values, swaps=[("m", minus_two, GlobalTime(at, 0))])
    assert got == sorted((t.ts, t.front, str(p)) for t, p in want.timed())


def test_describe_says_swapped_stages_run_the_general_way_and_fronts_send_no_blocks():
    from flamestream.graph.mapreduce import count
    from flamestream.spark.apply import SparkGraph

    flow = Dataflow("wc")
    flow.sink("out", count(flow, "count", flow.flat_map("split", flow.source("l"), str.split)))
    fixed, swappable = SparkGraph(flow), SparkGraph(flow, swappable=True)
    assert "in blocks" in fixed.describe() and "swappable" not in fixed.describe()
    assert "in blocks" not in swappable.describe()
    assert "swappable: a batch with swapped steps runs their stages the general way" in (
        swappable.describe()
    )
