"""The ``delta`` sink: each batch's released rows become one commit of a Delta Lake table.

Written with delta-rs (the ``deltalake`` package, ``pip install 'flamestream[delta]'``):
Spark's own Delta jar has no build for this Spark. A batch's release appends its rows, sorted
by global time, in **one** Delta commit that also records an *application transaction*
``(appId, batch id)`` (Delta's ``txn`` action, the one Spark's own Delta sink uses). Before
appending, the sink reads the table's transaction version of ``appId``: if it is the batch id
or later, the batch is in the table already and nothing is written. So a batch whose commit
is replayed (the query killed after the Delta commit, before the sink's marker or Spark's
commit log) appends nothing twice: every released row is in the table exactly once, and a
reader sees a batch's rows all at once or not at all.

``appId`` defaults to ``flamestream-<query id>``: the id Spark keeps in the checkpoint's
``metadata`` file, the same across restarts from that checkpoint and new for a new checkpoint
(a new query into an existing table starts its own transaction versions at batch 0; a
default derived from the checkpoint's location would make a query started again at a
reused location skip every batch the old one committed).

The table's columns are the released rows' columns, as the ``files`` sink writes them: for a
graph ``ts``, ``front``, ``trace``, ``flags``, ``source``, ``position``, ``sink`` and
``value``; for a front written directly, its meta columns and payload. The common sink option
``columns`` (``value``, ``value,time``) narrows them.

**The table must hold the rows as they are.** At query start, before batch 0, the sink
compares the schema of a table already at ``path`` with the schema of the rows this query
releases (:meth:`DeltaOutput.check_rows`) and refuses any difference with a ``ConfigError``:
a column of another type (delta-rs would cast the rows into it silently), a column more or
less (delta-rs would fail at the first commit), a column the table declares not null that
the rows may leave null. Columns match by name, in any order. ``mergeSchema=true`` declares
an evolution delta-rs writes faithfully: columns the table lacks are added (nullable: the
earlier rows read null there), columns the rows lack must be nullable in the table (the new
rows hold null there); types must still be equal. A folder that is no Delta table yet must
be empty (or missing), except on a restart for what this query's killed first commit left.

**After a crash.** A commit killed while delta-rs wrote it leaves data files no version
names (and, on a local disk, delta-rs's ``<name>#<n>`` staging files); readers never see
them and the replayed commit writes its own. :func:`clean_up` removes them; a plain
``DeltaTable.vacuum()`` does not (see ``docs/connectors.md``). The crash tests kill a commit
there with the crash point ``sink.delta.writing`` (:func:`_streamed`).

Only ``release=commit``: delta-rs writes a commit's data files and the commit in one call, so
tasks releasing their own parts would have to write Parquet files beside it with a second
storage client and build the commit's file actions by hand (see ``docs/connectors.md``).

Options: ``path`` (required: the table's URL, a local path or ``s3://…``), ``appId``,
``storageOptions`` (a JSON object of delta-rs storage options, such as
``{"AWS_ENDPOINT_URL": "…"}``), ``mergeSchema`` (``false``), plus the common sink options
(``checkpointLocation``, ``stateLocation``, ``release``, ``columns``).
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import time
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import unquote, urlparse

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from flamestream.errors import ConfigError, FlameStreamError
from flamestream.spark.connector.faults import armed, crash_point
from flamestream.spark.connector.options import OptionReader
from flamestream.spark.connector.sink import ReleasedRows, SinkOutput
from flamestream.spark.durable import QueryCheckpoint
from flamestream.spark.durable.files import filesystem

#: The pip command that installs delta-rs with a version this sink is tested with.
PIP_HINT = "pip install 'flamestream[delta]'"


def deltalake(step: str = "sink delta", role: str = "sink") -> Any:
    """The ``deltalake`` module, imported on first use (an optional dependency).

    ``role``: the option that chose delta (``sink``, or ``front`` for the delta front).
    """
    try:
        import deltalake as module
    except ImportError as exc:
        raise ConfigError(
            step, role, "delta", f"the deltalake package installed ({PIP_HINT}): {exc}"
        ) from None
    return module


def query_id(checkpoint: str) -> str:
    """The query id Spark keeps in the checkpoint's ``metadata`` file (one per checkpoint)."""
    fs, root = filesystem(checkpoint)
    path = posixpath.join(root, "metadata")
    try:
        text = fs.cat_file(path).decode()
        found = json.loads(text.splitlines()[0])["id"]
    except (OSError, ValueError, KeyError, IndexError) as exc:
        msg = (
            f"sink delta: cannot read the query id from {path} ({type(exc).__name__}: {exc}); "
            "is checkpointLocation the query's checkpoint? Hint: set the option appId"
        )
        raise FlameStreamError(msg) from exc
    return str(found)


