"""The switch's rule: every live position is read once, from the history or live, or is a gap."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from flamestream.spark.connector.boundary import (
    LISTED_GAPS,
    FoundPositions,
    Held,
    holes,
    position_switch,
    time_switch,
)

#: per source: the positions the history holds, and the live source's earliest and end
sources = st.dictionaries(
    st.sampled_from(["t-0", "t-1", "t-2", "t-3"]),
    st.tuples(
        st.lists(st.integers(0, 60), max_size=30),
        st.integers(0, 50),
        st.integers(0, 80),
    ),
    min_size=1,
)


def held_of(positions: list[int], name: str, chunk: int = 7) -> Held:
    found = FoundPositions()
    for i in range(0, len(positions), chunk):
        found.add(np.array(positions[i : i + chunk]))
    return Held.of(name, found, counted=True)


@given(sources)
def test_every_position_is_in_the_history_live_or_a_gap_exactly_once(
    case: dict[str, tuple[list[int], int, int]],
):
    held = {n: held_of(p, n) for n, (p, _, _) in case.items() if p}
    live = {n: n for n in case}
    earliest = {n: e for n, (_, e, _) in case.items()}
    switch = position_switch(
        {n: Held.from_json(h.to_json()) for n, h in held.items()},  # as the offset keeps it
        live,
        lambda key, position: position + 1,
        earliest.__getitem__,
        counted=True,
    )
    for name, (positions, first, end) in case.items():
        start = switch.starts[name]
        gaps = [g for g in switch.gaps if g.source == name]
        in_gaps = {p for g in gaps for p in range(g.first, g.last + 1)}
        history = set(positions)
        live_read = set(range(start, max(start, end)))
        assert not history & live_read  # nothing admitted twice
        assert not in_gaps & (history | live_read)
        assert start >= first  # live never seeks below what it still has
        if positions:
            # from the history's smallest on, every position up to the live end is read or a
            # gap (if the listing is whole)
            span = set(range(min(positions), max(end, max(positions) + 1)))
            if len([g for g in gaps if g.where == "inside"]) < LISTED_GAPS:
                assert span <= history | live_read | in_gaps
            assert start == max(max(positions) + 1, first)
        else:
            assert start == first and not gaps
    assert switch.gap_positions >= sum(g.size for g in switch.gaps)


def test_holes_are_the_runs_missing_inside():
    found = holes("s", np.array([3, 4, 7, 8, 12]))
    assert [(g.first, g.last) for g in found] == [(5, 6), (9, 11)]
    assert holes("s", np.array([5])) == []


def test_the_distinct_positions_are_sorted_without_repeats():
    found = FoundPositions()
    found.add(np.array([5, 3, 3]))
    found.add(np.array([9, 5]))
    found.add(np.array([], dtype=np.int64))
    assert found.distinct().tolist() == [3, 5, 9] and found.top == 9


def test_uncounted_positions_list_no_holes_and_a_time_cut_seeks_where_it_can():
    found = FoundPositions()
    found.add(np.array([0, 10, 40]))
    assert Held.of("f", found, counted=False).holes == ()
    switch = time_switch(["a", "b"], {"a": 7, "b": None}.__getitem__, {"a": 9, "b": 2}.__getitem__)
    assert switch.starts == {"a": 9, "b": 2}
    assert switch.derived["b"][0].startswith("earliest")
