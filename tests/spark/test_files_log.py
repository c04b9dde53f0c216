"""Spark's readers of a files sink's folder see exactly the released rows, crashes included.

The files sink logs each committed batch's files in Spark's file sink log
(``<path>/_spark_metadata``), which ``spark.read`` of the folder and ``spark.readStream`` on it
go by. Checked here with real Spark: both readers (JSON and Parquet) see exactly the released
rows and nothing else the folder holds; the log reads both ways with Spark's own sink log,
compactions included; and in a SIGKILL sweep of a ``release=tasks`` query, restarted each time
with another packing of its read tasks (so a replayed batch's parts have another shape than
its killed attempt's), a reader reading the folder in a loop, and after every crash, sees
whole committed batches only, in order: never a batch half published, never an earlier
attempt's part beside the replay's. A plain listing of the folder, read after a crash in the
middle of publishing, does see half a batch: what the log is for.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow.parquet as pq
import pytest
from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from flamestream.spark.durable.sink_log import (
    INTERVAL_CONF,
    METADATA_DIR,
    LoggedFile,
    SinkLog,
    committed_files,
)

from ..crash import crash_at, reachable_in_turn, run_child, run_unbroken, work_args
from . import crash_job
from .conftest import files_front, run_to_files
from .test_crash_recovery import make_input

JOB = "tests.spark.crash_job"


def batch_of(path: str) -> int:
    """The batch a released file belongs to, from its name (``part-<batch>…``)."""
    return int(Path(path).name[len("part-") :][:12])


def lines_by_batch(paths: list[str], work: Path) -> dict[int, Counter[str]]:
    """The lines of the files ``paths``, by batch, the work folder in them made neutral."""
    found: dict[int, Counter[str]] = {}
    for path in paths:
        text = Path(path).read_text().replace(str(work), "<work>")
        found.setdefault(batch_of(path), Counter()).update(text.splitlines())
    return found


def spark_lines(spark: SparkSession, out: Path, work: Path) -> Counter[str]:
    """Every line ``spark.read`` finds in the folder (going by its log)."""
    rows = spark.read.text(str(out)).collect()
    return Counter(row.value.replace(str(work), "<work>") for row in rows)


def prefix(seen: Counter[str], batches: dict[int, Counter[str]]) -> int | None:
    """The k for which ``seen`` is exactly batches 0..k (each whole), else None."""
    total: Counter[str] = Counter()
    for k in range(-1, len(batches)):
        if k >= 0:
            total += batches[k]
        if seen == total:
            return k
    return None


@pytest.fixture(scope="module")
def unbroken(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The crash tests' passthrough, ``release=tasks``, run to its end uninterrupted."""
    work = tmp_path_factory.mktemp("unbroken-log")
    make_input(work / "in")
    source, out, checkpoint = work_args(work)
    run_unbroken(lambda s: crash_job.start(s, source, out, checkpoint, "tasks"), spark)
    return work


@pytest.fixture(scope="module")
def batches(unbroken: Path) -> dict[int, Counter[str]]:
    """The unbroken run's lines by batch, as its log names its files."""
    found = lines_by_batch(committed_files(str(unbroken / "out")) or [], unbroken)
    assert sorted(found) == [0, 1, 2]
    assert sum(sum(c.values()) for c in found.values()) == 27
    return found


def test_spark_read_and_read_stream_see_exactly_the_released_rows(
    spark: SparkSession, unbroken: Path, batches: dict[int, Counter[str]]
):
    out = unbroken / "out"
    logged = sorted(committed_files(str(out)) or [])
    assert logged == sorted(str(p) for p in out.glob("part-*"))  # every released file
    released = Counter(line for c in batches.values() for line in c)
    # what a crash can leave: a part of an earlier attempt of batch 1, a half-written file
    first = Path(logged[-1])
    (out / "part-000000000001-00007.jsonl").write_bytes(first.read_bytes())
    (out / "part-000000000003-00000.jsonl").write_text('{"ts": 1, "va')
    df = spark.read.json(str(out))
    log = SinkLog(str(out))
    assert sorted(df.inputFiles()) == sorted(log.file_uri(Path(p).name) for p in logged)
    rows = Counter(
        json.dumps(r.asDict(), sort_keys=True).replace(str(unbroken), "<work>")
        for r in df.collect()
    )
    assert rows == Counter(json.dumps(json.loads(line), sort_keys=True) for line in released)
    stream = (
        spark.readStream.schema(df.schema)
        .json(str(out))
        .writeStream.format("memory")
        .queryName("files_log_stream")
        .trigger(availableNow=True)
        .start()
    )
    stream.awaitTermination(120)
    streamed = spark.table("files_log_stream").collect()
    assert Counter(json.dumps(r.asDict(), sort_keys=True) for r in streamed) == rows


def test_spark_read_parquet_sees_exactly_the_released_rows(spark: SparkSession, tmp_path: Path):
    make_input(tmp_path / "in")
    df = files_front(spark, tmp_path / "in", maxRecordsPerTrigger=10, clock="logical")
    out = tmp_path / "out"
    run_to_files(df, out, tmp_path / "ck", format="parquet")
    files = sorted(out.glob("part-*.parquet"))
    assert len(files) == 3  # one per batch (release=commit)
    released = [row for path in files for row in pq.read_table(path).to_pylist()]
    (out / "part-000000000002-00000.parquet").write_bytes(files[0].read_bytes())  # not logged
    read = [r.asDict() for r in spark.read.parquet(str(out)).collect()]
    key = lambda row: json.dumps(row, sort_keys=True, default=str)  # noqa: E731
    assert sorted(map(key, read)) == sorted(map(key, released))
    assert len(read) == 27


