"""Rescaling an elastic layout: targets over n active partitions, bounded migration steps,
the control channel's reader consuming rescale requests (no Spark: its planning alone)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flamestream.errors import ConfigError
from flamestream.spark.control.channels import ControlReader
from flamestream.spark.control.handle import QueryControl
from flamestream.spark.control.key_layout import (
    SLOTS_PER_PARTITION,
    ElasticPolicy,
    Layout,
    decide_rescale,
    desired_active,
    migration_step,
    plan_layout,
    rescale_target,
)
from flamestream.spark.durable import QueryCheckpoint
from flamestream.spark.durable.slots import SlotLoads

from ..examples import examples

#: The control offset's fields that explain a planning's decision (``decisions`` aside).
EXPLAINING = {"reason", "requests", "moved", "movedBytes", "cluster"}

PARTITIONS = st.integers(1, 12)


@st.composite
def layouts(draw: st.DrawFn) -> Layout:
    """Any layout of any P: every slot somewhere among the P partitions."""
    partitions = draw(PARTITIONS)
    slots = partitions * SLOTS_PER_PARTITION
    holders = draw(st.integers(1, partitions))
    return Layout(
        partitions,
        tuple(draw(st.lists(st.integers(0, holders - 1), min_size=slots, max_size=slots))),
    )


def loads_for(draw: st.DrawFn, layout: Layout) -> dict[int, int]:
    return draw(st.dictionaries(st.integers(0, layout.slots - 1), st.integers(0, 1000)))


@settings(max_examples=examples(300), deadline=None)
@given(st.data())
def test_a_target_puts_every_slot_in_an_active_partition_and_is_reached_in_bounded_steps(
    data: st.DataObject,
) -> None:
    current = data.draw(layouts())
    active = data.draw(st.integers(1, current.partitions))
    loads = loads_for(data.draw, current)
    bound = data.draw(st.integers(1, 3 * SLOTS_PER_PARTITION))
    target = rescale_target(current, active, loads)
    assert target.partitions == current.partitions and target.slots == current.slots
    assert set(target.assignment) <= set(range(active))  # every slot in an active partition
    # a slot that can stay (active, within its partition's fair share) is not moved for nothing
    to_move = current.moves_to(target)
    assert all(current.assignment[s] != target.assignment[s] for s in to_move)
    steps, layout = 0, current
    while layout != target:
        layout, moved = migration_step(layout, target, bound)
        assert 1 <= len(moved) <= bound
        assert all(layout.assignment[s] == target.assignment[s] for s in moved)
        steps += 1
    assert steps == math.ceil(len(to_move) / bound)


@settings(max_examples=examples(200), deadline=None)
@given(st.data())
def test_a_byte_bound_moves_at_most_its_bytes_or_one_slot(data: st.DataObject) -> None:
    current = data.draw(layouts())
    target = rescale_target(current, data.draw(st.integers(1, current.partitions)))
    sizes = {s: data.draw(st.integers(0, 500)) for s in range(current.slots)}
    budget = data.draw(st.integers(1, 1000))
    layout, batches = current, 0
    while layout != target:
        layout, moved = migration_step(layout, target, current.slots, budget, sizes)
        assert moved and (len(moved) == 1 or sum(sizes[s] for s in moved) <= budget)
        batches += 1
    assert batches <= len(current.moves_to(target))


@pytest.mark.parametrize("partitions", [1, 2, 4, 8, 32])
def test_scale_out_from_one_to_p_and_back_to_one_balances_and_counts_batches(
    partitions: int,
) -> None:
    one = Layout.default(partitions, 1)
    assert set(one.assignment) == {0}
    out = rescale_target(one, partitions)
    counts = [len(out.slots_of(p)) for p in range(partitions)]
    assert counts == [SLOTS_PER_PARTITION] * partitions  # even by count without loads
    bound = ElasticPolicy().move_slots(out.slots)
    moves = len(one.moves_to(out))
    assert moves == SLOTS_PER_PARTITION * (partitions - 1)
    batches, layout = 0, one
    while layout != out:
        layout, _ = migration_step(layout, out, bound)
        batches += 1
    assert batches == math.ceil(moves / bound)
    assert batches <= 8  # the default bound: an eighth of the slots (at least 4) per batch
    back = rescale_target(out, 1)
    assert set(back.assignment) == {0} and len(out.moves_to(back)) == moves


def test_asking_twice_for_the_same_count_moves_nothing_the_second_time() -> None:
    for partitions in range(1, 9):
        for active in range(1, partitions + 1):
            target = rescale_target(Layout.default(partitions), active)
            assert rescale_target(target, active) == target


def test_a_loaded_slot_weighs_more_than_a_count() -> None:
    layout = Layout.default(2, 1)  # 8 slots in partition 0
    hot = {0: 700, 1: 100, 2: 100, 3: 100}
    target = rescale_target(layout, 2, hot)
    assert max(target.loads(hot)) == 700  # the hot slot alone, the three others beside it
    assert target.loads(hot)[target.assignment[0]] == 700


def test_desired_active_follows_cores_within_p_and_the_budget() -> None:
    assert desired_active(3, 8, 1) == 3
    assert desired_active(16, 8, 1) == 8
    assert desired_active(0, 8, 2) == 1
    assert desired_active(4, 8, 2, batch_ms=100, target_ms=1000) == 2  # well within: stay
    assert desired_active(4, 8, 6, batch_ms=100, target_ms=1000) == 4  # never above cores
    assert desired_active(4, 8, 2, batch_ms=900, target_ms=1000) == 4
    assert desired_active(8, 8, 2, slot_loads={0: 5, 3: 1, 9: 0}) == 2  # two busy slots


def test_bad_policy_values_are_refused_naming_the_option() -> None:
    for kwargs in ({"active": 0}, {"max_move_slots": 0}, {"max_move_bytes": -1}, {"active": True}):
        with pytest.raises(ConfigError, match=next(iter(kwargs))):
            ElasticPolicy(**kwargs)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="from 1 to 4"):
        ElasticPolicy(active=5).check(4)


def reader(tmp_path: Path, partitions: int = 4, **policy: int) -> ControlReader:
    return ControlReader(str(tmp_path / "ck"), partitions, ElasticPolicy(**policy))


def test_the_reader_consumes_a_rescale_and_migrates_a_few_slots_per_planning(
    tmp_path: Path,
) -> None:
    control = reader(tmp_path, active=1, max_move_slots=5)
    start = control.initialOffset()
    assert set(start["assignment"]) == {0} and start["active"] == 1
    assert control.latestOffset(start) is start  # nothing asked, nothing moves
    asked = QueryControl(str(tmp_path / "ck")).rescale(4)
    offsets = [start]
    while (offset := control.latestOffset(offsets[-1]))["decisions"] > offsets[-1]["decisions"]:
        offsets.append(offset)
    # the next batch decides nothing: the layout stays, the last decision's explanation goes
    assert {k: v for k, v in offset.items() if k not in EXPLAINING} == {
        k: v for k, v in offsets[-1].items() if k not in EXPLAINING
    }
    assert not EXPLAINING & offset.keys() and offset["decisions"] == offsets[-1]["decisions"]
    assert control.latestOffset(offset) is offset  # and stays so: no batch made for nothing
    assert [len(o["moved"]) for o in offsets[1:]] == [5, 5, 2]  # 12 slots, 5 per batch
    assert offsets[1]["consumed"] == asked.name and offsets[1]["requests"][0]["kind"] == "rescale"
    assert offsets[-1]["target"] is None and offsets[-1]["active"] == 4
    assert (
        sorted(Layout(4, tuple(offsets[-1]["assignment"])).loads({s: 1 for s in range(16)}))
        == [4] * 4
    )
    assert all("target" in o and o["decisions"] == i for i, o in enumerate(offsets))


def test_refused_and_unknown_requests_are_recorded_never_dropped(tmp_path: Path) -> None:
    control = reader(tmp_path)
    handle = QueryControl(str(tmp_path / "ck"))
    too_many = handle.submit("rescale", {"active": 9})
    other = handle.submit("reshape", {"x": 1})
    start = control.initialOffset()
    offset = control.latestOffset(start)
    assert offset["consumed"] == other.name
    decisions = {r["request"]: r["decision"] for r in offset["requests"]}
    assert decisions[too_many.name].startswith("refused: active=9")
    assert decisions[other.name].startswith("refused: no handler")
    assert offset["assignment"] == start["assignment"] and "refused" in offset["reason"]


def test_a_scheduled_request_waits_for_its_batch_and_holds_the_later_ones(tmp_path: Path) -> None:
    control = reader(tmp_path)
    handle = QueryControl(str(tmp_path / "ck"))
    handle.rescale(2, not_before_batch=3)
    handle.rescale(1)
    start = control.initialOffset()
    assert QueryCheckpoint(str(tmp_path / "ck")).last_committed_batch() == -1
    assert control.latestOffset(start) is start  # batch 0 planned: too early for both


def test_the_handle_checks_active_against_the_checkpoints_p(tmp_path: Path) -> None:
    from flamestream.spark.apply import check_layout

    handle = QueryControl(str(tmp_path / "ck"))
    handle.rescale(7)  # P not known yet: checked when consumed
    check_layout(handle.state_url, 4, elastic=True)
    with pytest.raises(ConfigError, match="from 1 to 4"):
        handle.rescale(5)
    with pytest.raises(ConfigError, match="active"):
        handle.rescale(0)
    fixed = QueryControl(str(tmp_path / "fixed"))
    check_layout(fixed.state_url, 4)
    with pytest.raises(ConfigError, match="elastic"):
        fixed.rescale(2)


def test_offsets_before_active_counts_read_as_all_partitions_active(tmp_path: Path) -> None:
    control = reader(tmp_path)
    old = {
        "flamestreamLayout": 1,
        "partitions": 4,
        "assignment": list(Layout.default(4).assignment),
        "decisions": 3,
        "reason": "default",
    }
    same = control.latestOffset(old)  # nothing decided: the layout stays, its reason goes
    assert same == {k: v for k, v in old.items() if k != "reason"}
    assert control.latestOffset(same) is same
    QueryControl(str(tmp_path / "ck")).rescale(2)
    offset = control.latestOffset(old)
    assert offset["active"] == 2 and offset["decisions"] == 4 and len(offset["moved"]) == 4
    final = control.latestOffset(offset)  # 8 slots to move, the default bound is 4
    assert final["target"] is None and set(final["assignment"]) == {0, 1}


def test_a_rescaled_layout_is_home_for_the_load_policy() -> None:
    """Even loads after a rescale move nothing; a split is merged back to the rescaled layout."""
    target = rescale_target(Layout.default(4), 3)
    even = {s: 100 for s in range(target.slots)}
    assert plan_layout(target, even, active=3, home=target)[0] is None
    hot = {s: (2000 if s == 0 else 100) for s in range(target.slots)}
    split, _ = plan_layout(target, hot, active=3, home=target)
    assert split is not None and set(split.assignment) <= {0, 1, 2}
    back, why = plan_layout(split, even, active=3, home=target)
    assert back == target and why.startswith("even")


def skewed(layout: Layout) -> dict[int, int]:
    """Loads under which ``layout``'s partition 0 carries far more than its share."""
    return {s: (1000 if layout.assignment[s] == 0 else 1) for s in range(layout.slots)}