class DeltaOutput(SinkOutput):
    """A Delta table, one commit per released batch, idempotent by Delta's ``txn`` action."""

    kind = "delta"

    def __init__(self, options: OptionReader) -> None:
        self.step = options.step
        deltalake(self.step)  # fail at query start, not in the first commit
        self.path = options.string("path", required=True, what="Delta table URL").rstrip("/")
        self.app_id_option = options.optional_string("appId", what="application id")
        self.checkpoint = options.string("checkpointLocation", required=True)
        self.storage_options = read_storage_options(options)
        #: add the rows' columns the table lacks (delta-rs's schema_mode="merge")
        self.merge_schema = options.boolean("mergeSchema", False)
        self._app_id: str | None = self.app_id_option

    @property
    def app_id(self) -> str:
        """The application id of this query's Delta transactions (read once per process)."""
        if self._app_id is None:
            self._app_id = f"flamestream-{query_id(self.checkpoint)}"
        return self._app_id

    def check(self) -> None:
        """Fail at query start if ``path`` is neither a Delta table nor a place for a new one."""
        if _local(self.path) is not None:
            restarting = bool(QueryCheckpoint(self.checkpoint).logged_batches())
            _check_local(self.step, self.path, restarting=restarting)
            return
        module = deltalake(self.step)
        try:
            module.DeltaTable.is_deltatable(self.path, self.storage_options)
        except (OSError, module.exceptions.DeltaError) as exc:  # unreachable, refused, bad
            raise ConfigError(
                self.step,
                "path",
                self.path,
                f"a Delta table URL reachable with storageOptions ({error_reason(exc)})",
            ) from None

    def check_rows(self, released: ReleasedRows) -> None:
        """Fail at query start if a table at ``path`` cannot hold the released rows as they are.

        Types are compared as Delta types (the ones delta-rs would write the rows as), so
        Arrow's variants of one type (``string``, ``large_string``) are equal.
        """
        table = self._table_at_start()
        if table is None:
            return  # the first commit creates it with the rows' schema
        rows = released.schema()
        try:
            wanted = _fields(deltalake(self.step).Schema.from_arrow(rows))
        except Exception as exc:  # delta-rs raises a bare Exception for a type it cannot hold
            raise ConfigError(
                self.step,
                released.option,
                released.choice,
                f"columns with Delta types ({error_reason(exc)}); the rows are ({rows})",
            ) from None
        have = _fields(table.schema())
        problems = schema_differences(have, wanted, merge=self.merge_schema)
        if problems:
            raise ConfigError(
                self.step, "path", self.path, _mismatch(table, have, wanted, problems, released)
            )

    def _table_at_start(self) -> Any:
        """The table at ``path`` (None if there is none yet), or a ConfigError naming why not."""
        module = deltalake(self.step)
        local = _local(self.path)
        if local is not None and not is_table(local):
            return None  # the folder check passed: missing, empty or a killed first commit's
        try:
            return self.table()
        except (OSError, module.exceptions.DeltaError) as exc:
            raise ConfigError(
                self.step,
                "path",
                self.path,
                f"a Delta table delta-rs can read ({error_reason(exc)})",
            ) from None

    def table(self) -> Any:
        """The table as it is now (a ``DeltaTable``), or None if there is none yet."""
        module = deltalake(self.step)
        try:
            return module.DeltaTable(self.path, storage_options=self.storage_options)
        except module.exceptions.TableNotFoundError:
            return None

    def release(self, batch_id: int, rows: pa.Table) -> None:
        """Append the batch's rows in one Delta commit, unless a commit of it is there."""
        table = self.table()
        committed = table.transaction_version(self.app_id) if table is not None else None
        if committed is not None and committed >= batch_id:
            return  # a replayed commit: the batch is in the table already
        module = deltalake(self.step)
        if self.merge_schema and table is not None:
            rows = _nullable_where_new(rows, table)
        transaction = module.Transaction(app_id=self.app_id, version=batch_id)
        module.write_deltalake(
            self.path if table is None else table,  # the snapshot read above: no second read
            _streamed(rows, batch_id, self.path),
            mode="append",
            schema_mode="merge" if self.merge_schema else None,
            storage_options=self.storage_options,
            commit_properties=module.CommitProperties(
                app_transactions=[transaction],
                custom_metadata={"flamestream.batch": str(batch_id)},
            ),
        )


