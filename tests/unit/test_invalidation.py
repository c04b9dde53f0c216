"""The invalidation index (a trie of one global time's traces) against the pairwise relation.

``runtime.invalidation`` answers "is this item stale?" and "what does this item invalidate?"
by walking a trie; every answer here is compared with :func:`invalidates` applied pair by
pair, on random traces drawn from few local times, so that they share prefixes, are prefixes
of each other, and differ first in a logical time or in a child index (siblings). Then the
grouping (``GroupingState``) and the reference barrier (``BarrierBuffer``), which search
their peers through it, are checked step by step against the pairwise definition, tombstones
and may-invalidate flags included, across snapshots (new and earlier formats) and a split.
"""

from __future__ import annotations

import pickle
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from flamestream.model import DataItem, GlobalTime, LocalTime, Meta, invalidates
from flamestream.runtime import GroupingState
from flamestream.runtime.barrier import BarrierBuffer
from flamestream.runtime.grouping import TOMBSTONE
from flamestream.runtime.invalidation import HeldVersions, TraceIndex

from ..examples import examples

AT = GlobalTime(5, 1)
locals_ = st.builds(LocalTime, st.integers(0, 3), st.integers(0, 2))
traces = st.lists(locals_, max_size=5).map(tuple)
#: (add: True / supersede: False, trace, flagged) operations on one global time's index
operations = st.lists(st.tuples(st.booleans(), traces, st.booleans()), max_size=30)


def invalidated_by(newer: tuple[LocalTime, ...], older: tuple[LocalTime, ...]) -> bool:
    return invalidates(Meta(AT, newer), Meta(AT, older))


@settings(max_examples=examples(300), deadline=None)
@given(operations, st.lists(traces, max_size=10))
def test_the_trie_answers_as_the_relation_does_pair_by_pair(ops, probes):
    """After every add or supersede: the handles taken are exactly those the new trace
    invalidates, and a probe is invalidated exactly when a held flagged trace invalidates it."""
    index: TraceIndex[int] = TraceIndex()
    held: dict[int, tuple[tuple[LocalTime, ...], bool]] = {}  # the pairwise model
    for handle, (plain, trace, flagged) in enumerate(ops):
        if plain:
            index.add(trace, handle, flagged=flagged)
            held[handle] = (trace, flagged)
        else:
            want = {h for h, (t, _) in held.items() if invalidated_by(trace, t)}
            assert set(index.supersede(trace, handle)) == want
            for h in want:
                del held[h]
            held[handle] = (trace, True)
        for probe in [*probes, *(t for t, _ in held.values())]:
            pairwise = any(f and invalidated_by(t, probe) for t, f in held.values())
            assert index.invalidated(probe) == pairwise


def long_trace(depth: int, child: int) -> tuple[LocalTime, ...]:
    return (*[LocalTime(1, 0)] * depth, LocalTime(0, child))


def test_traces_round_a_long_loop_and_wide_fan_outs_are_handled_without_recursion():
    index: TraceIndex[int] = TraceIndex()
    for child in range(3):
        index.add(long_trace(5000, child), child, flagged=False)
    newer = (*[LocalTime(1, 0)] * 10, LocalTime(2, 0))
    assert index.invalidated(long_trace(5000, 0)) is False
    assert sorted(index.supersede(newer, 99)) == [0, 1, 2]
    assert index.invalidated(long_trace(5000, 1)) is True


items = st.tuples(traces, st.booleans(), st.booleans())  # trace, may_invalidate, tombstone


def data_item(n: int, trace: tuple[LocalTime, ...], flagged: bool, tombstone: bool) -> DataItem:
    return DataItem(None if tombstone else n, Meta(AT, trace), flagged or tombstone, tombstone)


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(items, max_size=25), st.integers(0, 25))
def test_held_versions_keep_arrival_order_as_a_list_with_removals_would(drawn, pickled_at):
    """Entries in arrival order; ``supersede`` returns its victims in that order; a pickled
    copy (its entries only, the trie made again) answers the same from then on."""
    held: HeldVersions[int] = HeldVersions()
    model: list[tuple[int, DataItem]] = []
    for n, (trace, flagged, tombstone) in enumerate(drawn):
        if n == pickled_at:
            copy = pickle.loads(pickle.dumps(held))  # noqa: S301
            assert [(t, i.meta, i.may_invalidate) for t, i in copy] == [
                (t, i.meta, i.may_invalidate) for t, i in model
            ]
            held, model = copy, list(copy)  # the copy's items (they compare by identity)
        entry = data_item(n, trace, flagged, tombstone)
        stale = any(i.may_invalidate and invalidates(i.meta, entry.meta) for _, i in model)
        assert held.stale(entry) == stale
        if entry.may_invalidate:
            victims = [(t, i) for t, i in model if invalidates(entry.meta, i.meta)]
            assert held.supersede(n, entry) == victims
            model = [(t, i) for t, i in model if (t, i) not in victims]
        else:
            held.append((n, entry))
        model.append((n, entry))
        assert list(held) == model and len(held) == len(model)


# --- the grouping's index, step by step against the pairwise definition -----------------

arrivals = st.lists(
    st.tuples(
        st.integers(0, 1),  # one of two global times: many peers each
        traces,
        st.booleans(),  # may invalidate
        st.integers(0, 6),  # tombstone when 0
        st.integers(0, 3),  # the key
    ),
    max_size=30,
)


