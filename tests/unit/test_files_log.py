"""The files sink's log of committed files (``_spark_metadata``): its format and its protocol.

The log is Spark's own file sink log, so Spark's readers go by it: these tests check the
format against lines Spark 4.3's sink wrote, compactions and their intervals against Spark's
rules, and, through the store-protocol file systems of :mod:`tests.unit.test_store_protocol`
(a POSIX one and one with an object store's primitives only), that a reader going by the log
sees whole committed batches at every moment of a commit, a crash before any file operation
and its replay (with parts of another shape) included, while a reader listing the folder does
not.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flamestream.errors import ConfigError
from flamestream.model import GlobalTime
from flamestream.spark.connector.options import OptionReader
from flamestream.spark.connector.sink import RETAIN_EVERY, BarrierWriter
from flamestream.spark.durable import SINK_DIR, QueryCheckpoint
from flamestream.spark.durable.barrier import BarrierStore
from flamestream.spark.durable.sink_log import (
    METADATA_DIR,
    LoggedFile,
    SinkLog,
    committed_files,
    derive_interval,
    folder_uri,
    is_compaction,
    last_compaction,
    log_interval,
    log_state,
)
from pyspark_flamestream.sinks.files import FilesOutput

from ..examples import examples
from .test_sink_columns import FRONT_ROWS
from .test_store_protocol import KINDS, Crash, _Countdown, leftovers, url

#: A line Spark 4.3's own file sink wrote (``spark.sql.streaming.fileSink``, a folder with a
#: space in its name): the log's lines must read the same.
SPARKS_LINE = (
    '{"path":"file:///srv/probe/out%20dir/part-00000-132eb9bd-c000.json","size":775,'
    '"isDir":false,"modificationTime":1795825277412,"blockReplication":1,'
    '"blockSize":33554432,"action":"add"}'
)


def test_a_line_is_sparks_sink_file_status_byte_for_byte():
    logged = LoggedFile(
        "file:///srv/probe/out%20dir/part-00000-132eb9bd-c000.json", 775, 1795825277412
    )
    assert logged.line() == SPARKS_LINE
    assert LoggedFile.parse(SPARKS_LINE) == logged
    assert folder_uri("/srv/probe/out dir") == "file:///srv/probe/out%20dir"


def test_folder_uris_are_absolute_encoded_and_keep_a_remote_scheme(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.chdir(tmp_path)
    assert folder_uri("rel/out") == f"file://{tmp_path}/rel/out"
    assert folder_uri("file:///a/b c%/ü") == "file:///a/b%20c%25/%C3%BC"
    assert folder_uri("memory://bucket/out/") == "memory:///bucket/out"
    assert SinkLog("/a/b c").file_uri("part-1 #.jsonl") == "file:///a/b%20c/part-1%20%23.jsonl"


@settings(max_examples=examples(200), deadline=None)
@given(default=st.integers(1, 40), compaction=st.integers(0, 400))
def test_a_derived_interval_makes_the_compaction_a_compaction(default: int, compaction: int):
    """Spark's ``deriveCompactInterval``: the reader finds the compaction where it looks."""
    interval = derive_interval(default, compaction)
    assert is_compaction(compaction, interval)
    assert last_compaction(compaction + interval, interval) == compaction + interval
    assert log_interval([compaction], default) == interval


def logged(uri: str, n: int) -> LoggedFile:
    return LoggedFile(f"{uri}/part-{n:012d}.jsonl", 10 + n, 1_700_000_000_000 + n)


