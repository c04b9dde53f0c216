"""The stores' commit protocol, on a POSIX file system and on one without rename.

Each store decides by one capability (:func:`renames_atomically`) whether a whole-file write
is a temporary and a rename, or one upload straight to its name. The object-store side is
exercised here on local disk by a file system with exactly an object store's primitives: an
upload that appears whole when it completes (or never, if discarded), a copy, a delete, and no
rename at all (``mv`` fails the test). The S3 suites run the same stores on a real S3 server;
this module checks the protocol step by step: a crash (an exception) before any one file
operation of a commit, then a restart that runs the batch again, ends in exactly the files
of an unbroken run, with nothing left behind.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import fsspec
import pyarrow as pa
import pytest
from fsspec.implementations.local import LocalFileSystem
from fsspec.implementations.memory import MemoryFileSystem
from fsspec.spec import AbstractBufferedFile

from flamestream.model import GlobalTime
from flamestream.spark.connector.options import OptionReader
from flamestream.spark.durable import (
    QueryCheckpoint,
    filesystem,
    open_atomically,
    renames_atomically,
    stale_temporaries,
    write_atomically,
)
from flamestream.spark.durable.barrier import KEEP_MARKERS, BarrierStore
from flamestream.spark.durable.loop import AckTable
from flamestream.spark.durable.state import StateStore
from pyspark_flamestream.sinks.files import FilesOutput, _hidden


class Crash(Exception):
    """The process died here."""


class _Countdown:
    """Raises :class:`Crash` at the ``budget``-th file operation that changes something."""

    budget: ClassVar[int | None] = None
    done: ClassVar[int] = 0
    #: called before every changing operation: a reader looking at each state in turn
    watch: ClassVar[Callable[[], None] | None] = None

    @classmethod
    def arm(cls, budget: int | None) -> None:
        _Countdown.budget, _Countdown.done = budget, 0

    @classmethod
    def step(cls) -> None:
        if _Countdown.watch is not None:
            _Countdown.watch()
        _Countdown.done += 1
        if _Countdown.budget is not None and _Countdown.done >= _Countdown.budget:
            _Countdown.budget = None  # the process is gone: the next run starts afresh
            raise Crash(f"crashed before file operation {_Countdown.done}")


class CrashingPosix(LocalFileSystem):
    """Local disk (renames atomically) that can crash before any changing operation."""

    protocol = ("crashposix", "file")

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        if "r" not in mode:
            _Countdown.step()
        return super()._open(path, mode, **kwargs)

    def mv(self, *args: Any, **kwargs: Any) -> None:
        _Countdown.step()
        super().mv(*args, **kwargs)

    def rm(self, *args: Any, **kwargs: Any) -> None:
        _Countdown.step()
        super().rm(*args, **kwargs)


class _Upload(AbstractBufferedFile):
    """An object store's upload: the object appears, whole, when the file is closed."""

    def _initiate_upload(self) -> None:
        self.chunks: list[bytes] = []

    def _upload_chunk(self, final: bool = False) -> bool:
        self.chunks.append(self.buffer.getvalue())
        if final:
            _Countdown.step()  # the upload's completion: the one request that publishes
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            Path(self.path).write_bytes(b"".join(self.chunks))
        return True

    def discard(self) -> None:
        self.chunks = []


