"""The generic front's planning and stamping, driven directly with an in-memory connector.

No Spark: ``latestOffset``, ``partitions`` and ``read`` are plain methods, so these tests run
the planner through many read limits and restarts and check what Spark would checkpoint and
what the read tasks would stamp.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from flamestream.errors import ConfigError, FlameStreamError, RecordError
from flamestream.model import GlobalTime
from flamestream.spark.connector.front import FrontReader, FrontSource, ReaderConfig
from flamestream.spark.connector.offsets import (
    OFFSET_VERSION,
    FrontOffset,
    FrontRange,
    packed_ranges,
)
from flamestream.spark.connector.options import OptionReader
from flamestream.spark.connector.stamping import (
    _each_line_times,
    _parsed_int_times,
    clamp_times,
    json_field_times,
)


class ListSource(FrontSource):
    """Sources are lists of (record time, value); positions are list indexes."""

    kind = "lists"
    record_time_from = "the first element"

    def __init__(self, data: Mapping[str, list[tuple[int, str]]], bounded: bool = False) -> None:
        self.data = {k: list(v) for k, v in data.items()}
        self.bounded = bounded

    def payload_fields(self) -> list[pa.Field]:
        return [pa.field("value", pa.string())]

    def discover(self, known: Mapping[str, int]) -> dict[str, int]:
        return {k: len(v) for k, v in self.data.items()}

    def finished(self, key: str, position: int) -> bool:
        return self.bounded and position >= len(self.data[key])

    def read_range(self, part: FrontRange) -> Iterator[pa.RecordBatch]:
        rows = self.data[part.key][part.start : part.end]
        for first in range(0, len(rows), 2):  # several Arrow batches per range
            chunk = rows[first : first + 2]
            yield pa.RecordBatch.from_pydict(
                {
                    "position": pa.array(
                        range(part.start + first, part.start + first + len(chunk)), pa.int64()
                    ),
                    "time": pa.array([t for t, _ in chunk], pa.int64()),
                    "value": [v for _, v in chunk],
                }
            )

    def record_times(self, key: str, batch: pa.RecordBatch) -> pa.Array:
        return batch.column("time")


def reader(source: FrontSource, **config: Any) -> FrontReader:
    return FrontReader(source, ReaderConfig(**config))


def stamped(front: FrontReader, start: dict[str, Any], end: dict[str, Any]) -> list[tuple]:
    rows = []
    for part in front.partitions(start, end):
        for batch in front.read(part):
            d = batch.to_pydict()
            rows += list(zip(d["ts"], d["front"], d["value"], strict=True))
    return rows


def run(
    make: Any,
    limits: list[int | None],
    *,
    restarts: frozenset[int] = frozenset(),
    available_now: bool = False,
    start: dict[str, Any] | None = None,
) -> tuple[list[tuple], list[dict[str, Any]]]:
    """Plan and read batch after batch (a new reader, as after a restart, at ``restarts``)."""
    front = make()
    if available_now:
        front.prepareForTriggerAvailableNow()
    offset = start or front.initialOffset()
    rows: list[tuple] = []
    offsets = [offset]
    for i in range(200):
        if i in restarts:
            front = make()
            if available_now:
                front.prepareForTriggerAvailableNow()
        limit = limits[i % len(limits)]
        read_limit: ReadLimit = ReadMaxRows(limit) if limit else ReadAllAvailable()
        end = front.latestOffset(offset, read_limit)
        if end == offset:
            break
        assert json.loads(json.dumps(end)) == end  # what Spark writes, verbatim
        rows += stamped(front, offset, end)
        offset = end
        offsets.append(end)
    return rows, offsets


INPUT = {
    "a": [(t, f"a{i}") for i, t in enumerate([5, 3, 3, 10, 11, 2, 40, 41])],
    "b": [(t, f"b{i}") for i, t in enumerate([1, 1, 2])],
    "c": [(t, f"c{i}") for i, t in enumerate([7, 100, 8, 9, 9, 101, 102, 5, 6, 7, 200])],
}


@pytest.mark.parametrize("clock", ["logical", "record"])
def test_global_times_do_not_depend_on_read_limits_or_restarts(clock: str):
    expected = None
    rng = random.Random(11)
    for _ in range(25):
        limits = [rng.choice([None, 1, 2, 3, 5, 7]) for _ in range(rng.randint(1, 4))]
        restarts = frozenset(rng.sample(range(1, 12), rng.randint(0, 3)))
        tasks = rng.choice([None, 1, 2, 3])  # how the ranges are packed into read tasks
        split = rng.choice([500_000, 1, 2, 3])  # and cut into pieces (splitRecords)
        rows, _ = run(
            lambda tasks=tasks, split=split: reader(
                ListSource(INPUT), clock=clock, read_tasks=tasks, split_records=split
            ),
            limits,
            restarts=restarts,
        )
        assert len(rows) == sum(len(v) for v in INPUT.values())
        if expected is None:
            expected = sorted(rows)
        assert sorted(rows) == expected, (limits, restarts, tasks, split)
    assert expected is not None
    by_front: dict[int, list[int]] = {}
    for ts, front, _ in expected:
        by_front.setdefault(front, []).append(ts)
    for times in by_front.values():  # strictly increasing within a front
        assert times == sorted(set(times))
    if clock == "logical":  # ts = position: each front's own clock from 0
        assert by_front[2] == list(range(11))
    else:  # the record's time, clamped monotonic per front
        assert by_front[0] == [5, 6, 7, 10, 11, 12, 40, 41]
        assert by_front[2] == [7, 100, 101, 102, 103, 104, 105, 106, 107, 108, 200]


def test_wall_clock_stamps_all_fronts_of_a_batch_from_one_clock():
    rows, offsets = run(lambda: reader(ListSource(INPUT)), [4])
    before = time.time_ns() // 1000
    assert all(0 < ts <= before + 10**6 for ts, _, _ in rows)
    for offset in offsets[1:]:  # every front reports the batch's horizon
        assert {n for _, _, _, n in offset["fronts"]} == {offset["horizon"]}
        assert offset["base"] > 0


def test_every_later_ts_is_at_or_above_every_earlier_report():
    rng = random.Random(3)
    for clock in ("wall", "logical", "record"):
        limits = [rng.choice([1, 2, 4]) for _ in range(3)]
        front = reader(ListSource(INPUT), clock=clock)
        offset = front.initialOffset()
        reported: dict[int, int] = {}
        while True:
            end = front.latestOffset(offset, ReadMaxRows(limits[len(reported) % 3]))
            if end == offset:
                break
            for ts, f, _ in stamped(front, offset, end):
                assert ts >= reported.get(f, 0)
            for _, f, _, report in end["fronts"]:
                assert report >= reported.get(f, 0)  # reports never go back
                reported[f] = report
            offset = end


def test_offsets_have_a_stable_shape_and_round_trip():
    _, offsets = run(lambda: reader(ListSource(INPUT), clock="logical"), [4])
    first = offsets[1]
    assert list(first) == [
        "flamestream", "front", "seq", "idBase", "clock", "base", "horizon", "fronts", "firstSeen",
    ]  # fmt: skip
    assert first["flamestream"] == OFFSET_VERSION == 2
    assert first["firstSeen"] == [["a", 0], ["b", 0], ["c", 0]]
    assert offsets[2]["firstSeen"] == []
    for offset in offsets:
        assert FrontOffset.from_json(offset).to_json() == offset


def test_logical_reports_are_per_front_and_the_least_one_holds_the_others_back():
    _, offsets = run(lambda: reader(ListSource(INPUT), clock="logical"), [None])
    (end,) = offsets[1:]  # everything in one batch, no front finished (a running stream)
    assert end["fronts"] == [["a", 0, 8, 8], ["b", 1, 3, 3], ["c", 2, 11, 11]]
    assert FrontOffset.from_json(end).report == GlobalTime(3, 1)  # b holds back a's 3..7


def test_available_now_raises_finished_fronts_so_everything_is_released():
    rows, offsets = run(lambda: reader(ListSource(INPUT), clock="logical"), [2], available_now=True)
    last = FrontOffset.from_json(offsets[-1])
    assert all(GlobalTime(ts, f) < last.report for ts, f, _ in rows)
    assert len(rows) == 22
    assert sorted(ts for ts, f, _ in rows if f == 2) == list(range(11))  # still positions
    assert last.report == GlobalTime(11, 0)  # every front at the source's horizon
    # b (3 records) finished long before c: from then on it reports the source's horizon
    b_reports = [o["fronts"][1][3] for o in offsets[1:]]
    horizons = [o["horizon"] for o in offsets[1:]]
    assert b_reports[:2] == [1, 2] and b_reports[2:] == horizons[2:]
    assert b_reports[-1] == 11 > horizons[2]
    # the last batch with records raised every front: no closing batch was needed
    assert stamped(reader(ListSource(INPUT), clock="logical"), offsets[-2], offsets[-1])
    # a second run with nothing new plans no batch at all
    again, more = run(
        lambda: reader(ListSource(INPUT), clock="logical"),
        [2],
        available_now=True,
        start=offsets[-1],
    )
    assert again == [] and more == [offsets[-1]]


def test_available_now_after_a_running_stream_plans_one_closing_batch():
    _, offsets = run(lambda: reader(ListSource(INPUT), clock="record"), [None])
    held = FrontOffset.from_json(offsets[-1]).report
    assert held == GlobalTime(4, 1)  # b stamped 1, 2, 3: everything above waits
    rows, closing = run(
        lambda: reader(ListSource(INPUT), clock="record"),
        [None],
        available_now=True,
        start=offsets[-1],
    )
    assert rows == [] and len(closing) == 2  # one batch without rows
    assert FrontOffset.from_json(closing[-1]).report == GlobalTime(201, 0)
    assert [f[2] for f in closing[-1]["fronts"]] == [8, 3, 11]  # positions unchanged


def test_a_bounded_source_reports_past_its_end_without_available_now():
    front = reader(ListSource(INPUT, bounded=True), clock="logical")
    _, offsets = run(lambda: front, [5])
    assert FrontOffset.from_json(offsets[-1]).report == GlobalTime(11, 0)
    assert len(offsets) == 6  # 22 records, 5 per batch; no batch after the last


def test_an_idle_front_is_raised_once_per_idle_period():
    source = ListSource(INPUT)
    front = reader(source, clock="logical", idle_timeout_ms=50)
    offset = front.initialOffset()
    end = front.latestOffset(offset, ReadAllAvailable())
    assert FrontOffset.from_json(end).report == GlobalTime(3, 1)
    assert front.latestOffset(end, ReadAllAvailable()) == end  # not idle yet: no batch
    time.sleep(0.08)
    raised = front.latestOffset(end, ReadAllAvailable())
    assert raised != end and stamped(front, end, raised) == []  # a batch without rows
    assert FrontOffset.from_json(raised).report == GlobalTime(11, 0)
    time.sleep(0.08)
    assert front.latestOffset(raised, ReadAllAvailable()) == raised  # not twice
    source.data["b"].append((0, "b3"))  # b wakes up: its record comes after its report
    woke = front.latestOffset(raised, ReadAllAvailable())
    assert stamped(front, raised, woke) == [(11, 1, "b3")]


def test_wall_clock_idle_raise_happens_once_per_idle_period():
    front = reader(ListSource(INPUT), idle_timeout_ms=30)
    end = front.latestOffset(front.initialOffset(), ReadAllAvailable())
    time.sleep(0.05)
    raised = front.latestOffset(end, ReadAllAvailable())
    assert raised["horizon"] > end["horizon"]
    time.sleep(0.05)
    assert front.latestOffset(raised, ReadAllAvailable()) == raised


def test_replay_of_a_version_1_offset_stamps_as_it_was_planned():
    source = ListSource(INPUT)
    start = {"flamestream": 1, "front": "lists", "seq": 0, "idBase": 0, "base": 0,
             "horizon": 50, "fronts": [["a", 0, 2], ["b", 1, 1], ["c", 2, 0]]}  # fmt: skip
    end = {**start, "seq": 1, "base": 50, "horizon": 53,
           "fronts": [["a", 0, 4], ["b", 1, 3], ["c", 2, 3]]}  # fmt: skip
    front = reader(source, clock="logical")
    assert sorted(stamped(front, start, end)) == sorted(
        [(50, 0, "a2"), (51, 0, "a3"), (50, 1, "b1"), (51, 1, "b2"),
         (50, 2, "c0"), (51, 2, "c1"), (52, 2, "c2")]
    )  # fmt: skip
    assert FrontOffset.from_json(end).report == GlobalTime(53, 0)
    after = front.latestOffset(end, ReadMaxRows(1))  # the next batch continues in version 2
    assert after["flamestream"] == 2
    assert stamped(front, end, after) == [(53, 0, "a4")]


def test_a_deleted_source_is_a_clear_error_naming_it():
    source = ListSource(INPUT)
    front = reader(source, clock="logical")
    end = front.latestOffset(front.initialOffset(), ReadMaxRows(4))
    del source.data["b"]
    with pytest.raises(FlameStreamError, match=r"source 'b' \(front 1, read up to position 1\)"):
        front.latestOffset(end, ReadMaxRows(4))


@pytest.mark.parametrize(
    ("offset", "found"),
    [
        ({"flamestreamLoop": 1, "through": -1}, "another query"),
        ({"flamestream": 2, "front": "files", "seq": 0, "idBase": 0, "clock": "wall", "base": 0,
          "horizon": 0, "fronts": [], "firstSeen": []}, "written by front files"),
        ({"flamestream": 2, "front": "lists", "seq": 0, "idBase": 7, "clock": "wall", "base": 0,
          "horizon": 0, "fronts": [], "firstSeen": []}, "frontIdBase 7"),
    ],
)  # fmt: skip
def test_an_offset_of_another_query_is_a_clear_error(offset: dict[str, Any], found: str):
    with pytest.raises(FlameStreamError, match=found):
        reader(ListSource(INPUT)).latestOffset(offset, ReadAllAvailable())


def test_record_clock_needs_a_front_with_record_times():
    class NoTimes(ListSource):
        record_time_from = None

    with pytest.raises(ConfigError, match="clock"):
        reader(NoTimes(INPUT), clock="record")


def test_clamping_is_monotonic_and_continues_across_chunks():
    whole, after = clamp_times([4, 4, 1, 9, 3], 2)
    assert whole.to_pylist() == [4, 5, 6, 9, 10] and after == 11
    first, middle = clamp_times([4, 4], 2)
    second, end = clamp_times([1, 9, 3], middle)
    assert first.to_pylist() + second.to_pylist() == whole.to_pylist() and end == after
    assert clamp_times([], 5)[1] == 5


def test_json_field_times_name_the_bad_record():
    batch = pa.record_batch({"position": [0, 7], "value": ['{"t": 3}', '{"u": 1}']})
    with pytest.raises(RecordError, match=r"'t'.*\('f.txt', 7\)|\('f.txt', 7\).*'t'"):
        json_field_times("front files", "f.txt", "t", batch)
    for bad in ['{"t": true}', '{"t": "3"}', "[1]", "not json", '{"t": 1e300}']:
        one = pa.record_batch({"position": [0], "value": [bad]})
        with pytest.raises(RecordError):
            json_field_times("front files", "f.txt", "t", one)


#: Lines a files front may hold: JSON objects with the time field or without it, times of
#: every kind, duplicate keys, nesting, blank lines, two objects in a line, no JSON at all.
time_values = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-10, 10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
)
json_lines = st.one_of(
    st.builds(lambda t, k: json.dumps({"key": k, "t": t}), time_values, st.text(max_size=4)),
    st.builds(lambda t: json.dumps({"t": t, "x": {"t": 1, "y": [1, 2]}}), time_values),
    st.builds(lambda t: f'{{"t": {t}, "t": 5}}', st.integers(0, 9)),
    st.builds(lambda t: f'  {{"t":{t}}}\t', st.integers(0, 10**9)),
    st.builds(lambda t: f'{{"t": {t}}} {{"t": 1}}', st.integers(0, 9)),
    st.sampled_from(["", "   ", "[1]", "5", "not json", '{"u": 1}', '{"t": 1e3}', '{"t": -0}']),
)


@given(st.lists(json_lines, min_size=1, max_size=12), st.integers(0, 3))
def test_json_field_times_read_by_arrow_are_the_line_by_line_times(lines: list[str], cut: int):
    """Whichever lines a batch holds (and a batch may be a slice), the times are the
    line-by-line parse's, and a batch it fails on fails alike; Arrow takes plain int times."""
    batch = pa.record_batch(
        {"position": pa.array(range(len(lines)), pa.int64()), "value": lines}
    ).slice(min(cut, len(lines) - 1))
    try:
        want = _each_line_times("front files", "f.txt", "t", batch).to_pylist()
    except RecordError:
        with pytest.raises(RecordError):
            json_field_times("front files", "f.txt", "t", batch)
        assert _parsed_int_times("t", batch.column("value")) is None
        return
    assert json_field_times("front files", "f.txt", "t", batch).to_pylist() == want
    plain = [json.dumps({"t": t}) for t in want]
    taken = _parsed_int_times("t", pa.array(plain))
    assert taken is not None and taken.to_pylist() == want


