"""The grouping's rules on hand-made items: the paper's example, replay, invalidation, GC."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flamestream.errors import StepError
from flamestream.model import GlobalTime, invalidates
from flamestream.runtime import GroupingState

from ..examples import examples
from .helpers import item


def payloads(items):
    return [i.payload for i in items]


def test_paper_worked_example_in_order():
    state = GroupingState("g", 3, key=lambda n: n % 2)
    out = []
    for n in range(1, 9):
        out += state.receive(item(n, n))
    assert payloads(out) == [(1,), (2,), (1, 3), (2, 4), (1, 3, 5), (2, 4, 6), (3, 5, 7), (4, 6, 8)]
    # each tuple carries its last item's global time and that item's trace plus a local time
    assert [o.global_time for o in out] == [GlobalTime(n, 0) for n in range(1, 9)]
    assert all(len(o.meta.trace) == 1 for o in out)
    assert not any(o.may_invalidate for o in out)
    assert state.stats.replayed == 0


def test_out_of_order_item_replays_the_tuples_it_changes():
    state = GroupingState("g", 2, key=lambda n: 0)
    first = state.receive(item("a", 1)) + state.receive(item("c", 3))
    assert payloads(first) == [("a",), ("a", "c")]
    late = state.receive(item("b", 2))
    # the tuple ending at the new item, then the one ending at the next item (w - 1 = 1)
    assert payloads(late) == [("a", "b"), ("b", "c")]
    assert late[1].may_invalidate and not late[0].may_invalidate
    assert invalidates(late[1].meta, first[1].meta)
    assert not invalidates(late[0].meta, first[0].meta)
    assert state.stats.replayed == 1


def test_replay_reaches_exactly_window_minus_one_followers():
    state = GroupingState("g", 3, key=lambda n: 0)
    for ts in (10, 20, 30, 40):
        state.receive(item(ts, ts))
    out = state.receive(item(5, 5))
    assert payloads(out) == [(5,), (5, 10), (5, 10, 20)]
    assert [o.global_time.ts for o in out] == [5, 10, 20]


def test_an_invalidating_arrival_replaces_its_older_version():
    state = GroupingState("g", 2, key=lambda p: p[0])
    state.receive(item(("k", "x"), 1))
    old = item(("k", "old"), 2, (1, 0))
    state.receive(old)
    state.receive(item(("k", "y"), 3))
    new = item(("k", "new"), 2, (2, 0), may_invalidate=True)
    out = state.receive(new)
    assert [i.payload[1] for i in state.bucket("k")] == ["x", "new", "y"]
    assert payloads(out) == [(("k", "x"), ("k", "new")), (("k", "new"), ("k", "y"))]
    assert state.stats.invalidated == 1


def test_a_bucket_keyed_none_drops_the_versions_a_replay_replaces():
    """``key`` returning None (one bucket for everything) is a key like any other: a new
    version of an item in the None bucket removes its old one (it stayed when the index
    tagged tombstones None, and the next tuple saw both), and split and merge keep it."""
    state = GroupingState("g", 2, key=lambda p: None)
    state.receive(item("x", 1))
    state.receive(item("old", 2, (1, 0)))
    state.receive(item("y", 3))
    out = state.receive(item("new", 2, (2, 0), may_invalidate=True))
    assert payloads(state.bucket(None)) == ["x", "new", "y"]
    assert payloads(out) == [("x", "new"), ("new", "y")]
    assert state.stats.invalidated == 1
    # split and merged again, its entries stay with its own part, not with every part
    parts = state.split(lambda key: 0, into=[0, 1])
    assert parts[1].indexed_times() == 0 and parts[0].indexed_times() == 3
    merged = GroupingState.merge("g", 2, lambda p: None, list(parts.values()))
    merged.receive(item("newer", 2, (3, 0), may_invalidate=True))
    assert payloads(merged.bucket(None)) == ["x", "newer", "y"]


def test_a_stale_arrival_is_dropped():
    state = GroupingState("g", 2, key=lambda p: 0)
    state.receive(item("new", 2, (2, 0), may_invalidate=True))
    assert state.receive(item("old", 2, (1, 0))) == []
    assert payloads(state.bucket(0)) == ["new"]
    assert state.stats.stale == 1


def test_invalidation_crosses_buckets_when_a_replay_changed_the_key():
    state = GroupingState("g", 2, key=lambda p: p[0])
    state.receive(item(("k1", "old"), 2, (1, 0)))
    state.receive(item(("k1", "later"), 3))
    out = state.receive(item(("k2", "new"), 2, (2, 0), may_invalidate=True))
    assert payloads(state.bucket("k1")) == [("k1", "later")]
    # k1's follower lost the old item from view and is re-emitted alone
    assert (("k1", "later"),) in payloads(out)
    assert (("k2", "new"),) in payloads(out)


def test_tombstone_removes_and_is_forwarded_only_when_it_removed_something():
    state = GroupingState("g", 2, key=lambda p: 0)
    state.receive(item("old", 2, (1, 0)))
    state.receive(item("next", 3))
    out = state.receive(item(None, 2, (2, 0), tombstone=True, may_invalidate=True))
    assert payloads(state.bucket(0)) == ["next"]
    assert [o.tombstone for o in out] == [False, True]
    assert payloads(out)[0] == ("next",)
    # the same tombstone coming round a cycle removes nothing more and stops there
    assert state.receive(item(None, 2, (2, 0), (0, 0), tombstone=True, may_invalidate=True)) == []


def test_a_remembered_tombstone_drops_the_stale_version_arriving_later():
    state = GroupingState("g", 2, key=lambda p: 0)
    assert state.receive(item(None, 2, (2, 0), tombstone=True, may_invalidate=True)) == []
    assert state.receive(item("old", 2, (1, 0))) == []
    assert state.bucket(0) == ()


def test_siblings_do_not_remove_each_other():
    state = GroupingState("g", 2, key=lambda p: 0)
    state.receive(item("a", 2, (0, 0)))
    state.receive(item("b", 2, (0, 1), may_invalidate=True))
    assert payloads(state.bucket(0)) == ["a", "b"]


def test_gc_keeps_the_last_window_minus_one_entries_below_min_time():
    state = GroupingState("g", 3, key=lambda n: n % 2)
    for n in range(1, 21):
        state.receive(item(n, n))
    state.collect_garbage(GlobalTime(15, 0))
    assert payloads(state.bucket(1)) == [11, 13, 15, 17, 19]
    assert payloads(state.bucket(0)) == [12, 14, 16, 18, 20]
    assert max(state.entries_below(GlobalTime(15, 0)).values()) == 2
    # what GC kept is enough: the next item still sees its full window
    assert payloads(state.receive(item(21, 21))) == [(17, 19, 21)]
    state.collect_garbage(GlobalTime(100, 0))
    assert state.entries() == 4
    assert state.indexed_times() == 0


def test_window_one_gc_drops_whole_buckets():
    state = GroupingState("g", 1, key=lambda n: n)
    for n in range(5):
        state.receive(item(n, n))
    state.collect_garbage(GlobalTime(10, 0))
    assert state.bucket_keys() == ()


def test_key_function_errors_name_the_step():
    state = GroupingState("by_len", 2, key=len)
    with pytest.raises(StepError, match="by_len") as caught:
        state.receive(item(42, 7))
    assert caught.value.global_time == GlobalTime(7, 0)
    assert isinstance(caught.value.cause, TypeError)


def test_noted_determinants_survive_snapshot_split_and_merge_and_go_with_gc():
    state = GroupingState("g", 2, key=lambda n: n % 2)
    for n in range(1, 5):
        state.receive(item(n, n))
    state.note_where([(GlobalTime(n, 0), ("in.txt", 10 * n)) for n in range(1, 5)])
    state.note_where([(GlobalTime(99, 0), ("in.txt", 990))])  # not held: not kept
    assert state.where(GlobalTime(3, 0)) == ("in.txt", 30)
    assert state.where(GlobalTime(99, 0)) is None
    restored = GroupingState("g", 2, key=lambda n: n % 2)
    restored.restore(state.snapshot())
    assert restored.where(GlobalTime(2, 0)) == ("in.txt", 20)
    parts = restored.split(lambda key: key, into=[0, 1])
    assert parts[1].where(GlobalTime(1, 0)) == ("in.txt", 10)
    assert parts[1].where(GlobalTime(2, 0)) is None  # an even item's time lives in part 0
    merged = GroupingState.merge("g", 2, lambda n: n % 2, list(parts.values()))
    assert [merged.where(GlobalTime(n, 0)) for n in range(1, 5)] == [
        ("in.txt", 10 * n) for n in range(1, 5)
    ]
    merged.collect_garbage(GlobalTime(3, 0))
    assert merged.where(GlobalTime(2, 0)) is None
    assert merged.where(GlobalTime(3, 0)) == ("in.txt", 30)


def _held(state: GroupingState) -> tuple:
    """Everything a state holds, comparable with ``==``, and its index/bucket sharing."""

    def one(i):
        return (i.meta, i.payload, i.may_invalidate, i.tombstone)

    shared = [
        any(held is kept for kept in state._buckets[key].items) if key is not None else None
        for entries in state._by_time.values()
        for key, held in entries
    ]
    return (
        [(k, b.clock, [one(i) for i in b.items]) for k, b in state._buckets.items()],
        [(t, [(k, one(i)) for k, i in e]) for t, e in state._by_time.items()],
        list(state._times),
        sorted(state._oversized, key=repr),
        state.stats,
        dict(state._where),
        shared,
    )


@settings(max_examples=examples(150), deadline=None)
@given(
    arrivals=st.lists(
        st.tuples(st.integers(0, 30), st.integers(0, 4), st.booleans(), st.integers(0, 9)),
        max_size=30,
    )
)
def test_a_snapshot_restores_the_state_it_was_taken_of(arrivals):
    """Settled buckets travel as columns, the others as objects: the restored state holds
    the same buckets in the same order, the same index (sharing its items with the buckets),
    counters and determinants; and a snapshot of the earlier all-objects format restores."""
    import pickle

    state = GroupingState("g", 2, key=lambda n: n % 5)
    seen = set()
    for ts, trace, flagged, gc_at in arrivals:
        if (ts, trace) in seen:
            continue
        seen.add((ts, trace))
        state.receive(item(ts * 10 + trace, ts, (0, trace), may_invalidate=flagged))
        state.note_where([(GlobalTime(ts, 0), ("in.txt", ts))])
        if gc_at == 0:
            state.collect_garbage(GlobalTime(ts, 0))
    restored = GroupingState("g", 2, key=lambda n: n % 5)
    restored.restore(state.snapshot())
    assert _held(restored) == _held(state)
    index = {t: list(entries) for t, entries in state._by_time.items()}  # lists, as then
    old = (state._buckets, index, state._times, state._oversized, state.stats)
    earlier = GroupingState("g", 2, key=lambda n: n % 5)
    earlier.restore(pickle.dumps((*old, state._where), pickle.HIGHEST_PROTOCOL))
    assert _held(earlier) == _held(state)
