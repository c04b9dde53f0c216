"""Fronts, holds, errors and the barrier of the reference runtime."""

import pytest

from flamestream import Dataflow, GlobalTime, ScheduleError, StepError, map_reduce
from flamestream.errors import FlameStreamError
from flamestream.runtime import FrontPosition, ReferenceRuntime
from flamestream.testing import RandomScheduler, Script, run_in_order, run_script


def identity_flow(fn=lambda x: x) -> Dataflow:
    flow = Dataflow("id")
    flow.sink("out", flow.map("apply", flow.source("in"), fn))
    return flow


def pairs_flow() -> Dataflow:
    flow = Dataflow("pairs")
    flow.sink("out", flow.grouping("pairs", flow.source("in"), window=2, key=lambda x: 0))
    return flow


def test_front_stamps_increasing_ts_and_reports_the_next():
    runtime = ReferenceRuntime(identity_flow(), fronts=2)
    assert runtime.admit(0, "a") == GlobalTime(0, 0)
    assert runtime.admit(0, "b") == GlobalTime(1, 0)
    assert runtime.admit(1, "c", ts=40) == GlobalTime(40, 1)
    assert runtime.front_report(1) == 41
    runtime.report(0, 30)
    assert runtime.admit(0, "d") == GlobalTime(30, 0)


@pytest.mark.parametrize(
    ("actions", "message"),
    [
        (lambda rt: (rt.admit(0, "a", ts=5), rt.admit(0, "b", ts=5)), "strictly increase"),
        (lambda rt: (rt.report(0, 9), rt.admit(0, "b", ts=3)), "strictly increase"),
        (lambda rt: (rt.report(0, 9), rt.report(0, 4)), "went back"),
        (lambda rt: (rt.close(0), rt.admit(0, "x")), "already closed"),
        (lambda rt: rt.admit(7, "x"), "no such front"),
        (lambda rt: rt.admit(0, "x", ts="3"), "must be an int"),
    ],
)
def test_front_contract_violations_are_rejected(actions, message):
    runtime = ReferenceRuntime(identity_flow())
    with pytest.raises(ScheduleError, match=message):
        actions(runtime)


def test_front_binding_errors():
    flow = Dataflow("two")
    merged = flow.merge("m", flow.source("a"), flow.source("b"))
    flow.sink("out", merged)
    with pytest.raises(ScheduleError, match="pass a mapping"):
        ReferenceRuntime(flow, fronts=2)
    with pytest.raises(ScheduleError, match=r"\['b'\] have no front"):
        ReferenceRuntime(flow, fronts={0: "a"})
    with pytest.raises(ScheduleError, match="not a source"):
        ReferenceRuntime(flow, fronts={0: "a", 1: "m"})
    runtime = ReferenceRuntime(flow, fronts={0: "a", 1: "b"})
    runtime.admit(1, "from b")
    runtime.admit(0, "from a")
    runtime.close()
    runtime.run_until_idle()
    assert [r.payload for r in runtime.released()] == ["from a", "from b"]


def test_sink_waits_while_anything_of_an_earlier_time_is_in_flight():
    runtime = ReferenceRuntime(pairs_flow(), fronts=2)
    runtime.hold(front=0)
    runtime.admit(0, "slow", ts=1)
    runtime.admit(1, "fast", ts=2)
    runtime.close()
    runtime.run_until_idle()
    # "fast" reached the sink, but "slow" (earlier) is held in flight: nothing is released
    assert runtime.barrier().pending() == 1
    assert runtime.released() == []
    assert runtime.min_time == GlobalTime(1, 0)
    runtime.release_holds()
    runtime.run_until_idle()
    assert [r.payload for r in runtime.released()] == [("slow",), ("slow", "fast")]


def test_invalid_tuple_emitted_before_the_late_item_is_never_released():
    script = (
        Script()
        .hold(front=0)
        .admit(0, "early", ts=1)
        .admit(1, "late-stamped", ts=2)
        .deliver()
        .release_holds()
    )
    result = run_script(pairs_flow(), script, record=True)
    sink_items = [d.item.payload for d in result.runtime.log if d.step == "out"]
    assert ("late-stamped",) in sink_items  # emitted before "early" arrived
    assert result.payloads() == [("early",), ("early", "late-stamped")]
    assert result.stats.replayed == 1
    assert result.stats.invalidated == 1


def test_user_function_error_names_step_and_determinant():
    def explode(x):
        if x == "bad":
            raise ValueError("cannot digest")
        return x

    runtime = ReferenceRuntime(identity_flow(explode))
    runtime.admit(0, "good")
    runtime.admit(0, "bad")
    with pytest.raises(StepError) as caught:
        runtime.run_until_idle()
    error = caught.value
    assert error.step_id == "apply"
    assert error.determinant == FrontPosition(0, 1)
    assert error.global_time == GlobalTime(1, 0)
    assert "step 'apply'" in str(error)
    assert "explode" in str(error)
    assert "front 0 record #1" in str(error)
    assert isinstance(error.__cause__, ValueError)
    with pytest.raises(FlameStreamError, match="stopped after an error"):
        runtime.admit(0, "more")


