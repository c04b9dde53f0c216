"""The barrier's commit protocol without Spark: every row released once, in order, replays inert.

Rows ``(ts, front, value)`` are staged over several batches; each batch commits with a
min-time that never goes back. Some commits are repeated (a replayed batch: same parts, same
min-time). Whatever the split into batches and the min-times, the releases together are
every row whose time the last min-time passed, each exactly once, each release in meta order
and after every earlier one; the rest is pending.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from flamestream.model import END_OF_TIME, GlobalTime
from flamestream.spark.durable.barrier import BarrierStore

from ..examples import examples

times = st.tuples(st.integers(0, 30), st.integers(0, 2))


def table(rows: list[tuple[int, int, str]]) -> pa.Table:
    return pa.table(
        {
            "ts": pa.array([r[0] for r in rows], pa.int64()),
            "front": pa.array([r[1] for r in rows], pa.int32()),
            "value": pa.array([r[2] for r in rows], pa.string()),
        }
    )


@settings(max_examples=examples(80), deadline=None)
@given(
    batches=st.lists(st.lists(times, max_size=5), min_size=1, max_size=5),
    steps=st.lists(times, min_size=5, max_size=5),
    replays=st.lists(st.booleans(), min_size=5, max_size=5),
    end=st.booleans(),
)
def test_commits_release_each_row_once_in_order_and_replays_do_nothing(
    tmp_path_factory, batches, steps, replays, end
):
    store = BarrierStore(str(tmp_path_factory.mktemp("barrier")))
    released: list[tuple[int, int, str]] = []
    calls: list[int] = []

    def release(batch_id: int, rows: pa.Table | None) -> None:
        calls.append(batch_id)
        if rows is not None:
            columns = (rows.column(c).to_pylist() for c in ("ts", "front", "value"))
            released.extend(zip(*columns, strict=True))

    min_times = sorted(GlobalTime(*t) for t in steps)[: len(batches)]
    if end:
        min_times[-1] = END_OF_TIME
    # what reaches the sink in batch b lies at or above the min-time the commit before used:
    # nothing older can arrive any more (that is what the min-time promises)
    floors = [GlobalTime(0, 0), *min_times]
    per_batch = [
        [(*max(GlobalTime(*t), floors[b]), f"b{b}r{i}") for i, t in enumerate(batch)]
        for b, batch in enumerate(batches[: len(min_times)])
    ]
    rows = [row for batch in per_batch for row in batch]
    for b, min_time in enumerate(min_times):
        mine = table(per_batch[b])
        part = store.stage(b, 0, mine)
        outcome = store.commit(b, [part], min_time, release)
        assert not outcome.skipped
        if replays[b]:  # the same batch committed again, as after a crash past the marker
            again = store.commit(b, [store.stage(b, 0, mine)], min_time, release)
            assert again.skipped and again.released == outcome.released
    last = min_times[-1]
    want = sorted(r for r in rows if GlobalTime(r[0], r[1]) < last)
    assert sorted(released) == want  # each row once
    assert calls == list(range(len(min_times)))  # one release per batch, none for replays
    assert store.pending_rows() == len(rows) - len(want)
    in_order = [(ts, front) for ts, front, _ in released]
    assert in_order == sorted(in_order)  # within a release and across releases


def test_a_marker_left_by_an_earlier_commit_answers_without_reading_anything(tmp_path: Path):
    store = BarrierStore(str(tmp_path))
    part = store.stage(0, 0, table([(1, 0, "a"), (5, 0, "b")]))
    first = store.commit(0, [part], GlobalTime(3, 0), lambda b, rows: None)
    (tmp_path / "staging").rename(tmp_path / "gone")  # a replay finds its marker first
    again = store.commit(0, [part], GlobalTime(3, 0), lambda b, rows: None)
    assert (again.released, again.pending, again.skipped) == (first.released, 1, True)