#: The crash point inside a Delta commit (crash tests only: ``connector.faults``).
WRITING = "sink.delta.writing"

#: How long an armed ``sink.delta.writing`` waits for delta-rs's first data file.
WRITING_WAIT_S = 30.0


def _streamed(rows: pa.Table, batch_id: int, path: str) -> pa.RecordBatchReader:
    """``rows`` as the stream delta-rs pulls while it writes the batch's data files.

    delta-rs commits only after the stream ends. With the crash point ``sink.delta.writing``
    armed for the batch (crash tests), the stream stays open after the last row, yielding
    empty batches (each hands control back, so delta-rs's writers run) until a data file of
    this commit is in the local folder ``path`` (:data:`WRITING_WAIT_S` at most; elsewhere
    not at all), and the crash point kills the query there: the files a killed commit
    leaves, and certainly no commit.
    """
    before = _names(path) if armed(WRITING, batch_id) else None

    def chunks() -> Iterator[pa.RecordBatch]:
        yield from rows.to_batches()
        if before is not None:
            yield from _until_a_data_file(path, before, rows.schema)
            crash_point(WRITING, batch_id)

    return pa.RecordBatchReader.from_batches(rows.schema, chunks())


def _names(path: str) -> set[str]:
    """The names in the local folder ``path`` (none elsewhere, or if it is missing)."""
    local = _local(path)
    return set(os.listdir(local)) if local is not None and os.path.isdir(local) else set()