class CrashingObjectStore(LocalFileSystem):
    """Local disk with an object store's primitives only (see the module docstring)."""

    protocol = ("crashobject",)

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        if "r" in mode:
            return super()._open(path, mode, **kwargs)
        return _Upload(self, self._strip_protocol(path), mode, block_size=1 << 30)

    def mv(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("an object store has no rename")

    def cp_file(self, *args: Any, **kwargs: Any) -> None:
        _Countdown.step()
        super().cp_file(*args, **kwargs)

    def rm(self, *args: Any, **kwargs: Any) -> None:
        _Countdown.step()
        super().rm(*args, **kwargs)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        """An object store has no folders: nothing to make (and nothing to count)."""

    def pipe_file(self, path: str, value: bytes, *args: Any, **kwargs: Any) -> None:
        """An object named ``…/`` is a folder marker: a folder here."""
        if path.endswith("/") and not value:
            Path(self._strip_protocol(path)).mkdir(parents=True, exist_ok=True)
            return
        super().pipe_file(path, value, *args, **kwargs)


KINDS = {"posix": CrashingPosix, "object": CrashingObjectStore}
for _name, _cls in KINDS.items():
    fsspec.register_implementation(_cls.protocol[0], _cls, clobber=True)


@pytest.fixture(autouse=True)
def _disarmed() -> Iterator[None]:
    _Countdown.arm(None)
    yield
    _Countdown.arm(None)


def url(kind: str, folder: Path) -> str:
    return f"{KINDS[kind].protocol[0]}://{folder}"


def leftovers(folder: Path) -> list[str]:
    """Files a crash left: temporaries and hidden names."""
    return sorted(
        str(p.relative_to(folder))
        for p in folder.rglob("*")
        if p.is_file() and (p.name.endswith(".tmp") or p.name.startswith("."))
    )


def test_the_capability_is_decided_by_the_file_system():
    assert renames_atomically(LocalFileSystem())
    assert renames_atomically(CrashingPosix())
    assert not renames_atomically(CrashingObjectStore())
    assert not renames_atomically(MemoryFileSystem())


@pytest.mark.parametrize("kind", KINDS)
def test_a_failed_atomic_write_leaves_the_file_as_it_was(kind: str, tmp_path: Path):
    fs, root = filesystem(url(kind, tmp_path))
    path = f"{root}/a/marker.json"
    write_atomically(fs, path, b"first")
    with pytest.raises(RuntimeError), open_atomically(fs, path) as out:
        out.write(b"half of a second")
        raise RuntimeError("the writer failed")
    assert (tmp_path / "a" / "marker.json").read_bytes() == b"first"
    assert leftovers(tmp_path) == []


def test_stale_temporaries_are_those_of_earlier_numbers():
    paths = [
        "s/.000000000003.state.1f.tmp",
        "s/.000000000005.state.tmp",
        "s/000000000002.state.tmp",  # an older release's name
        "s/000000000003.state",
        "s/.part-1.jsonl.tmp",
    ]
    assert stale_temporaries(paths, 5) == [paths[0], paths[2]]


# --- the barrier store -----------------------------------------------------------------------


def rows(batch: int) -> pa.Table:
    """Batch ``batch``'s staged rows: some below its min-time, one above."""
    return pa.table(
        {
            "ts": pa.array([batch * 10 + 1, batch * 10 + 5, batch * 10 + 12], pa.int64()),
            "front": pa.array([0, 1, 0], pa.int32()),
            "value": [f"{batch}-{n}" for n in range(3)],
        }
    )


BATCHES = 7
CRASHED = 3


def run_barrier(store_url: str, crash_at: int | None) -> dict[int, list[str]]:
    """Batches 0.. committed in turn; batch :data:`CRASHED` crashes at ``crash_at``, restarts.

    The outputs by batch id, as a sink names them (a repeated release overwrites).
    """
    store = BarrierStore(store_url)
    released: dict[int, list[str]] = {}

    def release(batch_id: int, out: pa.Table | None) -> None:
        released[batch_id] = [] if out is None else out.column("value").to_pylist()

    for batch in range(BATCHES):
        min_time = GlobalTime(batch * 10 + 10, 0)
        attempt = 0
        if batch == CRASHED:
            _Countdown.arm(crash_at)
            try:
                part = store.stage(batch, 0, rows(batch), attempt=attempt)
                store.commit(batch, [part], min_time, release)
                store.forget_before(batch - KEEP_MARKERS)
            except Crash:
                attempt = 1  # the restarted query's task attempt
            _Countdown.arm(None)
        part = store.stage(batch, 0, rows(batch), attempt=attempt)
        store.commit(batch, [part], min_time, release)
        store.forget_before(batch - KEEP_MARKERS)
    return released


def barrier_steps(kind: str, folder: Path) -> int:
    """The changing file operations of batch :data:`CRASHED`'s stage and commit."""
    _Countdown.arm(None)
    store = BarrierStore(url(kind, folder))
    for batch in range(CRASHED + 1):
        if batch == CRASHED:
            _Countdown.done = 0
        part = store.stage(batch, 0, rows(batch))
        store.commit(batch, [part], GlobalTime(batch * 10 + 10, 0), lambda b, r: None)
        store.forget_before(batch - KEEP_MARKERS)
    return _Countdown.done


@pytest.mark.parametrize("kind", KINDS)
def test_a_crash_before_any_step_of_a_commit_ends_as_an_unbroken_run(
    kind: str, tmp_path_factory: pytest.TempPathFactory
):
    steps = barrier_steps(kind, tmp_path_factory.mktemp("count"))
    assert steps >= 3  # staged, pending, marker at least
    unbroken_folder = tmp_path_factory.mktemp("unbroken")
    unbroken = run_barrier(url(kind, unbroken_folder), None)
    assert sorted(v for out in unbroken.values() for v in out) == sorted(
        f"{b}-{n}" for b in range(BATCHES - 1) for n in range(3)
    ) + [f"{BATCHES - 1}-{n}" for n in range(2)]
    markers = sorted(p.name for p in (unbroken_folder / "commits").iterdir())
    for crash_at in range(1, steps + 1):
        folder = tmp_path_factory.mktemp(f"crash{crash_at}")
        assert run_barrier(url(kind, folder), crash_at) == unbroken, crash_at
        assert leftovers(folder) == [], crash_at
        assert sorted(p.name for p in (folder / "commits").iterdir()) == markers
        staged = sorted(p.name for p in (folder / "staging").iterdir())
        assert staged == sorted(p.name for p in (unbroken_folder / "staging").iterdir())


def test_markers_are_kept_in_step_with_sparks_offset_log(tmp_path: Path):
    store = BarrierStore(str(tmp_path / "sink"))
    for batch in range(12):
        part = store.stage(batch, 0, rows(batch), attempt=0)
        store.commit(batch, [part], GlobalTime(batch * 10 + 10, 0), lambda b, r: None)
    (tmp_path / "ck" / "offsets").mkdir(parents=True)
    for batch in range(6, 12):  # Spark kept the newest six batches of its log
        (tmp_path / "ck" / "offsets" / str(batch)).write_text("v1")
    before = QueryCheckpoint(str(tmp_path / "ck")).retained_from(11, KEEP_MARKERS)
    assert before == 6
    assert store.forget_before(before) == 6
    left = sorted(int(p.name.split(".")[0]) for p in (tmp_path / "sink" / "commits").iterdir())
    assert left == list(range(6, 12))
    # the next commit reads its previous marker: still there
    outcome = store.commit(12, [None], GlobalTime(200, 0), lambda b, r: None)
    assert outcome.released == 1  # batch 11's row above its min-time, pending until now
    # Spark keeping fewer batches than the stores' margin does not take the margin
    assert QueryCheckpoint(str(tmp_path / "none")).retained_from(12, KEEP_MARKERS) == 10


@pytest.mark.parametrize("kind", KINDS)
def test_state_snapshots_keep_two_and_sweep_what_crashes_left(kind: str, tmp_path: Path):
    store = StateStore(url(kind, tmp_path), "g")
    folder = tmp_path / "g" / "part-00000"
    for batch in range(5):
        _Countdown.arm(1 if batch == 2 and kind == "posix" else None)
        try:
            store.save(0, batch, b"s%d" % batch)
        except Crash:
            # a crash between opening the temporary and the rename: the temporary stays
            (folder / f".{batch:012d}.state.0a.tmp").write_bytes(b"half")
    assert sorted(p.name for p in folder.iterdir()) == [
        "000000000003.state",
        "000000000004.state",
    ]
    assert store.load(0, 4) == b"s3"


# --- the files sink, release=tasks -----------------------------------------------------------


def files_sink(kind: str, folder: Path) -> FilesOutput:
    return FilesOutput(OptionReader("sink files", {"path": url(kind, folder)}))


def part_rows(partition: int) -> pa.Table:
    return pa.table({"ts": pa.array([partition, partition + 2], pa.int64()), "v": ["x", "y"]})


def write_parts(sink: FilesOutput, batch: int, runs: int = 1) -> list[str]:
    """A batch's two tasks write their parts (the second ``runs`` of them)."""
    names = [sink.write_part(batch, 0, part_rows(0))]
    names += [sink.write_part(batch, 1, part_rows(1), run) for run in range(runs)]
    return names


def visible(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("part-*"))}