def index_of(state: GroupingState) -> dict[GlobalTime, list[tuple[Any, DataItem]]]:
    return {t: list(entries) for t, entries in state._by_time.items()}


def pairwise_receive(
    index: dict[GlobalTime, list[tuple[Any, DataItem]]], key: Any, x: DataItem
) -> tuple[bool, list[tuple[Any, DataItem]]]:
    """What the pairwise grouping did: (stale?, the victims in index order)."""
    peers = index.get(x.global_time, [])
    if not x.tombstone and any(p.may_invalidate and invalidates(p.meta, x.meta) for _, p in peers):
        return True, []
    if not x.may_invalidate:
        return False, []
    return False, [(k, p) for k, p in peers if invalidates(x.meta, p.meta)]


@settings(max_examples=examples(200), deadline=None)
@given(arrivals, st.integers(0, 30), st.booleans())
def test_the_grouping_drops_and_removes_what_the_pairwise_definition_does(
    drawn, restore_at, earlier_format
):
    """Per arrival: stale exactly when a held may-invalidate peer invalidates it; the index
    loses exactly the peers it invalidates (in order) and gains it; ``may_invalidate_at``
    says whether a peer may invalidate. A restore midway (from a snapshot, or from one of
    the format before the trie, all lists) changes none of it."""
    state = GroupingState("g", 2, key=lambda p: p[1])
    seen: set[tuple[int, tuple[LocalTime, ...]]] = set()
    for n, (time, trace, flagged, kind, key) in enumerate(drawn):
        if (time, trace) in seen:  # metas are unique
            continue
        seen.add((time, trace))
        if n == restore_at:
            state = restored(state, earlier_format=earlier_format)
        at = GlobalTime(time, 0)
        tombstone = kind == 0
        payload = None if tombstone else (n, key)
        x = DataItem(payload, Meta(at, trace), flagged or tombstone, tombstone)
        before = index_of(state)
        stale, victims = pairwise_receive(before, TOMBSTONE if tombstone else key, x)
        stats = (state.stats.stale, state.stats.invalidated)
        state.receive(x)
        assert state.stats.stale - stats[0] == stale
        assert state.stats.invalidated - stats[1] == sum(k is not TOMBSTONE for k, _ in victims)
        if not stale:
            kept = [e for e in before.get(at, []) if e not in victims]
            assert index_of(state)[at] == [*kept, (TOMBSTONE if tombstone else key, x)]
        for t, entries in index_of(state).items():
            assert state.may_invalidate_at(t) == any(i.may_invalidate for _, i in entries)


def restored(state: GroupingState, *, earlier_format: bool) -> GroupingState:
    again = GroupingState("g", 2, key=lambda p: p[1])
    if not earlier_format:
        again.restore(state.snapshot())
        return again
    lists = {t: list(entries) for t, entries in state._by_time.items()}
    old = (state._buckets, lists, state._times, state._oversized, state.stats, state._where)
    again.restore(pickle.dumps(old, pickle.HIGHEST_PROTOCOL))
    return again


@settings(max_examples=examples(100), deadline=None)
@given(arrivals)
def test_a_split_and_merge_keep_the_index_answering_as_pairwise(drawn):
    """Each part of a split answers ``may_invalidate_at`` from the entries it got."""
    state = GroupingState("g", 2, key=lambda p: p[1])
    seen: set[tuple[int, tuple[LocalTime, ...]]] = set()
    for n, (time, trace, flagged, kind, key) in enumerate(drawn):
        if (time, trace) in seen:
            continue
        seen.add((time, trace))
        tombstone = kind == 0
        meta = Meta(GlobalTime(time, 0), trace)
        payload = None if tombstone else (n, key)
        state.receive(DataItem(payload, meta, flagged or tombstone, tombstone))
    parts = state.split(lambda key: key % 2, into=[0, 1])
    merged = GroupingState.merge("g", 2, lambda p: p[1], list(parts.values()))
    for checked in [*parts.values(), merged]:
        for t, entries in index_of(checked).items():
            assert checked.may_invalidate_at(t) == any(i.may_invalidate for _, i in entries)


# --- the reference barrier ---------------------------------------------------------------


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), items), max_size=30))
def test_the_reference_barrier_releases_what_the_pairwise_definition_keeps(drawn):
    """Released: the non-tombstones no later-held may-invalidate item invalidated, in meta
    order; a stale arrival is never held (the pairwise buffer, replayed alongside)."""
    barrier = BarrierBuffer("out")
    model: dict[GlobalTime, list[DataItem]] = {}
    for n, (time, (trace, flagged, tombstone)) in enumerate(drawn):
        x = data_item(n, trace, flagged, tombstone)
        x = DataItem(x.payload, Meta(GlobalTime(time, 0), trace), x.may_invalidate, x.tombstone)
        barrier.receive(x)
        held = model.setdefault(x.global_time, [])
        if any(o.may_invalidate and invalidates(o.meta, x.meta) for o in held):
            continue
        if x.may_invalidate:
            held[:] = [o for o in held if not invalidates(x.meta, o.meta)]
        held.append(x)
    assert barrier.pending() == sum(len(h) for h in model.values())
    released = barrier.release(GlobalTime(9, 0))
    want = [
        i
        for t in sorted(model)
        for i in sorted((i for i in model[t] if not i.tombstone), key=lambda i: i.meta)
    ]
    assert released == want
