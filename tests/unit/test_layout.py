"""Elastic layouts: slots, routes, the split/merge policy, and moving grouping state."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from flamestream.graph.steps import Grouping
from flamestream.runtime import GroupingState
from flamestream.spark.control.key_layout import (
    EVEN,
    MIN_ITEMS,
    SKEW,
    SLOTS_PER_PARTITION,
    Layout,
    plan_layout,
    routes,
    slot_of,
)
from flamestream.spark.durable.slots import SlotLoads
from flamestream.spark.exec.general.items import encode_key
from flamestream.spark.exec.general.keyed_state import SlotSnapshots
from flamestream.spark.exec.general.partitioning import partition_of, salts

from ..examples import examples
from .helpers import item


def test_routes_land_in_their_partitions_and_differ_from_salts() -> None:
    for n in (1, 2, 3, 8):
        assert [partition_of(r, n) for r in routes(n)] == list(range(n))
        assert not set(routes(n)) & set(salts(n))


def test_a_layout_routes_keys_by_slot_and_leaves_salts_and_tombstones() -> None:
    layout = Layout(2, (1, 1, 0, 0, 0, 0, 1, 0))
    key = encode_key("cat")
    assert layout.partition_of(key) == layout.assignment[slot_of(key, 8)]
    assert partition_of(layout.route(key) or b"", 2) == layout.partition_of(key)
    assert layout.route(None) is None
    assert layout.route(salts(2)[1]) == salts(2)[1]
    assert layout.slots_of(1) == [0, 1, 6]
    assert Layout.default(3).slots == 3 * SLOTS_PER_PARTITION
    assert layout.loads({0: 5, 2: 7}) == [7, 5]


def test_balanced_loads_move_nothing() -> None:
    layout = Layout.default(2)
    assert plan_layout(layout, {s: 100 for s in range(8)})[0] is None
    assert plan_layout(layout, {0: MIN_ITEMS - 1})[0] is None  # too few to judge


def test_a_hot_partition_is_split_and_merged_back_when_it_cools() -> None:
    layout = Layout.default(2)  # even slots in 0, odd in 1
    hot = {0: 400, 2: 300, 4: 200, 6: 100, 1: 50, 3: 50, 5: 50, 7: 50}
    split, why = plan_layout(layout, hot)
    assert split is not None and why.startswith("split")
    before, after = max(layout.loads(hot)), max(split.loads(hot))
    assert before > SKEW * sum(hot.values()) / 2 and after <= 0.8 * before
    assert plan_layout(split, hot)[0] is None  # stable under the same loads
    slightly = {s: 100 + (30 if s % 2 == 0 else 0) for s in range(8)}  # default: 1.13 x mean
    assert max(Layout.default(2).loads(slightly)) <= EVEN * sum(slightly.values()) / 2
    back, why = plan_layout(split, slightly)
    assert back == Layout.default(2) and why.startswith("even")


keys = st.integers(0, 7)
arrivals = st.lists(
    st.tuples(keys, st.integers(1, 60), st.booleans()),
    min_size=1,
    max_size=40,
    unique_by=lambda a: a[1],
)


def _deliver(state: GroupingState, arrival: tuple[int, int, bool]) -> list:
    key, ts, tombstone = arrival
    if tombstone:  # a newer version of the item at ts, dropped upstream: invalidates it
        return state.receive(item(None, ts, (1, 0), may_invalidate=True, tombstone=True))
    return state.receive(item((key, ts), ts, (0, 0)))


def _outputs(items: list) -> list:
    return sorted((o.meta, o.payload, o.may_invalidate, o.tombstone) for o in items)


@settings(max_examples=examples(150), deadline=None)
@given(
    arrivals=arrivals,
    cut=st.integers(0, 40),
    slots=st.integers(1, 6),
    window=st.integers(1, 3),
    seed=st.integers(0, 10**6),
)
def test_splitting_and_merging_state_changes_nothing_downstream(
    arrivals: list[tuple[int, int, bool]], cut: int, slots: int, window: int, seed: int
) -> None:
    """A state split by slot, each part pickled (as snapshots are), and merged back emits
    what the unsplit state emits for every later arrival, and ends with the same buckets."""
    key = lambda payload: payload[0]  # noqa: E731
    whole = GroupingState("g", window, key)
    moved = GroupingState("g", window, key)
    first, rest = arrivals[:cut], arrivals[cut:]
    for arrival in first:
        _deliver(whole, arrival)
        _deliver(moved, arrival)
    part_of = lambda k: (k * 7 + seed) % slots  # noqa: E731
    parts = moved.split(part_of, into=range(slots))
    assert sorted(parts) == list(range(slots))
    states = []
    for part in parts.values():
        state = GroupingState("g", window, key)
        state.restore(part.snapshot())  # through bytes, as snapshots travel
        states.append(state)
    moved = GroupingState.merge("g", window, key, states)
    assert moved.stats == whole.stats
    for arrival in rest:
        assert _outputs(_deliver(moved, arrival)) == _outputs(_deliver(whole, arrival))

    def buckets(state: GroupingState) -> dict:
        return {k: [(i.meta, i.payload) for i in state.bucket(k)] for k in state.bucket_keys()}

    assert buckets(moved) == buckets(whole)
    assert moved.indexed_times() == whole.indexed_times()


def test_slot_snapshots_record_each_slots_state_bytes(tmp_path: Path) -> None:
    """The keyed task writes each slot's snapshot bytes before and after its batch next to
    the items per slot: the sizes of the snapshots it restored and saved."""
    key = lambda payload: payload[0]  # noqa: E731
    state_url = str(tmp_path / "graph")
    io = SlotSnapshots(Grouping("g", 2, key), state_url, str(tmp_path / "ck"), 2)
    layout = Layout.default(2)
    mine = layout.slots_of(0)
    keys = [k for k in range(40) if layout.partition_of(encode_key(k)) == 0][:6]
    saved: dict[int, int] = {}
    for batch in (0, 1):
        state = io.restore(0, batch)
        for n, k in enumerate(keys):
            state.receive(item((k, batch), 10 * batch + n + 1, (0, 0)))
        io.save(0, batch, state, [pa.array([encode_key(k) for k in keys])])
        sizes = SlotLoads(state_url).read_sizes(batch)
        assert sorted(sizes) == mine
        assert all(before == saved.get(s, 0) for s, (before, _) in sizes.items())
        saved = {s: after for s, (_, after) in sizes.items()}
        snapshots = tmp_path / "graph" / "g.slots"
        assert saved == {
            s: len((snapshots / f"part-{s:05d}" / f"{batch:012d}.state").read_bytes()) for s in mine
        }
        assert sum(SlotLoads(state_url).read(batch).values()) == len(keys)
    assert io.restored == {}  # nothing kept once saved