@settings(max_examples=examples(300), deadline=None)
@given(st.data())
def test_a_request_for_the_count_held_changes_nothing_whatever_the_loads(
    data: st.DataObject,
) -> None:
    current = data.draw(layouts())
    held = data.draw(st.integers(max(current.assignment) + 1, current.partitions))
    target = data.draw(st.none() | st.just(rescale_target(current, held)))
    home = data.draw(st.none() | st.just(Layout.default(current.partitions, held)))
    loads = loads_for(data.draw, current)
    decided = decide_rescale(current, held, held, target, home, loads)
    assert (decided.active, decided.target, decided.home) == (held, target, home)
    assert decided.moves == (len(current.moves_to(target)) if target is not None else 0)
    # another count: a target over that many partitions, which is home too
    asked = data.draw(st.integers(1, current.partitions).filter(lambda n: n != held))
    other = decide_rescale(current, held, asked, target, home, loads)
    assert other.active == asked and other.home == rescale_target(current, asked, loads)
    assert other.target == (other.home if other.moves else None)
    assert other.home is not None and set(other.home.assignment) <= set(range(asked))


def test_asking_again_for_the_count_held_moves_nothing_though_loads_would_repack() -> None:
    start = Layout.default(4, 2)  # active=2 when the checkpoint started
    loads = skewed(start)
    assert rescale_target(start, 2, loads) != start  # repacking by loads would move slots
    first = decide_rescale(start, 2, 2, slot_loads=loads)  # rescale(2), the starting count
    assert first.target is None and first.moves == 0 and first.home is None
    assert first.text == "2 active partitions already: nothing new"
    out = decide_rescale(start, 2, 3, slot_loads=loads)  # rescale(3): slots move, once
    assert out.moves > 0 and out.target is not None
    moved = out.target
    again = decide_rescale(moved, 3, 3, None, out.home, skewed(moved))  # rescale(3) again
    assert again.target is None and again.home == out.home and again.moves == 0
    midway, _ = migration_step(start, out.target, 1)  # asked again while migrating
    going = decide_rescale(midway, 3, 3, out.target, out.home, skewed(midway))
    assert going.target == out.target and going.moves == len(midway.moves_to(out.target))
    assert "the migration in progress goes on" in going.text