def crashed_then_replayed(
    kind: str, folder: Path, crash_at: int | None, first_runs: int
) -> Callable[[], None]:
    """Batch 4 written (``first_runs`` runs in task 1) and published with a crash, replayed."""
    sink = files_sink(kind, folder)
    killed = folder / _hidden("part-000000000004-00001-7.jsonl", 99)
    _Countdown.arm(crash_at)
    try:
        names = write_parts(sink, 4, first_runs)
        killed.write_bytes(b'{"half":')  # an attempt killed mid-write: its part, hidden
        sink.publish(4, names)
    except Crash:
        pass
    _Countdown.arm(None)
    sink.publish(4, write_parts(sink, 4))  # the restart runs batch 4 again
    return lambda: sink.discard(4, write_parts(sink, 4))  # a replay after the marker


@pytest.mark.parametrize("kind", KINDS)
def test_a_crash_before_any_step_of_publishing_ends_as_an_unbroken_run(
    kind: str, tmp_path_factory: pytest.TempPathFactory
):
    unbroken_folder = tmp_path_factory.mktemp("unbroken")
    sink = files_sink(kind, unbroken_folder)
    sink.publish(4, write_parts(sink, 4))
    unbroken = visible(unbroken_folder)
    assert list(unbroken) == [
        "part-000000000004-00000.jsonl",
        "part-000000000004-00001.jsonl",
    ]
    _Countdown.arm(None)
    write_parts(files_sink(kind, tmp_path_factory.mktemp("count")), 4, 2)
    steps = _Countdown.done + 8  # the writes, then more than publishing takes
    for crash_at in range(1, steps + 1):
        folder = tmp_path_factory.mktemp(f"crash{crash_at}")
        replay_after_marker = crashed_then_replayed(kind, folder, crash_at, first_runs=2)
        # the first attempt's extra run (a part the replay did not write) is gone
        assert visible(folder) == unbroken, crash_at
        assert leftovers(folder) == [], crash_at
        replay_after_marker()
        assert visible(folder) == unbroken and leftovers(folder) == [], crash_at


