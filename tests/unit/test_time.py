from hypothesis import given
from hypothesis import strategies as st

from flamestream.model import END_OF_TIME, MAX_FRONT, MAX_TS, GlobalTime, LocalTime, Meta, lineage
from flamestream.model import invalidates as inv

from .helpers import meta

local_times = st.builds(LocalTime, st.integers(0, 3), st.integers(0, 2))
traces = st.lists(local_times, max_size=4).map(tuple)
metas = st.builds(Meta, st.builds(GlobalTime, st.integers(0, 2), st.integers(0, 1)), traces)


def test_global_times_order_by_ts_then_front():
    assert GlobalTime(1, 9) < GlobalTime(2, 0)
    assert GlobalTime(2, 0) < GlobalTime(2, 1)
    assert GlobalTime(MAX_TS, MAX_FRONT) < END_OF_TIME


def test_traces_order_lexicographically_with_prefix_first():
    assert meta(5, (1, 0)) < meta(5, (1, 0), (0, 0))
    assert meta(5, (1, 0), (9, 9)) < meta(5, (2, 0))
    assert meta(5, (1, 0)) < meta(5, (1, 1))


def test_metas_order_by_global_time_before_trace():
    assert meta(4, (9, 9), (9, 9)) < meta(5)
    assert meta(5, front=0) < meta(5, front=1)


def test_invalidation_needs_same_global_time():
    assert not inv(meta(6, (2, 0)), meta(5, (1, 0)))
    assert not inv(meta(5, (2, 0), front=1), meta(5, (1, 0), front=0))


def test_first_difference_in_logical_time_invalidates():
    assert inv(meta(5, (0, 0), (2, 0)), meta(5, (0, 0), (1, 0)))
    # later positions do not matter once the first difference is found
    assert inv(meta(5, (2, 0), (0, 0)), meta(5, (1, 0), (7, 3), (1, 1)))
    # a logical difference with the child index differing too is still a logical difference
    assert inv(meta(5, (2, 0)), meta(5, (1, 1)))


def test_the_older_trace_never_invalidates_the_newer():
    assert not inv(meta(5, (1, 0)), meta(5, (2, 0)))


def test_siblings_never_invalidate_each_other():
    a, b = meta(5, (3, 0), (1, 0)), meta(5, (3, 1), (7, 0))
    assert not inv(a, b)
    assert not inv(b, a)


def test_an_item_and_its_descendant_along_a_cycle_do_not_invalidate():
    shorter, longer = meta(5, (1, 0)), meta(5, (1, 0), (4, 0), (0, 1))
    assert not inv(longer, shorter)
    assert not inv(shorter, longer)
    assert not inv(shorter, shorter)


@given(metas)
def test_invalidation_is_irreflexive(a):
    assert not inv(a, a)


@given(metas, metas)
def test_invalidation_implies_same_time_and_smaller_trace(a, b):
    if inv(b, a):
        assert a.global_time == b.global_time
        assert a.trace < b.trace
        assert not inv(a, b)


@given(metas, metas, metas)
def test_invalidation_is_transitive(a, b, c):
    if inv(b, a) and inv(c, b):
        assert inv(c, a)


@given(metas, metas, local_times, local_times)
def test_invalidation_survives_appending_local_times(a, b, x, y):
    # traces are append-only, so the relation cannot be lost downstream
    if inv(b, a):
        assert inv(b.extended(y), a.extended(x))


@given(st.lists(metas, max_size=8))
def test_lineages_keep_the_order_of_what_a_barrier_can_release_together(drawn):
    """Of items no other invalidates (what a sink releases of one global time), the lineages
    order as the metas do and stay distinct: the logical times never decided between them."""
    valid = sorted({m for m in drawn if not any(inv(other, m) for other in drawn)}, key=lambda m: m)
    released = [Meta(m.global_time, lineage(m.trace)) for m in valid]
    assert released == sorted(released)
    assert len(set(released)) == len(released)
    assert all(local.logical == 0 for m in released for local in m.trace)
    assert [[local.child for local in m.trace] for m in released] == [
        [local.child for local in m.trace] for m in valid
    ]


def test_a_lineage_drops_only_the_logical_times():
    trace = (LocalTime(3, 1), LocalTime(0, 2), LocalTime(7, 0))
    assert lineage(trace) == (LocalTime(0, 1), LocalTime(0, 2), LocalTime(0, 0))
    assert lineage(()) == ()
