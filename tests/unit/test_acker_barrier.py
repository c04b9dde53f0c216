import pytest

from flamestream.errors import InvariantError, ScheduleError
from flamestream.model import END_OF_TIME, GlobalTime
from flamestream.runtime import Acker, BarrierBuffer, item_id

from .helpers import item


def test_min_time_follows_reports_and_busy_slots():
    acker = Acker()
    acker.register_front(0)
    acker.register_front(1, start_ts=5)
    assert acker.min_time == GlobalTime(0, 0)
    acker.ack(GlobalTime(3, 0), 0xABC)  # sent at ts 3
    acker.report(0, 10)
    assert acker.min_time == GlobalTime(3, 0)
    acker.ack(GlobalTime(3, 0), 0xABC)  # received: the slot is zero again
    assert acker.min_time == GlobalTime(5, 1)
    acker.close(1)
    assert acker.min_time == GlobalTime(10, 0)
    acker.close(0)
    assert acker.min_time == END_OF_TIME


def test_xor_slot_is_zero_only_when_every_send_was_received():
    acker = Acker()
    acker.register_front(0)
    acker.close(0)
    a, b = item("a", 4), item("b", 4, (0, 1))
    acker.ack(a.global_time, item_id(a))
    acker.ack(b.global_time, item_id(b))
    acker.ack(a.global_time, item_id(a))
    assert acker.min_time == GlobalTime(4, 0)
    acker.ack(b.global_time, item_id(b))
    assert acker.min_time == END_OF_TIME
    assert acker.busy_times() == []


def test_item_ids_are_stable_and_distinguish_tombstones():
    a = item("x", 1, (1, 0))
    assert item_id(a) == item_id(item("other payload", 1, (1, 0)))
    assert item_id(a) != item_id(item(None, 1, (1, 0), tombstone=True))
    assert item_id(a) != item_id(item("x", 1, (2, 0)))
    assert 0 <= item_id(a) < 2**64


def test_reports_cannot_go_back_and_min_time_cannot_move_back():
    acker = Acker()
    acker.register_front(0)
    acker.report(0, 10)
    with pytest.raises(ScheduleError, match="went back"):
        acker.report(0, 9)
    assert acker.min_time == GlobalTime(10, 0)
    acker.ack(GlobalTime(4, 0), 1)  # a send below the min-time: something was lost
    with pytest.raises(InvariantError, match="moved back"):
        _ = acker.min_time


def test_barrier_releases_only_below_min_time_in_meta_order():
    barrier = BarrierBuffer("out")
    for it in (item("c", 3), item("a2", 1, (0, 1)), item("a1", 1, (0, 0)), item("b", 2)):
        barrier.receive(it)
    assert barrier.release(GlobalTime(1, 0)) == []
    assert [i.payload for i in barrier.release(GlobalTime(2, 1))] == ["a1", "a2", "b"]
    assert barrier.pending() == 1
    assert [i.payload for i in barrier.release(END_OF_TIME)] == ["c"]


def test_barrier_drops_invalidated_items_whatever_the_arrival_order():
    for order in ((0, 1, 2), (2, 1, 0), (1, 0, 2), (2, 0, 1)):
        versions = [
            item("v1", 5, (0, 0), (1, 0)),
            item("v2", 5, (0, 0), (2, 0), may_invalidate=True),
            item("sibling", 5, (0, 1), (1, 0)),
        ]
        barrier = BarrierBuffer("out")
        for index in order:
            barrier.receive(versions[index])
        released = [i.payload for i in barrier.release(END_OF_TIME)]
        assert sorted(released) == ["sibling", "v2"], order


def test_barrier_never_releases_tombstones_but_lets_them_invalidate():
    barrier = BarrierBuffer("out")
    barrier.receive(item("v1", 5, (0, 0), (1, 0)))
    barrier.receive(item(None, 5, (0, 0), (2, 0), tombstone=True, may_invalidate=True))
    barrier.receive(item("sibling", 5, (0, 1), (1, 0)))
    assert [i.payload for i in barrier.release(END_OF_TIME)] == ["sibling"]
    assert barrier.stats.invalidated == 1