@pytest.mark.parametrize("kind", KINDS)
def test_a_batch_released_by_the_commit_is_one_whole_file(kind: str, tmp_path: Path):
    sink = files_sink(kind, tmp_path)
    _Countdown.arm(1)  # the first write crashes: nothing appears
    with pytest.raises(Crash):
        sink.release(2, part_rows(0))
    assert visible(tmp_path) == {}
    sink.release(2, part_rows(0))  # the replay
    sink.release(2, part_rows(0))  # a replay of a replay: the same file
    assert [json.loads(line)["v"] for line in (tmp_path / "part-000000000002.jsonl").open()] == [
        "x",
        "y",
    ]
    assert leftovers(tmp_path) == []


def test_ack_tables_collected_behind_an_earlier_collection_stay_right(tmp_path: Path):
    """The sink's retention trails the loop channel's: collecting behind it changes nothing."""
    table = AckTable(str(tmp_path))
    for batch in range(10):  # each batch sends one item and receives the one sent before
        table.contribute(batch, "send-0", {(batch, 0): 1000 + batch})
        if batch:
            table.contribute(batch, "recv-0", {(batch - 1, 0): 1000 + batch - 1})
    want = table.after(9)
    assert want == {(9, 0): 1009}
    table.collect(8)  # the loop channel, 3 behind its reads
    table.collect(3)  # the sink, in step with Spark's log: behind it
    tables = sorted(p.name for p in (tmp_path / "ack" / "table").iterdir())
    assert tables == ["000000000007.json", "000000000009.json"]
    assert sorted(p.name for p in (tmp_path / "ack").iterdir()) == ["8", "9", "table"]
    (tmp_path / "ack" / "table" / "000000000009.json").unlink()  # recomputed from 7 on
    assert table.after(9) == want
    table.collect(10)
    assert sorted(p.name for p in (tmp_path / "ack" / "table").iterdir()) == ["000000000009.json"]
    assert table.after(9) == want
