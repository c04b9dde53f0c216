"""The delta sink's checks without Spark, against real delta-rs writes and real SIGKILLs.

* The schema check is sound: whatever it accepts, delta-rs appends as it is (every value
  read back equal, the table's schema unchanged or, with ``mergeSchema``, only widened by the
  rows' columns, nullable); a column of another type is always refused.
* The folder check: a writer killed in the first commit of a new table leaves data files and
  no log; a restart of the query may create its table there, a first start may not; foreign
  files are refused either way.
* ``clean_up`` after a writer SIGKILLed in a commit: the partial data file it was writing
  (``…parquet#1``) and whole files of the commit go, every file a version names stays, the
  table reads the same; a log entry's staging file (``<version>.json#1``) goes too.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from deltalake import DeltaTable, Schema, write_deltalake
from hypothesis import given, settings
from hypothesis import strategies as st

from flamestream.errors import ConfigError, FlameStreamError
from flamestream.spark.connector.options import OptionReader
from pyspark_flamestream.sinks.delta import (
    DeltaOutput,
    _fields,
    _nullable_where_new,
    clean_up,
    foreign_files,
    schema_differences,
)

from ..examples import examples

# -- the schema check --------------------------------------------------------------------------

#: Arrow types with the values a column of each holds.
TYPES: dict[str, tuple[pa.DataType, st.SearchStrategy[Any]]] = {
    "long": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "integer": (pa.int32(), st.integers(-(2**31), 2**31 - 1)),
    "double": (pa.float64(), st.floats(allow_nan=False, width=64)),
    "string": (pa.string(), st.text(max_size=4)),
    "binary": (pa.binary(), st.binary(max_size=4)),
    "boolean": (pa.bool_(), st.booleans()),
}


@st.composite
def schemas(draw: st.DrawFn) -> pa.Schema:
    names = draw(st.lists(st.sampled_from("abcd"), min_size=1, max_size=4, unique=True))
    return pa.schema(
        pa.field(name, TYPES[draw(st.sampled_from(sorted(TYPES)))][0], nullable=draw(st.booleans()))
        for name in names
    )


@st.composite
def tables(draw: st.DrawFn, schema: pa.Schema, rows: int) -> pa.Table:
    """``rows`` rows of ``schema``: values of the columns' types, null only where nullable."""
    columns = {}
    for field in schema:
        values = next(v for t, v in TYPES.values() if t == field.type)
        cell = st.one_of(st.none(), values) if field.nullable else values
        columns[field.name] = pa.array(
            draw(st.lists(cell, min_size=rows, max_size=rows)), field.type
        )
    return pa.table(columns, schema=schema)


def delta_columns(schema: pa.Schema) -> dict[str, tuple[str, bool]]:
    return _fields(Schema.from_arrow(schema))


def read(path: str) -> list[dict[str, Any]]:
    return DeltaTable(path).to_pyarrow_table().to_pylist()


def same_rows(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> bool:
    return sorted(map(repr, got)) == sorted(map(repr, want))


@settings(max_examples=examples(60), deadline=None)
@given(data=st.data(), table_schema=schemas(), rows_schema=schemas(), merge=st.booleans())
def test_what_the_check_accepts_delta_rs_appends_as_it_is(
    data: st.DataObject, table_schema: pa.Schema, rows_schema: pa.Schema, merge: bool
):
    have, wanted = delta_columns(table_schema), delta_columns(rows_schema)
    problems = schema_differences(have, wanted, merge=merge)
    for name in set(have) & set(wanted):
        if have[name][0] != wanted[name][0]:
            assert any(p.startswith(f"{name} is ") for p in problems), problems
    if problems:
        return
    earlier = data.draw(tables(table_schema, 1))
    rows = data.draw(tables(rows_schema, 3))
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "t")
        write_deltalake(path, earlier)
        table = DeltaTable(path)
        written = _nullable_where_new(rows, table) if merge else rows
        write_deltalake(table, written, mode="append", schema_mode="merge" if merge else None)
        after = _fields(DeltaTable(path).schema())
        new = {n: (kind, True) for n, (kind, _) in wanted.items() if n not in have}
        assert after == {**have, **new}  # the table's columns as they were, the rows' added
        every = {**have, **new}

        def padded(row: dict[str, Any]) -> dict[str, Any]:
            return {name: row.get(name) for name in every}

        assert same_rows(read(path), [padded(r) for r in [*earlier.to_pylist(), *rows.to_pylist()]])


def test_a_type_the_rows_have_and_delta_has_not_is_refused_at_start(tmp_path: Path):
    table = tmp_path / "t"
    write_deltalake(str(table), pa.table({"value": pa.array([], pa.string())}))
    options = {"path": str(table), "checkpointLocation": str(tmp_path / "ck")}
    output = DeltaOutput(OptionReader("sink delta", options))

    class Released:
        option, choice = "columns", "all"

        @staticmethod
        def schema() -> pa.Schema:
            return pa.schema([pa.field("value", pa.duration("s"))])

    with pytest.raises(ConfigError, match=r"option 'columns' = 'all'.*columns with Delta types"):
        output.check_rows(Released())  # type: ignore[arg-type]


# -- the folder check and clean_up after real kills --------------------------------------------