def test_custom_determinant_and_grouping_key_errors():
    flow = Dataflow("keys")
    flow.sink("out", flow.grouping("by_len", flow.source("in"), window=2, key=len))
    runtime = ReferenceRuntime(flow)
    runtime.admit(0, 42, determinant=("topic", 3, 1017))
    with pytest.raises(StepError, match=r"by_len.*\('topic', 3, 1017\)"):
        runtime.run_until_idle()


def test_a_cycle_that_never_quiesces_is_reported():
    flow = Dataflow("forever")
    merged = flow.merge("m", flow.source("in"))
    grouped = flow.grouping("g", merged, window=1, key=lambda x: 0)
    out, back = flow.broadcast("b", flow.map("unwrap", grouped, lambda t: t[0]), 2)
    flow.add_merge_input(merged, back)
    flow.sink("out", out)
    runtime = ReferenceRuntime(flow)
    runtime.admit(0, "x")
    with pytest.raises(ScheduleError, match="circulate forever"):
        runtime.run_until_idle(max_deliveries=500)


def test_several_sinks_release_separately():
    flow = Dataflow("two_sinks")
    a, b = flow.broadcast("copy", flow.source("in"), 2)
    flow.sink("left", a)
    flow.sink("right", flow.map("double", b, lambda x: 2 * x))
    result = run_in_order(flow, [1, 2])
    assert result.payloads("left") == [1, 2]
    assert result.payloads("right") == [2, 4]
    with pytest.raises(FlameStreamError, match="name one"):
        result.payloads()


def test_random_runs_are_reproducible_by_seed():
    flow = Dataflow("wc")
    words = flow.flat_map("split", flow.source("in"), str.split)
    flow.sink("out", map_reduce(flow, "c", words, mapper=lambda w: (w, 1), reducer=int.__add__))
    script = Script()
    for i, line in enumerate(["a b a", "b", "a c", "c c"]):
        script.admit(i % 2, line, ts=[5, 2, 9, 3][i]).deliver(1)
    runs = [run_script(flow, script, scheduler=RandomScheduler(11), record=True) for _ in range(2)]
    assert [d.step for d in runs[0].runtime.log] == [d.step for d in runs[1].runtime.log]
    assert runs[0].stats == runs[1].stats


def test_released_traces_are_the_same_whatever_the_delivery_order():
    """A record repeating a key: its items reach one bucket in an order the scheduler picks,
    so the grouping's logical times (replays counted) differ from run to run; the released
    rows, traces included (lineages), do not."""
    flow = Dataflow("wordcount")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    flow.sink("out", map_reduce(flow, "count", words, mapper=lambda w: (w, 1), reducer=int.__add__))
    lines = ["a a b a", "b a b", "a"]
    oracle = run_in_order(flow, lines)
    metas = {tuple(r.meta for r in oracle.released())}
    for seed in range(12):
        script = Script()
        for ts, line in enumerate(lines):
            script.admit(0, line, ts=ts).deliver(seed % 4)
        shuffled = run_script(flow, script, scheduler=RandomScheduler(seed))
        assert shuffled.rows() == oracle.rows()
        metas.add(tuple(r.meta for r in shuffled.released()))
    assert len(metas) > 1  # the items' own traces did differ
    assert all(local.logical == 0 for _, trace, _ in oracle.rows() for local in trace)


@pytest.mark.parametrize("total_key", [None, "all"])
def test_a_map_reduce_keyed_none_after_another_folds_every_sibling(total_key):
    """A second map_reduce keyed by None (one sum over everything, as ``sum_estimates``
    without a key) sees the first one's siblings replayed through its cycle: each sum holds
    every word's latest count, as with any other key."""
    flow = Dataflow("totals")
    words = flow.flat_map("split", flow.source("text"), str.split)
    counts = map_reduce(flow, "count", words, mapper=lambda w: (w[0], 1), reducer=int.__add__)
    totals = map_reduce(
        flow,
        "total",
        counts,
        mapper=lambda r: (total_key, (r.key, r.value)),
        reducer=lambda seen, kv: {**seen, kv[0]: kv[1]},
        initial=lambda kv: {kv[0]: kv[1]},
    )
    flow.sink("out", totals)
    result = run_in_order(flow, {0: [(0, "a1 b1"), (5, "a2 a3 a4"), (9, "b2")]})
    assert [r.value for r in result.payloads()] == [
        {"a": 1},
        {"a": 1, "b": 1},
        {"a": 2, "b": 1},
        {"a": 3, "b": 1},
        {"a": 4, "b": 1},
        {"a": 4, "b": 2},
    ]