def _until_a_data_file(path: str, before: set[str], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Empty batches until a data file not in ``before`` is in the local folder ``path``."""
    empty = pa.RecordBatch.from_pylist([], schema=schema)
    deadline = time.monotonic() + WRITING_WAIT_S
    while _local(path) is not None and time.monotonic() < deadline:
        if any(DATA_FILE.fullmatch(name) for name in _names(path) - before):
            return
        yield empty


def _nullable_where_new(rows: pa.Table, table: Any) -> pa.Table:
    """``rows`` with the columns ``table`` lacks declared nullable.

    delta-rs's merge adds a column as the rows declare it: a not-null column would then claim
    the table's earlier rows, which hold null there, have a value.
    """
    known = {field.name for field in table.schema().fields}
    fields = [f if f.name in known else f.with_nullable(True) for f in rows.schema]
    return rows.cast(pa.schema(fields, metadata=rows.schema.metadata))


# -- schemas -----------------------------------------------------------------------------------

#: A column as the check compares it: its Delta type (text) and whether it may be null.
Column = tuple[str, bool]


def _fields(schema: Any) -> dict[str, Column]:
    """The columns of a delta-rs ``Schema``: name -> (Delta type, nullable), in order."""
    columns = {}
    for field in schema.fields:
        kind = json.loads(field.to_json())["type"]
        text = kind if isinstance(kind, str) else json.dumps(kind, separators=(",", ":"))
        columns[field.name] = (text, bool(field.nullable))
    return columns


def schema_differences(
    table: Mapping[str, Column], rows: Mapping[str, Column], *, merge: bool = False
) -> list[str]:
    """Why a table with columns ``table`` cannot take rows with columns ``rows`` as they are.

    Empty when it can: every column of the rows is in the table with the same Delta type,
    not declared not-null there unless the rows' is too, and the table has no other column;
    with ``merge``, columns only the rows have are added and columns only the table has must
    be nullable (the rows hold null there). Names match exactly, in any order.

    >>> schema_differences({"ts": ("string", True)}, {"ts": ("long", False)})
    ['ts is string in the table, long in the rows']
    >>> schema_differences({"v": ("string", True)}, {"ts": ("long", False), "v": ("string", True)})
    ['the table lacks ts']
    >>> schema_differences({"v": ("string", True)}, {"ts": ("long", False), "v": ("string", True)},
    ...                    merge=True)
    []
    """
    problems = []
    for name, (kind, nullable) in rows.items():
        if name not in table:
            continue
        table_kind, table_nullable = table[name]
        if table_kind != kind:
            problems.append(f"{name} is {table_kind} in the table, {kind} in the rows")
        elif nullable and not table_nullable:
            problems.append(f"{name} is not null in the table, the rows may hold null there")
    lacking = [name for name in rows if name not in table]
    extra = [name for name in table if name not in rows]
    if not merge:
        if lacking:
            problems.append("the table lacks " + ", ".join(lacking))
        if extra:
            problems.append("the rows lack " + ", ".join(extra))
        return problems
    required = [name for name in extra if not table[name][1]]
    if required:
        problems.append("the rows lack " + ", ".join(required) + ", not null in the table")
    folded = {name.lower(): name for name in extra}
    for name in lacking:  # Delta's names are case-insensitive to its other writers (Spark)
        if name.lower() in folded:
            problems.append(f"{name} differs from the table's {folded[name.lower()]} in case only")
    return problems


def _describe(columns: Mapping[str, Column]) -> str:
    """``ts long not null, value string``."""
    return ", ".join(
        f"{name} {kind}" + ("" if nullable else " not null")
        for name, (kind, nullable) in columns.items()
    )


def _mismatch(
    table: Any,
    have: Mapping[str, Column],
    wanted: Mapping[str, Column],
    problems: list[str],
    released: ReleasedRows,
) -> str:
    """The ``allowed`` part of a schema mismatch's ConfigError: both schemas and a hint."""
    hint = (
        "write to another path, set the columns option the table was written with, or "
        "create the table with the rows' schema"
    )
    if any(p.startswith(("the table lacks", "the rows lack")) for p in problems):
        hint += "; mergeSchema=true adds the rows' columns to the table (never another type)"
    return (
        f"a Delta table that holds the rows this query releases with "
        f"{released.option}={released.choice!r} as they are, or a path for a new one; "
        f"the table {table.table_uri} has ({_describe(have)}), the rows have "
        f"({_describe(wanted)}): {'; '.join(problems)}. Hint: {hint}"
    )


def error_reason(exc: BaseException) -> str:
    """An exception in one line, without the colours delta-rs puts into its messages."""
    return f"{type(exc).__name__}: " + _ANSI.sub("", " ".join(str(exc).split()))[:500]


# -- options and the folder --------------------------------------------------------------------


def read_storage_options(options: OptionReader) -> dict[str, str] | None:
    """``storageOptions``: a JSON object of strings (delta-rs's storage options), or None."""
    text = options.optional_string("storageOptions", what="JSON object")
    if text is None:
        return None
    allowed = 'a JSON object of strings, e.g. {"AWS_ENDPOINT_URL": "http://localhost:8333"}'
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise ConfigError(options.step, "storageOptions", text, f"{allowed} ({exc})") from None
    if not isinstance(parsed, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in parsed.items()
    ):
        raise ConfigError(options.step, "storageOptions", text, allowed)
    return parsed


def _local(path: str) -> str | None:
    """The local file system path of ``path`` (a plain path or ``file://``), else None."""
    parsed = urlparse(path)
    if parsed.scheme == "file":
        return parsed.path
    return path if parsed.scheme == "" else None


#: The log folder of a Delta table.
LOG = "_delta_log"

#: A committed log entry or checkpoint: what makes a folder a Delta table (a version).
_VERSION = re.compile(r"\d{20}\.(json|checkpoint(\.[^/#]+)?\.(parquet|json))")

#: A data file as delta-rs names it: ``part-<5 digits>-<write id>-c000[.<codec>].parquet``.
DATA_FILE = re.compile(r"part-\d{5}-[0-9a-f-]{36}-c\d{3}(\.[a-z0-9]+)?\.parquet")

#: A local file as delta-rs (object_store) stages it while writing: ``<name>#<n>``, renamed
#: (a data file) or hard-linked then unlinked (a log entry) when whole.
_STAGING = re.compile(r".+#\d+")


def is_table(local: str) -> bool:
    """Whether the local folder ``local`` is a Delta table: its log holds a version."""
    try:
        names = os.listdir(os.path.join(local, LOG))
    except (FileNotFoundError, NotADirectoryError):
        return False
    return any(_VERSION.fullmatch(name) for name in names)


def foreign_files(local: str, *, restarting: bool) -> list[str]:
    """What a folder with no Delta version holds besides what a killed first commit leaves.

    A killed commit leaves, at most, ``_delta_log/`` with staging files (``<name>#<n>``) and
    data files named as delta-rs names them (whole, or staged). Those count as this query's
    only on a ``restarting`` query (its offset log holds batches: the folder was empty or
    missing when it first started); on a first start they are another writer's. Everything
    else (other files, other folders) is foreign. Paths relative to ``local``, sorted.
    """
    found = []
    for root, dirs, files in os.walk(local):
        relative = os.path.relpath(root, local)
        for name in files:
            path = name if relative == "." else os.path.join(relative, name)
            in_log = relative == LOG and _STAGING.fullmatch(name)
            data = relative == "." and restarting and DATA_FILE.fullmatch(name.split("#")[0])
            if not (in_log or data):
                found.append(path)
        if relative == ".":
            found += [f"{d}/" for d in dirs if d != LOG]  # other folders: foreign as a whole
            dirs[:] = [d for d in dirs if d == LOG]
        elif relative == LOG:
            found += [f"{LOG}/{d}/" for d in dirs]
            dirs[:] = []
    return sorted(found)


def _check_local(step: str, path: str, *, restarting: bool = False) -> None:
    """A local ``path`` must be a Delta table, or free for one.

    Free: missing, empty, or (on a restart) holding only what this query's killed first
    commit left (:func:`foreign_files`).
    """
    local = _local(path)
    assert local is not None  # noqa: S101 - the caller checked
    allowed = "a Delta table, an empty directory or a path to create"
    if os.path.isfile(local):
        raise ConfigError(step, "path", path, f"{allowed}; it is a file")
    if not os.path.isdir(local) or is_table(local):
        return
    foreign = foreign_files(local, restarting=restarting)
    if foreign:
        more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        shown = ", ".join(foreign[:5]) + more
        found = f"a directory of other files, no Delta table (no version in {LOG}/): {shown}"
        raise ConfigError(step, "path", path, f"{allowed}; it is {found}")


# -- clean-up after crashes --------------------------------------------------------------------


def clean_up(
    path: str, *, dry_run: bool = False, fsspec_options: Mapping[str, Any] | None = None
) -> list[str]:
    """Remove what killed commits left in the Delta table at ``path``; the files removed.

    Removes

    * data files (named ``part-<n>-<write id>-c<n>[.<codec>].parquet``, as delta-rs and Spark
      name them, outside folders named ``_…`` or ``.…``) that no log entry names: a commit
      killed after delta-rs wrote them, before its log entry;
    * delta-rs's staging files (a local disk only): ``<data file>#<n>``, a data file killed
      while it was written, and ``_delta_log/<entry>#<n>``, a log entry's (a second link of
      a committed entry, or one never committed).

    Never a file that a log entry (a commit, a checkpoint or its sidecar) in ``_delta_log/``
    names, even one a later version removed (that is ``VACUUM``'s business, after its
    retention), never a log entry, never any other file.

    **Run it only while nothing writes to the table** (the query stopped, no other writer):
    a commit in progress has data files that no log entry names yet, and staging files.

    ``path``: a local path or an fsspec URL (``s3://…``), reached through fsspec with
    ``fsspec_options`` (e.g. s3fs's ``key``, ``secret``, ``client_kwargs``), else as
    flamestream's own stores reach it (fsspec's configuration, see ``docs/storage.md``).
    ``dry_run``: remove nothing, only say what would go. Returns paths relative to the
    table's folder, sorted.

    Raises:
        FlameStreamError: ``path`` is no Delta table (no version in its ``_delta_log/``).

    """
    if fsspec_options:
        fs, root = fsspec.core.url_to_fs(path, **fsspec_options)
    else:
        fs, root = filesystem(path)
    root = root.rstrip("/")
    files = sorted(p[len(root) + 1 :] for p in fs.find(root) if p.startswith(root + "/"))
    log = [p for p in files if p.startswith(LOG + "/")]
    if not any(_VERSION.fullmatch(p[len(LOG) + 1 :]) for p in log):
        msg = f"clean_up: {path} is no Delta table (no version in {LOG}/): nothing removed"
        raise FlameStreamError(msg)
    named = _named(fs, root, log)
    leftovers = [p for p in files if p not in named and _left_over(p)]
    if not dry_run:
        for relative in leftovers:
            fs.rm_file(posixpath.join(root, relative))
    return leftovers


def _left_over(relative: str) -> bool:
    """Whether the table's file ``relative``, named by no log entry, is a killed commit's."""
    *folders, name = relative.split("/")
    if folders == [LOG]:
        return _STAGING.fullmatch(name) is not None
    if any(part.startswith(("_", ".")) for part in [*folders, name]):
        return False  # Delta's hidden files and folders (_delta_log/…, _change_data/, …)
    return DATA_FILE.fullmatch(name.split("#")[0]) is not None  # a data file, or its staging


def _named(fs: Any, root: str, log: list[str]) -> set[str]:
    """Every file the log entries in ``log`` name (add, remove, cdc), relative to ``root``.

    Entries are ``<version>.json`` commits (and any other ``.json`` in the log folder) and
    ``.parquet`` checkpoints and sidecars; a staging file (``….json#1``) is no entry.
    """
    paths: list[str] = []
    for relative in log:
        full = posixpath.join(root, relative)
        if relative.endswith(".json"):
            for line in fs.cat_file(full).decode().splitlines():
                action = json.loads(line) if line.strip() else {}
                paths += [action[k]["path"] for k in ("add", "remove", "cdc") if k in action]
        elif relative.endswith(".parquet"):
            with fs.open(full, "rb") as f:
                parquet = pq.ParquetFile(f)
                kinds = [k for k in ("add", "remove") if k in parquet.schema_arrow.names]
                table = parquet.read(columns=kinds)
            for kind in kinds:
                column = table.column(kind).combine_chunks()
                paths += [p for p in column.field("path").to_pylist() if p is not None]
    return {_relative(root, p) for p in paths}


def _relative(root: str, path: str) -> str:
    """A log entry's file path (URL-encoded, relative or absolute) relative to ``root``."""
    parsed = urlparse(path)
    if not parsed.scheme:
        return unquote(path)
    absolute = unquote(parsed.netloc + parsed.path)
    return absolute[len(root) + 1 :] if absolute.startswith(root + "/") else absolute


#: The colours delta-rs puts into its error messages.
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