def test_a_record_time_batch_cannot_be_replayed_without_record_times():
    class NoTimes(ListSource):
        record_time_from = None

    planner = reader(ListSource(INPUT), clock="record")
    start = planner.initialOffset()
    end = planner.latestOffset(start, ReadMaxRows(3))
    with pytest.raises(FlameStreamError, match="planned with clock=record"):
        reader(NoTimes(INPUT), clock="logical").partitions(start, end)


@given(
    st.lists(st.integers(min_value=1, max_value=1000), max_size=12),
    st.one_of(st.none(), st.integers(min_value=1, max_value=8)),
)
def test_packed_ranges_read_every_range_once_in_balanced_tasks(sizes: list[int], tasks):
    ranges = [FrontRange(f"s{i}", i, 10, 10 + size, 0) for i, size in enumerate(sizes)]
    packed = packed_ranges(ranges, tasks)
    read = [r for task in packed for r in task.ranges]
    assert sorted(read, key=lambda r: r.front) == ranges  # each range exactly once
    assert all(task.ranges for task in packed)  # no empty task
    assert len(packed) == (len(ranges) if tasks is None else min(tasks, len(ranges)))
    for task in packed:  # a task reads its ranges in planning order
        assert [r.front for r in task.ranges] == sorted(r.front for r in task.ranges)
    if ranges and tasks is not None:  # greedy largest-first: at most the mean plus a range
        loads = [sum(r.end - r.start for r in task.ranges) for task in packed]
        assert max(loads) <= sum(sizes) / len(packed) + max(sizes)
    assert packed_ranges(ranges, tasks) == packed  # pure: a replay packs the same


def test_read_tasks_pack_a_batch_and_zero_is_refused():
    front = reader(ListSource(INPUT), read_tasks=2)
    start = front.initialOffset()
    end = front.latestOffset(start, ReadAllAvailable())
    parts = front.partitions(start, end)
    assert [[r.key for r in p.value.ranges] for p in parts] == [["c"], ["a", "b"]]
    with pytest.raises(ConfigError, match="readTasks"):
        ReaderConfig.parse(OptionReader("front lists", {"readTasks": "0"}))


@pytest.mark.parametrize("clock", ["logical", "record"])
def test_a_range_cut_into_pieces_reads_as_the_whole_range(clock: str):
    front = reader(ListSource(INPUT), clock=clock, split_records=2)
    start = front.initialOffset()
    end = front.latestOffset(start, ReadAllAvailable())
    tasks = front.partitions(start, end)
    assert len(tasks) == sum((len(v) + 1) // 2 for v in INPUT.values())  # two records a piece
    whole = reader(ListSource(INPUT), clock=clock)
    assert len(whole.partitions(start, end)) == len(INPUT)
    assert stamped(front, start, end) == stamped(whole, start, end)  # same rows, same order