def test_spark_reads_a_compacted_and_cleaned_log_and_the_log_reads_sparks_own(
    spark: SparkSession, tmp_path: Path
):
    """Compactions every 3 batches read by a session set to Spark's default (10), and back."""
    out = tmp_path / "out"
    log = SinkLog(str(out), 3)
    log.make_folder()
    for batch in range(8):
        for task in range(batch % 3):  # batches with no file too
            name = f"part-{batch:012d}-{task:05d}.jsonl"
            (out / name).write_text(f'{{"b": {batch}, "t": {task}}}\n')
        names = sorted(p.name for p in out.glob(f"part-{batch:012d}-*"))
        log.add(batch, [LoggedFile(log.file_uri(n), (out / n).stat().st_size, 1) for n in names])
    (out / "part-000000000008-00000.jsonl").write_text('{"b": 8, "t": 0}\n')  # not logged
    assert sorted(p.name for p in (out / METADATA_DIR).iterdir()) == [
        "0",
        "1",
        "2.compact",
        "3",
        "4",
        "5.compact",
        "6",
        "7",
    ]
    want = sorted((b, t) for b in range(8) for t in range(b % 3))
    read = lambda: sorted((r.b, r.t) for r in spark.read.json(str(out)).collect())  # noqa: E731
    assert read() == want
    assert log.forget_before(7) == 5  # 0 … 2.compact, 3, 4: before the compaction a reader needs
    assert read() == want
    # Spark's own sink, compacting every 3 batches: its log read the way Spark reads it
    source = tmp_path / "lines"
    source.mkdir()
    for n in range(5):
        (source / f"{n}.txt").write_text(f"line {n}\n")
    spark.conf.set(INTERVAL_CONF, "3")
    try:
        query = (
            spark.readStream.option("maxFilesPerTrigger", 1)
            .text(str(source))
            .writeStream.format("json")
            .option("path", str(tmp_path / "spark"))
            .option("checkpointLocation", str(tmp_path / "spark-ck"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
    finally:
        spark.conf.unset(INTERVAL_CONF)
    sparks = sorted(
        p.name for p in (tmp_path / "spark" / METADATA_DIR).iterdir() if p.name[0] != "."
    )
    assert sparks == ["0", "1", "2.compact", "3", "4"]
    listed = spark.read.json(str(tmp_path / "spark")).inputFiles()
    assert len(listed) == 5
    assert sorted(committed_files(str(tmp_path / "spark")) or []) == sorted(
        unquote(uri.removeprefix("file://")) for uri in listed
    )


# --- the crash sweep -------------------------------------------------------------------------

#: (crash point, the read tasks of the run it kills): each restart packs the batch's three
#: sources into another number of tasks, so the replay's parts differ from the killed run's.
SWEEP = [
    ("sink.commit.published:0", "3"),  # one part of batch 0 visible, two not yet
    ("sink.commit.released:0", "1"),  # all of it published (3 runs, 1 task), not marked
    ("sink.commit.published:1", "2"),
    ("sink.commit.marked:1", "3"),  # marked, the log not yet written
]
#: The read tasks of the run that finishes.
LAST_READ_TASKS = "2"


class LoopReader:
    """Reads the folder with ``spark.read`` in a loop on a thread; what each read saw."""

    def __init__(self, spark: SparkSession, out: Path, work: Path) -> None:
        self.spark, self.out, self.work = spark, out, work
        self.seen: list[Counter[str]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> LoopReader:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(60)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.seen.append(spark_lines(self.spark, self.out, self.work))
            except AnalysisException as error:
                if "PATH_NOT_FOUND" not in str(error):  # before the first run made the folder
                    self.errors.append(str(error)[:500])
            except Exception as error:  # reported by the test
                self.errors.append(f"{type(error).__name__}: {str(error)[:500]}")
            time.sleep(0.05)


def test_the_sweep_comes_later_in_the_run_at_each_crash():
    assert reachable_in_turn([crash for crash, _ in SWEEP])


@pytest.fixture
def sweep_work(tmp_path: Path) -> Iterator[Path]:
    make_input(tmp_path / "in")
    yield tmp_path


def test_a_reader_in_a_crash_sweep_sees_whole_committed_batches_only(
    spark: SparkSession, batches: dict[int, Counter[str]], sweep_work: Path
):
    work = sweep_work
    out = work / "out"
    args = work_args(work, "tasks")
    half_listed = 0
    with LoopReader(spark, out, work) as reader:
        for crash, read_tasks in SWEEP:
            crash_at(JOB, [*args, read_tasks], crash)
            seen = spark_lines(spark, out, work)
            assert prefix(seen, batches) is not None, (crash, seen)
            batch = int(crash.rsplit(":", 1)[1])
            if list(out.glob(f".part-{batch:012d}-*")):  # a part of the batch not published yet
                listed = lines_by_batch([str(p) for p in out.glob("part-*")], work)
                assert prefix(sum(listed.values(), Counter()), batches) is None, crash
                half_listed += 1
        assert run_child(JOB, [*args, LAST_READ_TASKS]) == 0
    assert not reader.errors, reader.errors[:3]
    prefixes = [prefix(seen, batches) for seen in reader.seen]
    assert None not in prefixes, [
        s for s, k in zip(reader.seen, prefixes, strict=True) if k is None
    ][:1]
    assert len(prefixes) >= 20 and len(set(prefixes)) >= 3, Counter(prefixes)
    assert spark_lines(spark, out, work) == sum(batches.values(), Counter())
    assert sorted(committed_files(str(out)) or []) == sorted(str(p) for p in out.glob("part-*"))
    assert not list(out.glob(".*")), "unpublished parts left behind"
    # a reader listing the folder itself saw a batch half published after those crashes
    assert half_listed == 2
