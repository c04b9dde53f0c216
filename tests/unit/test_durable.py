"""The checkpoint's one owner: Spark's logs read in one place, atomic writes, numbered folders."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from flamestream.spark.durable import (
    GRAPH_DIR,
    SINK_DIR,
    QueryCheckpoint,
    batch_id_of_task,
    filesystem,
    numbered,
    write_atomically,
)

from ..examples import examples


def offset_log(ck: Path, batch: int, *sources: str) -> None:
    """An offset log file as Spark writes it: version, metadata, one line per source."""
    (ck / "offsets").mkdir(parents=True, exist_ok=True)
    lines = ["v1", json.dumps({"batchWatermarkMs": 0}), *sources]
    (ck / "offsets" / str(batch)).write_text("\n".join(lines))


def test_source_offsets_are_the_lines_after_the_header_parsed(tmp_path: Path):
    front = {"flamestream": 2, "fronts": []}
    offset_log(tmp_path, 3, json.dumps(front), "not json: another source", "17")
    log = QueryCheckpoint(str(tmp_path) + "/")
    assert log.source_offsets(3) == [front, 17]
    assert log.offsets_where(3, lambda o: "fronts" in o) == [front]
    assert log.source_offsets(4) is None
    assert log.offsets_where(4, lambda o: True) == []
    assert log.offset_path(3).endswith("/offsets/3")


def test_logged_and_committed_batches(tmp_path: Path):
    log = QueryCheckpoint(str(tmp_path))
    assert log.logged_batches() == [] and log.last_committed_batch() == -1
    for batch in (0, 1, 10, 2):
        offset_log(tmp_path, batch, "{}")
    (tmp_path / "offsets" / ".1.tmp").write_text("")  # Spark's temporary files
    (tmp_path / "commits").mkdir()
    for batch in (0, 1, 2):
        (tmp_path / "commits" / str(batch)).write_text("v1")
    assert log.logged_batches() == [0, 1, 2, 10]
    assert log.last_committed_batch() == 2


def test_stores_live_under_the_checkpoint():
    log = QueryCheckpoint("s3://bucket/ck/")
    assert log.graph_url == f"s3://bucket/ck/{GRAPH_DIR}"
    assert log.sink_url == f"s3://bucket/ck/{SINK_DIR}"


def test_outside_a_task_there_is_no_batch():
    assert batch_id_of_task() == -1


@settings(max_examples=examples(60), deadline=None)
@given(
    numbers=st.sets(st.integers(0, 10**12), max_size=6),
    racing=st.booleans(),
    width=st.sampled_from([0, 12]),
)
def test_numbered_lists_exactly_what_was_written_atomically(
    tmp_path_factory, numbers: set[int], racing: bool, width: int
):
    folder = tmp_path_factory.mktemp("store")
    fs, root = filesystem(str(folder))
    for number in numbers:
        write_atomically(fs, f"{root}/{number:0{width}d}.state", b"x" * (number % 7), racing=racing)
        write_atomically(fs, f"{root}/sub/{number}", b"y", racing=racing)
    (folder / "000000000099.state.tmp").write_text("left by a crash")
    (folder / "notes.state").write_text("not numbered")
    assert numbered(fs, root, ".state") == sorted(numbers)
    assert numbered(fs, f"{root}/sub") == sorted(numbers)
    assert not list(folder.glob("sub/*.tmp"))
    assert numbered(fs, f"{root}/missing") == []


def test_the_state_bytes_gauge_lists_the_snapshots_at_most_once_per_period(tmp_path: Path):
    """The sink reads the state's size at every commit; the listing behind it is throttled."""
    from flamestream.spark.durable import QueryCheckpoint
    from flamestream.spark.durable.state import StateBytesGauge, state_bytes

    checkpoint = str(tmp_path / "ck")
    part = Path(QueryCheckpoint(checkpoint).graph_url) / "count.grouping" / "part-00000"
    part.mkdir(parents=True)
    (part / "000000000000.state").write_bytes(b"x" * 10)
    (part / "000000000001.state").write_bytes(b"x" * 25)  # the newest: what counts
    assert state_bytes(checkpoint) == 25
    throttled, fresh = StateBytesGauge(every=3600.0), StateBytesGauge(every=0.0)
    assert throttled.of(checkpoint) == fresh.of(checkpoint) == 25
    (part / "000000000002.state").write_bytes(b"x" * 40)
    assert throttled.of(checkpoint) == 25  # not listed again within the period
    assert fresh.of(checkpoint) == 40
    assert StateBytesGauge().of(str(tmp_path / "no-graph")) == 0
