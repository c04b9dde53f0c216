"""``sink=delta`` killed while delta-rs writes a batch's data files, and ``clean_up`` after it.

The query (a files front written straight into a table made beforehand with the rows' schema
and ``delta.targetFileSize=1``, so delta-rs writes many small data files per commit) is
SIGKILLed at ``sink.delta.writing`` in batch 1: data files are on disk, no commit names them.
The restart commits the batch anew; the table then holds exactly the rows of an unbroken run.
The killed commit's files stay (a plain ``vacuum`` does not list them, even with no
retention) until :func:`clean_up` removes them, and exactly them: the table reads the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from pyspark_flamestream.sinks.delta import DATA_FILE, clean_up

from ..crash import reachable_in_turn, run_chain, run_child
from .delta_front_job import RECORDS_PER_BATCH
from .test_delta_schema import FRONT_ROWS

JOB = "tests.spark.delta_front_job"
CRASHES = ["sink.delta.writing:1"]


def make_input(folder: Path) -> None:
    folder.mkdir(parents=True)
    lines = [f"word{i % 997} line{i}" for i in range(3 * RECORDS_PER_BATCH)]
    (folder / "a.txt").write_text("".join(line + "\n" for line in lines))


def make_table(path: Path) -> None:
    """An empty table with the rows' schema; every data file delta-rs writes ends at 1 byte."""
    empty = pa.table({f.name: pa.array([], f.type) for f in FRONT_ROWS}, schema=FRONT_ROWS)
    write_deltalake(str(path), empty, configuration={"delta.targetFileSize": "1"})


def rows(path: Path, version: int | None = None) -> list[tuple[Any, ...]]:
    table = DeltaTable(str(path), version=version).to_pyarrow_table()
    return sorted(tuple(row.values()) for row in table.to_pylist())


def batches(path: Path) -> list[int]:
    history = reversed(DeltaTable(str(path)).history())
    return [int(c["flamestream.batch"]) for c in history if "flamestream.batch" in c]


def unnamed(path: Path) -> set[str]:
    """Files in the table's folder that no version of its log names, as delta-rs reads it."""
    named = {Path(uri).name for uri in DeltaTable(str(path)).file_uris()}
    return {p.name for p in path.iterdir() if p.is_file()} - named


def test_a_commit_killed_mid_write_leaves_files_that_clean_up_removes(tmp_path: Path):
    assert reachable_in_turn(CRASHES)
    make_input(tmp_path / "in")
    unbroken, killed = tmp_path / "unbroken", tmp_path / "killed"
    make_table(unbroken)
    make_table(killed)
    args = [str(tmp_path / "in"), str(unbroken), str(tmp_path / "ck-unbroken")]
    assert run_child(JOB, args) == 0
    assert batches(unbroken) == [0, 1, 2] and not unnamed(unbroken)
    left: set[str] = set()

    def after_crash(crash: str) -> None:
        assert batches(killed) == [0], f"after {crash}"
        assert rows(killed) == rows(unbroken, 1)
        left.update(unnamed(killed))

    run_chain(
        JOB, [str(tmp_path / "in"), str(killed), str(tmp_path / "ck-killed")], CRASHES, after_crash
    )
    assert left and all(DATA_FILE.fullmatch(name.split("#")[0]) for name in left), left
    assert batches(killed) == [0, 1, 2]
    assert rows(killed) == rows(unbroken)
    assert unnamed(killed) == left  # the restart wrote its own files and left these
    vacuumed = DeltaTable(str(killed)).vacuum(
        retention_hours=0, enforce_retention_duration=False, dry_run=True
    )
    assert not {Path(p).name for p in vacuumed} & left  # what vacuum() does not do

    assert set(clean_up(str(killed), dry_run=True)) == left
    assert unnamed(killed) == left
    assert set(clean_up(str(killed))) == left
    assert not unnamed(killed)
    assert rows(killed) == rows(unbroken)
    assert clean_up(str(killed)) == []
