"""The paper's Figure 3: word count on two consecutive "dog" items, stage by stage."""

from flamestream import Dataflow, Mapped, Reduced, map_reduce
from flamestream.testing import run_in_order


def word_count_flow() -> Dataflow:
    flow = Dataflow("wordcount")
    words = flow.source("words")
    counts = map_reduce(flow, "count", words, mapper=lambda w: (w, 1), reducer=lambda a, b: a + b)
    flow.sink("out", counts)
    return flow


def test_four_stages_of_the_word_count_walkthrough():
    result = run_in_order(word_count_flow(), ["dog", "dog"], record=True)
    log = result.runtime.log
    m1, m2 = Mapped("dog", 1), Mapped("dog", 1)
    r1, r2 = Reduced("dog", 1), Reduced("dog", 2)

    grouping = [d for d in log if d.step == "count.grouping"]
    tuples = [out.payload for d in grouping for _, out in d.outputs]
    # (1) m1 alone; (2) r1 joins m1; (3) m2 lands after r1; (4) r2 joins m2
    assert tuples == [(m1,), (m1, r1), (r1, m2), (m2, r2)]
    assert [d.item.payload for d in grouping] == [m1, r1, m2, r2]

    filtered = [d for d in log if d.step == "count.filter"]
    assert [bool(d.outputs) for d in filtered] == [True, False, True, False]

    reduced = [out.payload for d in log if d.step == "count.reduce" for _, out in d.outputs]
    assert reduced == [r1, r2]
    assert result.payloads() == [r1, r2]
    # the reduced item keeps the global time of the mapped item that caused it
    assert [r.global_time.ts for r in result.released()] == [0, 1]
    # in order, nothing is replayed or invalidated
    assert result.stats.replayed == 0
    assert result.stats.invalidated == 0


def test_reduced_item_sorts_between_its_mapped_item_and_the_next():
    result = run_in_order(word_count_flow(), ["dog", "dog"], record=True)
    bucket = result.runtime.grouping("count.grouping").bucket("dog")
    # GC below the min-time keeps window - 1 = 1 entry: the latest reduced item
    assert [i.payload for i in bucket] == [Reduced("dog", 2)]


def test_each_input_yields_the_updated_value_for_its_key():
    words = ["the", "cat", "and", "the", "dog", "and", "the", "bird"]
    result = run_in_order(word_count_flow(), words)
    running: dict[str, int] = {}
    expected = []
    for word in words:
        running[word] = running.get(word, 0) + 1
        expected.append(Reduced(word, running[word]))
    assert result.payloads() == expected


def test_mapped_and_reduced_behave_as_the_frozen_dataclasses_they_are():
    """Their own ``__init__`` and ``__repr__`` (faster) make and print what the dataclass'
    would: ``repr`` is the default render of released items, on every runtime."""
    import dataclasses
    import pickle

    import pytest

    from flamestream.graph.mapreduce import Mapped, Reduced

    for kind in (Mapped, Reduced):
        item = kind("w", [1, "x"])
        assert repr(item) == f"{kind.__name__}(key='w', value=[1, 'x'])"
        assert item == kind(key="w", value=[1, "x"]) and item != kind("w", [1])
        assert pickle.loads(pickle.dumps(item)) == item  # noqa: S301
        assert dataclasses.astuple(item) == ("w", [1, "x"])
        assert hash(kind("w", 1)) == hash(kind("w", 1))
        with pytest.raises(dataclasses.FrozenInstanceError):
            item.key = "v"  # type: ignore[misc]
