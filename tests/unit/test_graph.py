"""Graph building and validation: Dataflow, LogicalGraph and the map_reduce composite."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flamestream.errors import GraphError
from flamestream.graph import (
    Broadcast,
    Dataflow,
    Edge,
    Filter,
    FlatMap,
    Grouping,
    LogicalGraph,
    Map,
    Merge,
    Sink,
    Source,
    map_reduce,
)


def ident(x: Any) -> Any:
    return x


def always(_: Any) -> bool:
    return True


def explode(x: Any) -> list[Any]:
    return [x, x]


def check(err: GraphError, step_id: str | None, expected: str, found: str) -> None:
    """The house style: step named, expected and found each saying the right thing."""
    assert err.step_id == step_id
    assert expected in err.expected
    assert found in err.found
    text = str(err)
    if step_id is None:
        assert text.startswith("graph: ")
    else:
        assert text.startswith(f"step {step_id!r}: ")
    assert err.expected in text
    assert err.found in text


def word_count() -> tuple[Dataflow, LogicalGraph]:
    flow = Dataflow("count")
    words = flow.source("words")
    counts = map_reduce(flow, "count", words, mapper=lambda w: (w, 1), reducer=lambda a, b: a + b)
    flow.sink("out", counts)
    return flow, flow.build()


# --- step ids ------------------------------------------------------------------------------


def test_duplicate_step_id_in_dataflow():
    flow = Dataflow()
    src = flow.source("a")
    with pytest.raises(GraphError) as info:
        flow.map("a", src, ident)
    check(info.value, "a", "unique step id", "twice")


def test_duplicate_step_id_in_logical_graph():
    steps = [Source("s"), Map("m", ident), Map("m", ident), Sink("out")]
    with pytest.raises(GraphError) as info:
        LogicalGraph(steps, [])
    check(info.value, "m", "unique step id", "twice")
    assert "rename" in info.value.hint


def test_dotted_step_id_is_rejected_for_users():
    flow = Dataflow()
    src = flow.source("s")
    with pytest.raises(GraphError) as info:
        flow.map("a.b", src, ident)
    check(info.value, "a.b", "without dots", "'a.b'")


def test_dotted_step_id_is_rejected_for_map_reduce_name():
    flow = Dataflow()
    src = flow.source("s")
    with pytest.raises(GraphError) as info:
        map_reduce(flow, "a.b", src, mapper=lambda x: (x, 1), reducer=lambda a, b: a + b)
    check(info.value, "a.b", "without dots", "'a.b'")


def test_map_reduce_inner_dotted_ids_are_allowed():
    _, graph = word_count()
    inner = [sid for sid in graph.steps if "." in sid]
    assert inner == [
        "count.map",
        "count.merge",
        "count.grouping",
        "count.filter",
        "count.reduce",
        "count.broadcast",
    ]


@pytest.mark.parametrize("bad", ["", None, 7, b"s"])
def test_empty_or_non_string_step_id(bad):
    flow = Dataflow()
    with pytest.raises(GraphError) as info:
        flow.source(bad)
    check(info.value, None, "non-empty string step id", repr(bad))


def test_empty_step_id_in_logical_graph():
    with pytest.raises(GraphError) as info:
        LogicalGraph([Source(""), Sink("out")], [Edge("", 0, "out")])
    check(info.value, None, "non-empty string step id", "''")


# --- dangling edges ------------------------------------------------------------------------


def test_logical_graph_edge_to_unknown_step():
    steps = [Source("s"), Sink("out")]
    with pytest.raises(GraphError) as info:
        LogicalGraph(steps, [Edge("s", 0, "ghost"), Edge("s", 0, "out")])
    check(info.value, "ghost", "both ends of every edge", "dangling edge s[0] -> ghost")


def test_logical_graph_edge_from_unknown_step():
    steps = [Source("s"), Sink("out")]
    with pytest.raises(GraphError) as info:
        LogicalGraph(steps, [Edge("ghost", 0, "out")])
    check(info.value, "ghost", "both ends of every edge", "dangling edge ghost[0] -> out")


def test_stream_from_another_dataflow():
    other = Dataflow("other")
    foreign = other.source("elsewhere")
    flow = Dataflow("mine")
    src = flow.source("s")
    with pytest.raises(GraphError) as info:
        flow.map("m", foreign, ident)
    # the error names the step being added, and says which foreign stream it was given
    check(info.value, "m", "a stream of this flow", "'elsewhere' of another Dataflow")
    flow.sink("m", src)  # the failed step was not added, so its id is still free
    assert flow.build().sinks == ("m",)


def test_non_stream_passed_as_input():
    flow = Dataflow()
    with pytest.raises(GraphError) as info:
        flow.map("m", "s", ident)  # type: ignore[arg-type]
    check(info.value, "m", "a stream of this flow", "str 's'")


# --- grouping window and broadcast n -------------------------------------------------------


@pytest.mark.parametrize(
    ("window", "found"),
    [(-1, "-1"), (0, "0"), (True, "True"), ("2", "'2'"), (2.0, "2.0")],
    ids=["negative", "zero", "bool", "str", "float"],
)
def test_bad_window_in_dataflow(window, found):
    flow = Dataflow()
    src = flow.source("s")
    with pytest.raises(GraphError) as info:
        flow.grouping("g", src, window=window, key=ident)
    check(info.value, "g", "window >= 1", found)
    assert info.value.found == found


def test_window_zero_in_logical_graph():
    steps = [Source("s"), Grouping("g", 0, ident), Sink("out")]
    with pytest.raises(GraphError) as info:
        LogicalGraph(steps, [Edge("s", 0, "g"), Edge("g", 0, "out")])
    check(info.value, "g", "window >= 1", "0")


def test_window_true_in_logical_graph():
    steps = [Source("s"), Grouping("g", True, ident), Sink("out")]
    with pytest.raises(GraphError) as info:
        LogicalGraph(steps, [Edge("s", 0, "g"), Edge("g", 0, "out")])
    check(info.value, "g", "window >= 1", "True")


def test_window_one_is_accepted():
    flow = Dataflow()
    flow.sink("out", flow.grouping("g", flow.source("s"), window=1, key=ident))
    assert flow.build().groupings()[0].window == 1


@pytest.mark.parametrize("n", [1, 0, -1])
def test_broadcast_fewer_than_two_copies(n):
    flow = Dataflow()
    with pytest.raises(GraphError) as info:
        flow.broadcast("b", flow.source("s"), n)
    check(info.value, "b", "n >= 2", str(n))
    with pytest.raises(GraphError) as info:
        LogicalGraph([Source("s"), Broadcast("b", n)], [Edge("s", 0, "b")])
    check(info.value, "b", "n >= 2", str(n))


# --- inputs and outputs --------------------------------------------------------------------


def test_sink_with_no_input():
    steps = [Source("s"), Sink("out"), Sink("lonely")]
    with pytest.raises(GraphError) as info:
        LogicalGraph(steps, [Edge("s", 0, "out")])
    check(info.value, "lonely", "1 input(s)", "0")
    assert "sink needs an input" in info.value.hint


def test_one_output_feeding_two_steps():
    flow = Dataflow()
    src = flow.source("s")
    flow.map("a", src, ident)
    with pytest.raises(GraphError) as info:
        flow.map("b", src, ident)
    check(info.value, "b", "no other step consumes", "'s', which already feeds 'a'")
    assert "broadcast" in info.value.hint


def test_one_output_feeding_two_steps_in_logical_graph():
    steps = [Source("s"), Sink("a"), Sink("b")]
    with pytest.raises(GraphError) as info:
        LogicalGraph(steps, [Edge("s", 0, "a"), Edge("s", 0, "b")])
    check(info.value, "s", "feed exactly one step", "both 'a' and 'b'")
    assert "broadcast" in info.value.hint


def test_output_feeding_nothing():
    flow = Dataflow()
    src = flow.source("s")
    mapped = flow.map("m", src, ident)
    flow.filter("dangling", mapped, always)
    flow.sink("out", flow.source("s2"))
    with pytest.raises(GraphError) as info:
        flow.build()
    check(info.value, "dangling", "every output to feed a step", "[0] feeding nothing")


def test_broadcast_with_one_port_unused():
    flow = Dataflow()
    first, _second = flow.broadcast("b", flow.source("s"), 2)
    flow.sink("out", first)
    with pytest.raises(GraphError) as info:
        flow.build()
    check(info.value, "b", "every output to feed a step", "[1] feeding nothing")


# --- cycles --------------------------------------------------------------------------------


def test_cycle_without_grouping_is_rejected():
    flow = Dataflow()
    merged = flow.merge("m", flow.source("s"))
    looped = flow.map("f", merged, ident)
    flow.add_merge_input(merged, looped)
    flow.sink("out", flow.source("s2"))
    with pytest.raises(GraphError) as info:
        flow.build()
    check(info.value, "m", "a grouping on every cycle", "the cycle m -> f -> m")
    assert "grouping" in info.value.hint


def test_longer_cycle_without_grouping_names_the_whole_path():
    flow = Dataflow()
    merged = flow.merge("m", flow.source("s"))
    mapped = flow.map("f", merged, ident)
    out, back = flow.broadcast("b", mapped, 2)
    flow.add_merge_input(merged, back)
    flow.sink("out", out)
    with pytest.raises(GraphError) as info:
        flow.build()
    check(info.value, "m", "a grouping on every cycle", "m -> f -> b -> m")


def test_cycle_with_grouping_is_accepted():
    _, graph = word_count()
    assert graph.producers("count.merge") == ("count.map", "count.broadcast")


# --- whole-graph checks --------------------------------------------------------------------


def test_no_source():
    with pytest.raises(GraphError) as info:
        LogicalGraph([], [])
    check(info.value, None, "at least one source", "none")


def test_no_sink():
    steps = [Source("s"), Merge("m"), Map("f", ident)]
    edges = [Edge("s", 0, "m"), Edge("m", 0, "f"), Edge("f", 0, "m")]
    with pytest.raises(GraphError) as info:
        LogicalGraph(steps, edges)
    check(info.value, None, "at least one sink", "none")


def test_step_unreachable_from_any_source():
    steps = [
        Source("s"),
        Sink("out"),
        Merge("island"),
        Grouping("g", 2, ident),
        Broadcast("b", 2),
        Sink("out2"),
    ]
    edges = [
        Edge("s", 0, "out"),
        Edge("island", 0, "g"),
        Edge("g", 0, "b"),
        Edge("b", 0, "out2"),
        Edge("b", 1, "island"),
    ]
    with pytest.raises(GraphError) as info:
        LogicalGraph(steps, edges)
    check(info.value, "island", "reachable from a source", "no path from any source")


# --- user functions ------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["map", "flat_map"])
def test_non_callable_fn(op):
    flow = Dataflow()
    with pytest.raises(GraphError) as info:
        getattr(flow, op)("f", flow.source("s"), 42)
    check(info.value, "f", "a callable fn", "int 42")


def test_non_callable_predicate():
    flow = Dataflow()
    with pytest.raises(GraphError) as info:
        flow.filter("p", flow.source("s"), "yes")
    check(info.value, "p", "a callable predicate", "str 'yes'")


def test_non_callable_key():
    flow = Dataflow()
    with pytest.raises(GraphError) as info:
        flow.grouping("g", flow.source("s"), window=2, key=None)
    check(info.value, "g", "a callable key", "NoneType")


def test_non_callable_fn_in_logical_graph():
    steps = [Source("s"), Map("m", 42), Sink("out")]
    with pytest.raises(GraphError) as info:
        LogicalGraph(steps, [Edge("s", 0, "m"), Edge("m", 0, "out")])
    check(info.value, "m", "a callable fn", "int")


def test_add_merge_input_on_non_merge_step():
    flow = Dataflow()
    mapped = flow.map("m", flow.source("s"), ident)
    with pytest.raises(GraphError) as info:
        flow.add_merge_input(mapped, flow.source("s2"))
    check(info.value, "m", "a merge step", "a map step")
    assert "only merge" in info.value.hint


# --- input counts in hand-built graphs -----------------------------------------------------


def test_map_with_two_inputs():
    steps = [Source("a"), Source("b"), Map("m", ident), Sink("out")]
    edges = [Edge("a", 0, "m"), Edge("b", 0, "m"), Edge("m", 0, "out")]
    with pytest.raises(GraphError) as info:
        LogicalGraph(steps, edges)
    check(info.value, "m", "1 input(s)", "2")
    assert "only merge" in info.value.hint


def test_source_with_an_input():
    steps = [Source("a"), Source("b"), Sink("out")]
    with pytest.raises(GraphError) as info:
        LogicalGraph(steps, [Edge("a", 0, "b"), Edge("b", 0, "out")])
    check(info.value, "b", "0 input(s)", "1")


def test_merge_with_no_input():
    steps = [Source("s"), Merge("m"), Sink("out"), Sink("out2")]
    with pytest.raises(GraphError) as info:
        LogicalGraph(steps, [Edge("s", 0, "out"), Edge("m", 0, "out2")])
    check(info.value, "m", "one or more inputs", "none")


def test_edge_from_a_port_the_step_does_not_have():
    steps = [Source("s"), Sink("out")]
    with pytest.raises(GraphError) as info:
        LogicalGraph(steps, [Edge("s", 1, "out")])
    check(info.value, "s", "output ports 0..0", "port 1 to 'out'")


def test_edge_from_a_sink():
    steps = [Source("s"), Sink("a"), Sink("b")]
    with pytest.raises(GraphError) as info:
        LogicalGraph(steps, [Edge("s", 0, "a"), Edge("a", 0, "b")])
    check(info.value, "a", "no outputs (a sink)", "port 0 to 'b'")


# --- positive: queries and describe --------------------------------------------------------


def test_describe_lists_every_step_with_kind_and_successors():
    flow = Dataflow("demo")
    src = flow.source("nums")
    evens = flow.filter("evens", src, always)
    left, right = flow.broadcast("split", evens, 2)
    flow.sink("a", flow.flat_map("twice", left, explode))
    flow.sink("b", flow.grouping("pairs", right, window=2, key=ident))
    text = flow.build().describe()
    assert text.splitlines() == [
        "graph 'demo':",
        "  source    nums -> evens",
        "  filter    evens -> split",
        "  broadcast split n=2 -> twice, pairs",
        "  flat_map  twice -> a",
        "  sink      a",
        "  grouping  pairs window=2 -> b",
        "  sink      b",
    ]


def test_map_reduce_builds_the_papers_graph():
    _, graph = word_count()
    kinds = {sid: step.kind for sid, step in graph.steps.items()}
    assert kinds == {
        "words": "source",
        "count.map": "map",
        "count.merge": "merge",
        "count.grouping": "grouping",
        "count.filter": "filter",
        "count.reduce": "map",
        "count.broadcast": "broadcast",
        "out": "sink",
    }
    chain = ["words", "count.map", "count.merge", "count.grouping", "count.filter"]
    chain += ["count.reduce", "count.broadcast"]
    for up, down in itertools.pairwise(chain):
        assert graph.consumer(up) == down
    grouping = graph.step("count.grouping")
    assert isinstance(grouping, Grouping)
    assert grouping.window == 2
    broadcast = graph.step("count.broadcast")
    assert isinstance(broadcast, Broadcast)
    assert broadcast.n == 2
    assert graph.consumer("count.broadcast", 0) == "out"
    assert graph.consumer("count.broadcast", 1) == "count.merge"
    assert graph.producers("count.merge") == ("count.map", "count.broadcast")
    assert graph.producers("out") == ("count.broadcast",)
    assert len(graph.edges) == 8


def test_logical_graph_queries():
    steps = [
        Source("a"),
        Source("b"),
        Merge("m"),
        Grouping("g", 3, ident),
        Broadcast("fan", 2),
        Filter("keep", always),
        FlatMap("spread", explode),
        Sink("out1"),
        Sink("out2"),
    ]
    edges = [
        Edge("a", 0, "m"),
        Edge("b", 0, "m"),
        Edge("m", 0, "g"),
        Edge("g", 0, "fan"),
        Edge("fan", 0, "keep"),
        Edge("fan", 1, "spread"),
        Edge("keep", 0, "out1"),
        Edge("spread", 0, "out2"),
    ]
    graph = LogicalGraph(steps, edges, name="q")
    assert graph.sources == ("a", "b")
    assert graph.sinks == ("out1", "out2")
    assert graph.groupings() == (steps[3],)
    assert graph.producers("m") == ("a", "b")
    assert graph.producers("a") == ()
    assert graph.consumer("fan", 0) == "keep"
    assert graph.consumer("fan", 1) == "spread"
    assert graph.consumer("g") == "fan"
    assert list(graph.steps) == [s.step_id for s in steps]
    assert graph.edges == tuple(edges)
    assert repr(graph) == "LogicalGraph('q', 9 steps, 8 edges)"


def test_step_lookup_of_unknown_id():
    _, graph = word_count()
    with pytest.raises(GraphError) as info:
        graph.step("nope")
    check(info.value, "nope", "a step of this graph", "no such step")


# --- property: any chain of stateless steps builds -----------------------------------------

_STATELESS = {"map": ident, "filter": always, "flat_map": explode}


@given(st.lists(st.sampled_from(sorted(_STATELESS)), min_size=1, max_size=8))
def test_any_stateless_chain_builds(kinds):
    flow = Dataflow("chain")
    stream = flow.source("src")
    for i, kind in enumerate(kinds):
        stream = getattr(flow, kind)(f"{kind}{i}", stream, _STATELESS[kind])
    flow.sink("out", stream)
    graph = flow.build()
    lines = graph.describe().splitlines()
    assert len(lines) == len(graph.steps) + 1 == len(kinds) + 3
    assert lines[0] == "graph 'chain':"
    assert [line.split()[0] for line in lines[1:]] == ["source", *kinds, "sink"]
    assert graph.sources == ("src",)
    assert graph.sinks == ("out",)


# --- regressions: bugs found while writing these tests ---------------------------------------


def test_broadcast_non_int_n_is_a_graph_error():
    flow = Dataflow()
    with pytest.raises(GraphError):
        flow.broadcast("b", flow.source("s"), "2")  # type: ignore[arg-type]


def test_add_merge_input_rejects_a_stream_of_another_flow():
    flow = Dataflow()
    merged = flow.merge("m", flow.source("s"))
    flow.sink("out", merged)
    with pytest.raises(GraphError):
        flow.add_merge_input(merged, Dataflow().source("x"))


def test_map_reduce_rejects_non_callable_mapper():
    flow = Dataflow()
    with pytest.raises(GraphError):
        map_reduce(flow, "c", flow.source("s"), mapper=None, reducer=None)  # type: ignore[arg-type]


def test_failed_add_leaves_no_half_added_step():
    flow = Dataflow()
    src = flow.source("s")
    flow.sink("a", src)
    with pytest.raises(GraphError):
        flow.map("b", src, ident)
    flow.sink("b", flow.source("s2"))  # the id "b" should still be free


@given(st.text(max_size=6), st.integers(-(10**12), 10**12))
def test_a_template_renders_as_str_format_over_the_items_fields(key, value):
    from flamestream import Reduced, Template

    item = Reduced(key, value)
    for text in ("{key}={value}", "[{value:>6}] {key!r}", "{{literal}}", ""):
        assert Template(text)(item) == text.format(key=key, value=value)


def test_a_template_with_positional_or_broken_fields_fails_while_building():
    from flamestream import Template

    for text, found in (("{}", "{} is positional"), ("{0}", "{0} is positional"), ("{", "'{'")):
        with pytest.raises(GraphError, match=re.escape(found)):
            Template(text)
    with pytest.raises(GraphError, match="found int 3"):
        Template(3)  # type: ignore[arg-type]


def test_a_template_naming_a_missing_field_fails_its_step_with_the_record():
    from flamestream import StepError, Template, count
    from flamestream.testing import run_in_order

    flow = Dataflow("t")
    counts = count(flow, "count", flow.source("words"))
    flow.sink("out", flow.map("render", counts, Template("{key}={total}")))
    with pytest.raises(StepError, match=r"render.*total"):
        run_in_order(flow, ["dog"])