@settings(max_examples=examples(60), deadline=None)
@given(
    interval=st.integers(1, 5),
    batches=st.lists(st.integers(0, 3), min_size=1, max_size=14),  # files per batch
    rebuilt=st.integers(-1, 13),
)
def test_a_reader_gets_every_logged_file_once_however_compacted_rebuilt_or_cleaned(
    interval: int, batches: list[int], rebuilt: int, tmp_path_factory: pytest.TempPathFactory
):
    """Batches up to ``rebuilt`` come from a rebuild (a folder logged late), the rest one by one."""
    folder = tmp_path_factory.mktemp("log")
    log = SinkLog(str(folder), interval)
    files = {
        b: [logged(log.uri, 100 * b + k) for k in range(count)] for b, count in enumerate(batches)
    }
    newest = len(batches) - 1
    rebuilt = min(rebuilt, newest)
    if rebuilt >= 0:
        log.rebuild(rebuilt, {b: files[b] for b in range(rebuilt + 1)})
    for batch in range(rebuilt + 1, newest + 1):
        log.add(batch, files[batch])
    want = sorted(
        str(folder / f"part-{100 * b + k:012d}.jsonl")
        for b, c in enumerate(batches)
        for k in range(c)
    )
    assert sorted(committed_files(str(folder)) or []) == want
    # a reader set to Spark's default finds the interval from the compactions, if any
    assert log_state(str(folder), 10) == (interval if newest >= interval - 1 else 10, newest)
    log.forget_before(newest)  # what a reader needs stays
    assert sorted(committed_files(str(folder)) or []) == want
    kept = [p.name for p in (folder / METADATA_DIR).iterdir()]
    assert len(kept) == newest - max(last_compaction(newest, interval), 0) + 1, kept


def test_a_folder_without_a_log_has_no_committed_files(tmp_path: Path):
    assert committed_files(str(tmp_path)) is None
    SinkLog(str(tmp_path)).make_folder()
    assert committed_files(str(tmp_path)) == []


# --- the commit protocol, with the barrier store -------------------------------------------

INTERVAL = 2
BATCHES = 6
CRASHED = 3


def task_rows(batch: int, task: int) -> pa.Table:
    return pa.table(
        {
            "ts": pa.array([batch * 10 + task, batch * 10 + task + 2], pa.int64()),
            "v": [f"{batch}/{task}/a", f"{batch}/{task}/b"],
        }
    )


def staged_rows(batch: int) -> pa.Table:
    """Rows the commit releases: two below the batch's min-time, one above (released next)."""
    return pa.table(
        {
            "ts": pa.array([batch * 10 + 1, batch * 10 + 5, batch * 10 + 12], pa.int64()),
            "front": pa.array([0, 1, 0], pa.int32()),
            "v": [f"{batch}/c{n}" for n in range(3)],
        }
    )


def write_task_parts(sink: FilesOutput, batch: int, split: bool) -> list[str]:
    """Two tasks' parts; ``split``: task 1's rows in two runs (another shape, same rows)."""
    names = [sink.write_part(batch, 0, task_rows(batch, 0))]
    rows = task_rows(batch, 1)
    if split:
        return names + [sink.write_part(batch, 1, rows.slice(r, 1), r) for r in range(2)]
    return [*names, sink.write_part(batch, 1, rows)]


def commit_batch(store: BarrierStore, sink: FilesOutput, batch: int, split: bool) -> None:
    """One batch of a ``release=tasks`` files sink, as ``BarrierWriter.commit`` runs it."""
    written = write_task_parts(sink, batch, split)
    staged = store.stage(batch, 0, staged_rows(batch), attempt=int(split))

    def release(batch_id: int, rows: pa.Table | None) -> None:
        if rows is not None:
            sink.release(batch_id, rows)
        sink.publish(batch_id, written)

    def committed(batch_id: int, replayed: bool) -> None:
        if replayed:
            sink.discard(batch_id, written)
        sink.committed(batch_id, replayed)

    store.commit(batch, [staged], GlobalTime(batch * 10 + 10, 0), release, committed=committed)
    sink.forget_before(batch - 1)


def lines_by_batch(paths: list[str]) -> dict[int, Counter[str]]:
    """The JSON lines of files ``part-<batch>…``, by batch."""
    found: dict[int, Counter[str]] = {}
    for path in paths:
        batch = int(Path(path).name[len("part-") :][:12])
        found.setdefault(batch, Counter()).update(Path(path).read_text().splitlines())
    return found


def prefix_of(want: dict[int, Counter[str]]) -> Callable[[dict[int, Counter[str]]], bool]:
    """Whether what a reader saw is batches 0..k of ``want``, each whole, for some k."""

    def check(seen: dict[int, Counter[str]]) -> bool:
        return sorted(seen) == list(range(len(seen))) and all(seen[b] == want[b] for b in seen)

    return check