def test_the_reader_moves_nothing_for_the_starting_count_or_the_one_held(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    control = reader(tmp_path, active=2, min_items=10**9)  # loads alone move nothing
    start = control.initialOffset()
    (ck / "commits").mkdir(parents=True)
    (ck / "commits" / "0").write_text("v1")  # batch 0 committed, with skewed slot loads
    SlotLoads(control.state_url).write(0, "task0", skewed(Layout.default(4, 2)))
    handle = QueryControl(str(ck))
    first = handle.rescale(2)
    offset = control.latestOffset(start)
    assert offset["assignment"] == start["assignment"] and "moved" not in offset
    assert offset["target"] is None and offset["home"] is None and offset["active"] == 2
    assert offset["requests"] == [
        {
            "request": first.name,
            "kind": "rescale",
            "decision": "2 active partitions already: nothing new",
        }
    ]
    assert offset["decisions"] == 1  # a request consumed is a decision: it says so
    quiet = control.latestOffset(offset)
    assert not EXPLAINING & quiet.keys() and quiet["consumed"] == first.name
    handle.rescale(3)
    handle.rescale(3)  # asked twice: the second changes nothing
    moving = control.latestOffset(quiet)
    target = moving["target"] or moving["assignment"]
    decisions = [r["decision"] for r in moving["requests"]]
    assert decisions[0].startswith("2 -> 3 active partitions") and decisions[1].startswith(
        "3 active partitions already"
    )
    assert moving["home"] == target and set(target) == {0, 1, 2}