#: A child that appends a stream of rows to the table at argv[1] and SIGKILLs itself when
#: delta-rs asks for the last batch. argv[2]: batches; argv[3]: the target file size (0: the
#: table's); argv[4]: delta-rs's storage options (JSON). Random longs: files do not shrink
#: to nothing.
KILLED_WRITER = textwrap.dedent(
    """
    import json, os, signal, sys
    import numpy as np, pyarrow as pa
    from deltalake import write_deltalake
    path, count, target = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    storage = json.loads(sys.argv[4]) or None
    schema = pa.schema([("x", pa.int64())])
    random = np.random.default_rng(0)
    def batches():
        for index in range(count):
            if index == count - 1:
                os.kill(os.getpid(), signal.SIGKILL)
            yield pa.record_batch([pa.array(random.integers(0, 2**62, 100_000))], schema=schema)
    size = {"target_file_size": target} if target else {}
    reader = pa.RecordBatchReader.from_batches(schema, batches())
    write_deltalake(path, reader, mode="append", storage_options=storage, **size)
    """
)


def killed_writer(
    path: Path | str, batches: int, target: int = 0, storage: dict[str, str] | None = None
) -> None:
    """Run :data:`KILLED_WRITER` on the table at ``path``; it must die by SIGKILL."""
    args = [str(path), str(batches), str(target), json.dumps(storage or {})]
    done = subprocess.run(  # this interpreter, a fixed script
        [sys.executable, "-c", KILLED_WRITER, *args],
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]


def output(path: Path, checkpoint: Path) -> DeltaOutput:
    options = {"path": str(path), "checkpointLocation": str(checkpoint)}
    return DeltaOutput(OptionReader("sink delta", options))


def test_a_killed_first_commit_leaves_a_folder_only_a_restart_may_create_its_table_in(
    tmp_path: Path,
):
    table = tmp_path / "t"
    killed_writer(table, batches=5, target=1)  # each batch a file of its own
    left = sorted(p.name for p in table.iterdir())
    assert left and "_delta_log" not in left, left  # data files, no log
    assert foreign_files(str(table), restarting=True) == []
    assert foreign_files(str(table), restarting=False) == left
    first_start = output(table, tmp_path / "ck")
    with pytest.raises(ConfigError, match="a directory of other files, no Delta table"):
        first_start.check()
    (tmp_path / "ck" / "offsets").mkdir(parents=True)
    (tmp_path / "ck" / "offsets" / "0").write_text("v1\n{}\n")
    output(table, tmp_path / "ck").check()  # a restart: the query's own killed commit
    (table / "notes.txt").write_text("foreign")
    with pytest.raises(ConfigError, match=r"no Delta table \(no version in _delta_log/\): notes"):
        output(table, tmp_path / "ck").check()


@pytest.mark.parametrize(
    ("made", "refused"),
    [
        ({"_delta_log/": None}, None),
        ({"_delta_log/": None, "other.txt": "x"}, "other.txt"),
        ({"_delta_log/readme": "x"}, "_delta_log/readme"),
        ({"_delta_log/00000000000000000000.json#1": "{"}, None),
        ({"sub/": None}, "sub/"),
        ({".hidden": "x"}, ".hidden"),
    ],
    ids=["empty-log", "other-file", "log-file", "log-staging", "folder", "hidden"],
)
def test_a_folder_with_no_version_must_hold_nothing_else(
    tmp_path: Path, made: dict[str, str | None], refused: str | None
):
    table = tmp_path / "t"
    table.mkdir()
    for name, text in made.items():
        target = table / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            target.mkdir(exist_ok=True)
        else:
            target.write_text(text)
    check = output(table, tmp_path / "ck").check
    if refused is None:
        check()
    else:
        with pytest.raises(ConfigError, match=f"no version in _delta_log/\\): {refused}"):
            check()


def test_clean_up_after_a_writer_killed_mid_commit_removes_only_what_no_version_names(
    tmp_path: Path,
):
    table = tmp_path / "t"
    write_deltalake(str(table), pa.table({"x": pa.array([1, 2], pa.int64())}))
    write_deltalake(str(table), pa.table({"x": pa.array([3], pa.int64())}), mode="append")
    DeltaTable(str(table)).optimize.compact()  # version 2 removes the two files; 0 and 1 name them
    before = sorted(p.name for p in table.iterdir())
    killed_writer(table, batches=50)  # a data file written in parts: killed half written
    staged = sorted(p.name for p in table.iterdir() if "#" in p.name)
    assert staged and all(".parquet#" in name for name in staged), staged
    committed = table / "_delta_log" / "00000000000000000002.json"
    link = table / "_delta_log" / "00000000000000000002.json#1"
    os.link(committed, link)  # what a kill between delta-rs's link and unlink of it leaves
    (table / "notes.txt").write_text("not the table's")
    rows = [read(str(table)), read_version(table, 0), read_version(table, 1)]

    assert clean_up(str(table), dry_run=True) == sorted([*staged, f"_delta_log/{link.name}"])
    assert clean_up(str(table)) == sorted([*staged, f"_delta_log/{link.name}"])
    assert sorted(p.name for p in table.iterdir()) == sorted([*before, "notes.txt"])
    assert [read(str(table)), read_version(table, 0), read_version(table, 1)] == rows
    assert committed.is_file() and clean_up(str(table)) == []


def read_version(table: Path, version: int) -> list[dict[str, Any]]:
    return DeltaTable(str(table), version=version).to_pyarrow_table().to_pylist()


def test_clean_up_refuses_a_folder_that_is_no_table(tmp_path: Path):
    (tmp_path / "_delta_log").mkdir()
    (tmp_path / "part-00000-0f6c1d52-93a4-4cba-9a2b-1c1a1c2b3d4e-c000.snappy.parquet").write_text(
        ""
    )
    with pytest.raises(FlameStreamError, match="no Delta table"):
        clean_up(str(tmp_path))
    assert len(list(tmp_path.iterdir())) == 2