def run_sink(
    kind: str, folder: Path, crash_at: int | None, watch: Any = None, watch_from: int = 0
) -> int:
    """Batches 0..: batch :data:`CRASHED` crashes at ``crash_at`` and runs again, split.

    ``watch`` looks at every state from batch ``watch_from`` on. The changing file
    operations of the crashed batch's first commit, up to the crash.
    """
    store = BarrierStore(url(kind, folder / "state"))
    sink = FilesOutput(OptionReader("sink files", {"path": url(kind, folder / "out")}))
    sink.prepare(store.newest_marked())
    sink.log = SinkLog(sink.path, INTERVAL)
    for batch in range(BATCHES):
        _Countdown.watch = watch if batch >= watch_from else None
        if batch != CRASHED:
            commit_batch(store, sink, batch, split=False)
            continue
        _Countdown.arm(crash_at)
        with contextlib.suppress(Crash):
            commit_batch(store, sink, batch, split=False)
        steps = _Countdown.done
        _Countdown.arm(None)
        commit_batch(store, sink, batch, split=True)  # the restart: parts of another shape
        commit_batch(store, sink, batch, split=True)  # a replay after its marker: discarded
    _Countdown.watch = None
    return steps


@pytest.mark.parametrize("kind", KINDS)
def test_a_reader_going_by_the_log_sees_whole_committed_batches_at_every_step(
    kind: str, tmp_path_factory: pytest.TempPathFactory
):
    unbroken = tmp_path_factory.mktemp("unbroken")
    steps = run_sink(kind, unbroken, None)
    assert steps >= 8  # parts, their publishing, the commit's file, pending rows, marker, log
    want = lines_by_batch(committed_files(url(kind, unbroken / "out")) or [])
    assert sorted(want) == list(range(BATCHES))
    assert sum(len(c) for c in want.values()) == BATCHES * 4 + BATCHES * 3 - 1  # one pending
    whole = prefix_of(want)
    listed_wrong = 0

    def reader(folder: Path, seen: list[dict[int, Counter[str]]]) -> Callable[[], None]:
        def read() -> None:
            seen.append(lines_by_batch(committed_files(url(kind, folder / "out")) or []))
            nonlocal listed_wrong
            listed = lines_by_batch([str(p) for p in (folder / "out").glob("part-*")])
            listed_wrong += not whole(listed)

        return read

    seen: list[dict[int, Counter[str]]] = []
    watched = tmp_path_factory.mktemp("watched")
    run_sink(kind, watched, None, reader(watched, seen))
    assert seen and all(whole(s) for s in seen)  # every step of an unbroken run
    tried = examples(steps)  # every point, or (the fast tier) some spread over the commit
    for crash_at in sorted({1 + i * steps // tried for i in range(tried)}):
        folder = tmp_path_factory.mktemp(f"crash{crash_at}")
        seen = []
        run_sink(kind, folder, crash_at, reader(folder, seen), watch_from=CRASHED)
        bad = [s for s in seen if not whole(s)]
        assert not bad, (crash_at, bad[:1])
        assert lines_by_batch(committed_files(url(kind, folder / "out")) or []) == want, crash_at
        assert leftovers(folder / "out") == [], crash_at
    # a reader listing the folder does see batches half published, or an earlier attempt's part
    assert listed_wrong


def test_a_log_ahead_of_the_sinks_markers_is_refused(tmp_path: Path):
    """Another query's output (or this one's from a checkpoint since removed)."""
    SinkLog(str(tmp_path / "out")).add(0, [logged(folder_uri(str(tmp_path / "out")), 0)])
    sink = FilesOutput(OptionReader("sink files", {"path": str(tmp_path / "out")}))
    with pytest.raises(
        ConfigError, match="logs batches up to 0, this checkpoint's sink committed none"
    ):
        sink.prepare(-1)
    sink.prepare(0)  # the same log, once the sink has committed batch 0


def test_a_folder_written_without_a_log_gets_one_from_its_committed_batches(tmp_path: Path):
    """An output folder a sink wrote before it kept the log: rebuilt at the next start."""
    store = BarrierStore(str(tmp_path / "state"))
    sink = FilesOutput(OptionReader("sink files", {"path": str(tmp_path / "out")}))
    sink.prepare(-1)
    for batch in range(24):
        commit_batch(store, sink, batch, split=batch % 2 == 1)
    want = sorted(committed_files(str(tmp_path / "out")) or [])
    assert want == sorted(str(p) for p in (tmp_path / "out").glob("part-*"))
    (tmp_path / "out" / "part-000000000024-00000.jsonl").write_text("{}\n")  # not committed
    for removed in (tmp_path / "out" / METADATA_DIR).iterdir():
        removed.unlink()
    sink.prepare(store.newest_marked())
    assert sorted(committed_files(str(tmp_path / "out")) or []) == want
    names = sorted(p.name for p in (tmp_path / "out" / METADATA_DIR).iterdir())
    assert names == ["19.compact", "20", "21", "22", "23", "9.compact"]
    assert log_state(str(tmp_path / "out"), 7) == (10, 23)  # two compactions pin the interval
    for batch in range(24, 31):
        commit_batch(store, sink, batch, split=False)
    everything = sorted(str(p) for p in (tmp_path / "out").glob("part-*"))
    assert sorted(committed_files(str(tmp_path / "out")) or []) == everything


def test_a_batch_marked_but_not_logged_before_a_crash_is_logged_at_the_next_start(
    tmp_path: Path,
):
    store = BarrierStore(str(tmp_path / "state"))
    sink = FilesOutput(OptionReader("sink files", {"path": str(tmp_path / "out")}))
    sink.prepare(-1)
    for batch in range(12):
        commit_batch(store, sink, batch, split=False)
    want = sorted(committed_files(str(tmp_path / "out")) or [])
    (tmp_path / "out" / METADATA_DIR / "11").unlink()  # killed between marker and log
    assert len(committed_files(str(tmp_path / "out")) or []) < len(want)
    sink.prepare(store.newest_marked())
    assert sorted(committed_files(str(tmp_path / "out")) or []) == want


def test_a_compaction_that_misses_a_batch_fails_loudly(tmp_path: Path):
    log = SinkLog(str(tmp_path), 3)
    log.add(0, [])
    with pytest.raises(FileNotFoundError):
        log.add(2, [])  # batch 1's file is missing: the log would lose its files
    assert [p.name for p in (tmp_path / METADATA_DIR).iterdir()] == ["0"]


# --- the sink's retention --------------------------------------------------------------------


def test_the_sinks_retention_lists_every_retain_every_batches_and_keeps_what_readers_need(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Two LISTs a batch (Spark's offset log, the markers) and the log's, every 10th only."""
    reader = OptionReader(
        "sink files", {"path": str(tmp_path / "out"), "checkpointLocation": str(tmp_path / "ck")}
    )
    made = BarrierWriter(FilesOutput(reader), reader, FRONT_ROWS)
    made.start()
    assert (tmp_path / "out" / METADATA_DIR).is_dir()  # before any file: readers go by it
    offsets = tmp_path / "ck" / "offsets"
    offsets.mkdir(parents=True)
    runs: list[int] = []
    retained_from = QueryCheckpoint.retained_from  # what the retention lists first

    def listed(self: QueryCheckpoint, batch: int, keep: int) -> int:
        runs.append(batch)
        return retained_from(self, batch, keep)

    monkeypatch.setattr(QueryCheckpoint, "retained_from", listed)
    for batch in range(35):
        (offsets / str(batch)).write_text("v1")  # Spark keeps the newest 4 batches
        for old in range(batch - 3):
            (offsets / str(old)).unlink(missing_ok=True)
        done = made.output.committed
        made.store.commit(batch, [None], GlobalTime(batch, 0), lambda b, r: None, committed=done)
        made._retain(batch)
    assert runs == [b for b in range(35) if (b + 1) % RETAIN_EVERY == 0] == [9, 19, 29]
    markers = sorted(p.name for p in (tmp_path / "ck" / SINK_DIR / "commits").iterdir())
    assert markers[0] == f"{29 - 3:012d}.json" and len(markers) == 9  # 26 … 34
    logged = sorted(p.name for p in (tmp_path / "out" / METADATA_DIR).iterdir())
    assert logged[0] == "19.compact" and len(logged) == 16  # from the compaction before 26
