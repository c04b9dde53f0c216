"""The ``delta`` front: a Delta Lake table's rows as of a starting version, then its appends.

One table is one front (one source key). The key is fixed at the query's first planning and
names the starting version ``V0``: ``<table URL>@<V0, 20 digits>`` reads the **snapshot** at
``V0`` (the table's latest version then) and every version after it;
``<table URL>@<V0, 20 digits>:commits`` (option ``startingVersion``) reads no snapshot, only
the rows versions ``V0, V0 + 1, …`` add. Later plannings (and restarts) take the key from the
offsets and never pick ``V0`` again.

**Positions.** ``position = (version << 32) | row``: ``row`` counts the version's rows,

* for the snapshot version ``V0``: every live data file at ``V0``, oldest first
  (modification time, then path), rows in file order;
* for a commit version: the rows of the files the commit adds with ``dataChange: true``, in
  the commit's order, rows in file order.

A version has at most ``2**32 - 1`` rows. Positions between two versions' rows hold no row
(they jump, as the files front's byte offsets do). **The determinant** of a row is (table
version, data file, row in that file): the ``source`` column is the key's part after the
table (``<V0>`` or ``<V0>:commits``, the table being the option ``path``, as the files front's
source is relative to its ``path``), and ``position`` gives the version and the row of the
version, from which the file list above gives the data file and the row in it.

**Commits that are not appends.** A commit whose every ``remove`` has ``dataChange: false``
(optimize, compaction) adds the rows of its ``dataChange: true`` adds only: none for a
compaction. A commit with a ``remove`` with ``dataChange: true`` (delete, update, merge,
overwrite) fails planning with :class:`ChangeCommitError` naming the table, the version and
the operation, unless ``skipChangeCommits=true``: then the whole commit is skipped, its added
rows included. Data files with deletion vectors are refused (:class:`DeltaReadError`), unless
in a skipped commit.

**Where things run.** Options are checked and the schema read where the query is defined
(:class:`DeltaSource` is built in every Python process Spark starts for the source).
``discover`` and ``advance`` run on the driver host (the source's planner process) and cache
each version's file list on that instance; the instance is pickled to the executors without
its caches, where ``read_range`` reads each version it covers again from the table's log
(``_delta_log/<version>.json``; the snapshot with delta-rs) and its Parquet files with
pyarrow. Everything it reads is immutable once committed, so a replayed range gives the same
rows in the same order.

Options: ``path`` (required: a local path or ``s3://bucket/table``), ``storageOptions`` (a
JSON object of delta-rs storage options, as the delta sink takes them; their endpoint and
credentials are used for pyarrow's S3 file system too), ``startingVersion``,
``skipChangeCommits`` (``false``), ``timestampColumn`` (required with ``clock=record`` and only
then), plus the common front options.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from flamestream.errors import ConfigError, FlameStreamError
from flamestream.spark.connector.front import META_FIELDS, FrontSource
from flamestream.spark.connector.offsets import FrontRange, OffsetError
from flamestream.spark.connector.options import OptionReader
from pyspark_flamestream.sinks.delta import LOG, deltalake, error_reason, read_storage_options

#: Bits of a position that hold the row within its version.
ROW_BITS = 32
#: The most rows one version may have.
MAX_ROWS = (1 << ROW_BITS) - 1
#: The key's suffix of a front reading commits from ``startingVersion`` (no snapshot).
COMMITS = ":commits"
#: The prefix given to a table column named like a meta column (``ts`` -> ``table_ts``).
RENAMED = "table_"
#: The option naming the record-time column.
TIMESTAMP_OPTION = "timestampColumn"


def position_of(version: int, row: int) -> int:
    """The position of row ``row`` of version ``version``.

    >>> position_of(3, 5) == (3 << 32) | 5
    True
    """
    return (version << ROW_BITS) | row


def version_of(position: int) -> int:
    """The version a position is in.

    >>> version_of(position_of(7, 9))
    7
    """
    return position >> ROW_BITS


def row_of(position: int) -> int:
    """The row of its version a position is.

    >>> row_of(position_of(7, 9))
    9
    """
    return position & MAX_ROWS


class ChangeCommitError(OffsetError):
    """A commit removes rows (delete, update, merge, overwrite): the front cannot append it."""


class DeltaReadError(FlameStreamError):
    """The table holds something the front cannot read; names the table and the version.

    Deletion vectors, a changed schema, a version gone from the log, a null record time.
    """


@dataclass(frozen=True)
class DataFile:
    """One data file of a version's rows."""

    #: as the log names it: relative to the table (URL-encoded) or an absolute URL
    path: str
    rows: int
    #: partition values: the log's strings (commits) or delta-rs's typed values (snapshot)
    partition: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class VersionRows:
    """The rows a version contributes, as data files in position order."""

    version: int
    files: tuple[DataFile, ...] = ()

    @property
    def rows(self) -> int:
        """How many rows the version has."""
        return sum(f.rows for f in self.files)


class DeltaSource(FrontSource):
    """A Delta table: a snapshot (or a starting version), then the rows each version appends."""

    kind = "delta"
    step = "front delta"

    def __init__(self, options: OptionReader) -> None:
        self.path = options.string("path", required=True, what="Delta table URL").rstrip("/")
        self.storage_options = read_storage_options(options)
        self.starting_version = options.optional_integer("startingVersion", minimum=0)
        self.skip_change_commits = options.boolean("skipChangeCommits", False)
        self.timestamp_column = options.optional_string(TIMESTAMP_OPTION, what="column name")
        record = options.choice("clock", ["wall", "logical", "record"], "wall") == "record"
        _check_clock(options.step, self.timestamp_column, record=record)
        module = deltalake(self.step, "front")
        table = self._open(module)
        self.table_url = str(table.table_uri).rstrip("/")
        latest = int(table.version())
        if self.starting_version is not None and self.starting_version > latest:
            allowed = f"a version of the table at {self.path}: 0 to {latest}"
            raise ConfigError(self.step, "startingVersion", self.starting_version, allowed)
        if self.starting_version is not None:
            table = module.DeltaTable(
                self.path, version=self.starting_version, storage_options=self.storage_options
            )
        self.table_schema = _arrow_schema(table.schema())
        self.partition_columns = tuple(table.metadata().partition_columns)
        _check_mapping(self.step, self.path, table.metadata().configuration)
        #: payload name -> table column name (meta names renamed, see RENAMED)
        self.columns = _payload_names(self.step, self.path, self.table_schema.names)
        self._fields = [
            self.table_schema.field(name).with_name(payload)
            for payload, name in self.columns.items()
        ]
        if self.timestamp_column is not None:
            self.record_time_from = f"the table's column {self.timestamp_column!r}"
            self._time_field = _time_field(options.step, self.table_schema, self.timestamp_column)
        self._reset_caches()
        self._filesystem(options.step)  # an unsupported URL fails here, not in a task

    def _open(self, module: Any) -> Any:
        """The table at ``path`` now, or a ConfigError naming the path and why not."""
        try:
            return module.DeltaTable(self.path, storage_options=self.storage_options)
        except module.exceptions.TableNotFoundError as exc:
            allowed = f"an existing Delta table ({error_reason(exc)})"
            raise ConfigError(self.step, "path", self.path, allowed) from None
        except (OSError, module.exceptions.DeltaError) as exc:
            allowed = f"a Delta table reachable with storageOptions ({error_reason(exc)})"
            raise ConfigError(self.step, "path", self.path, allowed) from None

    def _reset_caches(self) -> None:
        #: (key, version) -> its rows; driver side (and per task on executors)
        self._versions: dict[tuple[str, int], VersionRows] = {}
        #: driver side: the key fixed at the query's first planning (or taken from the offsets)
        self._key: str | None = None
        #: driver side: the newest version seen; discover probes the log past it
        self._latest: int | None = None
        self._fs: tuple[pafs.FileSystem, str] | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Executors get the options and the schema, no caches and no file system."""
        state = dict(self.__dict__)
        state.update(_versions={}, _key=None, _latest=None, _fs=None)
        return state

    # --- what the front emits ------------------------------------------------------------

    def payload_fields(self) -> list[pa.Field]:
        """The table's columns (at the starting version, or the latest when defined).

        A column named like a meta column (``ts``, ``front``, ``source``, ``position``) is
        emitted as ``table_<name>``.
        """
        return list(self._fields)

    def source_name(self, key: str) -> str:
        """The starting version part of the key: ``<V0>`` or ``<V0>:commits``."""
        return key.rsplit("@", 1)[1]

    def read_times(self, part: FrontRange) -> Iterator[pa.Array]:
        """Planning's record times: the ``timestampColumn`` alone is read (a projection)."""
        assert self.timestamp_column is not None  # clock=record requires it  # noqa: S101
        name = next(p for p, c in self.columns.items() if c == self.timestamp_column)
        for batch in self.scan_columns(part.key, part.start, part.end, [name]):
            if batch.num_rows:
                yield self.record_times(part.key, batch)

    def record_times(self, key: str, batch: pa.RecordBatch) -> pa.Array:
        """``clock=record``: ``timestampColumn`` as int64 (a timestamp in µs since the epoch)."""
        assert self.timestamp_column is not None  # clock=record requires it  # noqa: S101
        name = next(p for p, c in self.columns.items() if c == self.timestamp_column)
        column = batch.column(name)
        if column.null_count:
            at = batch.column("position")[pc.index(pc.is_null(column), True).as_py()].as_py()
            msg = (
                f"{self.step}: the row at position {at} (version {version_of(at)}, row "
                f"{row_of(at)}) of {self.table_url} has no {TIMESTAMP_OPTION} "
                f"{self.timestamp_column!r} (null): every row needs a record time with "
                "clock=record"
            )
            raise DeltaReadError(msg)
        if pa.types.is_timestamp(column.type):
            column = column.cast(pa.timestamp("us", column.type.tz))
        return column.cast(pa.int64())

    # --- planning (driver side) ----------------------------------------------------------

    def discover(self, known: Mapping[str, int]) -> dict[str, int]:
        """The table's key, reaching just past the last row of its newest version with rows.

        The key is the offsets' one (``known``) if they have one for this table, else the one
        fixed at this instance's first call (``V0``: ``startingVersion``, or the table's
        latest version then). Every version not planned yet is classified (appends, skipped,
        or a change commit that fails here).
        """
        key = self._fixed_key(known)
        first = start_version(key)
        latest = max(self._newest_version(), first)
        floor = version_of(known[key]) if key in known else first
        end = position_of(first, 0)
        for version in range(max(floor, first), latest + 1):
            rows = self.version_rows(key, version).rows
            if rows:
                end = position_of(version, rows)
        return {key: max(end, known.get(key, end))}

    def _fixed_key(self, known: Mapping[str, int]) -> str:
        ours = [k for k in known if k.rsplit("@", 1)[0] == self.table_url]
        if ours:
            self._key = ours[0]
        elif self._key is None:
            if self.starting_version is not None:
                self._key = f"{self.table_url}@{self.starting_version:020d}{COMMITS}"
            else:
                self._key = f"{self.table_url}@{self._newest_version():020d}"
        return self._key

    def _newest_version(self) -> int:
        """The table's newest version: delta-rs's the first time, then the log probed past it."""
        if self._latest is None:
            module = deltalake(self.step, "front")
            self._latest = int(self._open(module).version())
        fs, root = self._filesystem()
        while True:
            name = _log_name(root, self._latest + 1)
            if fs.get_file_info(name).type == pafs.FileType.NotFound:
                return self._latest
            self._latest += 1

    def start_position(self, key: str, available: int, *, at_query_start: bool) -> int:
        """The first row of the starting version ``V0``."""
        return position_of(start_version(key), 0)

    #: positions jump from version to version: a missing one is no lost row
    positions_count_records = False

    def split_positions(self, key: str, start: int, end: int, records: int) -> list[int]:
        """Every ``records`` rows of [start, end), as positions (rows counted over versions)."""
        cuts: list[int] = []
        done, target = 0, records
        for version, low, high in self._spans(key, start, end):
            size = high - low
            while target < done + size:
                cuts.append(position_of(version, low + target - done))
                target += records
            done += size
        return cuts

    def records_between(self, key: str, start: int, end: int) -> int:
        """The rows of [start, end), version by version."""
        return sum(high - low for _, low, high in self._spans(key, start, end))

    def advance(self, key: str, start: int, end: int, records: int) -> tuple[int, int]:
        """After ``records`` rows from ``start``, across versions; ``end`` if none are left."""
        taken, position = 0, start
        for version, low, high in self._spans(key, start, end):
            take = min(high - low, records - taken)
            taken += take
            position = position_of(version, low + take)
            if taken >= records:
                break
        else:
            return end, taken
        if next(self._spans(key, position, end), None) is None:
            return end, taken
        return position, taken

    def _spans(self, key: str, start: int, end: int) -> Iterator[tuple[int, int, int]]:
        """``(version, first row, row past the last)`` of each version with rows in [start, end)."""
        if end <= start:
            return
        last = version_of(end)
        for version in range(version_of(start), version_of(end - 1) + 1):
            rows = self.version_rows(key, version).rows
            low = row_of(start) if version == version_of(start) else 0
            high = min(rows, row_of(end)) if version == last else rows
            if high > low:
                yield version, low, high

    # --- versions ------------------------------------------------------------------------

    def version_rows(self, key: str, version: int) -> VersionRows:
        """The rows ``version`` contributes to the front ``key`` (cached on this instance)."""
        cached = self._versions.get((key, version))
        if cached is None:
            if version == start_version(key) and not key.endswith(COMMITS):
                cached = self._snapshot(version)
            else:
                cached = self._commit(version)
            if cached.rows > MAX_ROWS:
                msg = f"{self.step}: version {version} of {self.table_url} has over {MAX_ROWS} rows"
                raise DeltaReadError(msg)
            self._versions[(key, version)] = cached
        return cached

    def _snapshot(self, version: int) -> VersionRows:
        """Every live data file at ``version``, oldest first (delta-rs reads the log).

        By modification time, then path, as Spark's own Delta source orders a snapshot: close
        to the order the commits added them (the path alone, a random name, would not be).
        """
        module = deltalake(self.step, "front")
        table = module.DeltaTable(self.path, version=version, storage_options=self.storage_options)
        self._check_schema(version, _arrow_schema(table.schema()), table.metadata())
        if pa.RecordBatchReader.from_stream(table.deletion_vectors()).read_all().num_rows:
            self._refuse_vectors(version, "the snapshot")
        actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
        files = [
            self._data_file(a["path"], a.get("num_records"), _snapshot_partition(a))
            for a in sorted(actions, key=lambda a: (int(a["modification_time"]), str(a["path"])))
        ]
        return VersionRows(version, tuple(files))

    def _commit(self, version: int) -> VersionRows:
        """The rows the commit of ``version`` appends; none if it compacts or is skipped."""
        actions = self._log_actions(version)
        info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        for meta in (a["metaData"] for a in actions if "metaData" in a):
            schema = _arrow_schema(
                deltalake(self.step, "front").Schema.from_json(meta["schemaString"])
            )
            self._check_schema(version, schema, None, meta.get("partitionColumns", []))
        if any(a["remove"].get("dataChange", True) for a in actions if "remove" in a):
            if self.skip_change_commits:
                return VersionRows(version)
            raise ChangeCommitError(self._change_message(version, info))
        adds = [a["add"] for a in actions if "add" in a and a["add"].get("dataChange", True)]
        if any(add.get("deletionVector") for add in adds):
            self._refuse_vectors(version, f"the commit ({info.get('operation', 'unknown')})")
        files = [
            self._data_file(
                add["path"], _num_records(add), tuple(add.get("partitionValues", {}).items())
            )
            for add in adds
        ]
        return VersionRows(version, tuple(files))

    def _change_message(self, version: int, info: Mapping[str, Any]) -> str:
        operation = info.get("operation", "unknown")
        mode = (info.get("operationParameters") or {}).get("mode")
        operation += f" (mode {mode})" if mode else ""
        return (
            f"{self.step}: version {version} of the table {self.table_url} is a {operation} "
            "commit: it removes rows (a remove action with dataChange=true), which an "
            "append-only front cannot pass on. Hint: set the option skipChangeCommits=true to "
            "skip such commits entirely (their added rows are not read either), or start a new "
            "query (new checkpointLocation) after the change"
        )

    def _refuse_vectors(self, version: int, where: str) -> None:
        msg = (
            f"{self.step}: version {version} of the table {self.table_url}: {where} has data "
            "files with deletion vectors, which this front does not read. Hint: purge them "
            "(REORG TABLE … APPLY (PURGE)) and start a new query, or, for a commit that "
            "changes rows, set skipChangeCommits=true"
        )
        raise DeltaReadError(msg)

    def _check_schema(
        self, version: int, schema: pa.Schema, metadata: Any, partitions: Sequence[str] = ()
    ) -> None:
        """A version read must have the query's schema: else an error naming the difference."""
        found = tuple(metadata.partition_columns) if metadata is not None else tuple(partitions)
        difference = _schema_difference(self.table_schema, schema)
        if not difference and found != self.partition_columns:
            difference = (
                f"partition columns {list(found)}, the query's {list(self.partition_columns)}"
            )
        if difference:
            msg = (
                f"{self.step}: version {version} of the table {self.table_url} has another "
                f"schema than the query's ({difference}). Hint: start a new query (new "
                "checkpointLocation, startingVersion at or after the change) to read it"
            )
            raise DeltaReadError(msg)

    def _log_actions(self, version: int) -> list[dict[str, Any]]:
        """The actions of ``_delta_log/<version>.json``, in the commit's order."""
        fs, root = self._filesystem()
        try:
            with fs.open_input_stream(_log_name(root, version)) as stream:
                text = stream.read().decode()
        except FileNotFoundError:
            msg = (
                f"{self.step}: version {version} of the table {self.table_url} is no longer in "
                "its log (removed by log clean-up?); the front cannot replay it. Hint: start a "
                "new query (new checkpointLocation)"
            )
            raise DeltaReadError(msg) from None
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def _data_file(
        self, path: str, rows: int | None, partition: tuple[tuple[str, Any], ...]
    ) -> DataFile:
        """A data file, its rows from the log's statistics or else from its Parquet footer."""
        if rows is None:
            fs, located = self._locate(path)
            rows = pq.read_metadata(fs.open_input_file(located)).num_rows
        return DataFile(path, int(rows), partition)

    # --- reading (executors) -------------------------------------------------------------

    def read_range(self, part: FrontRange) -> Iterator[pa.RecordBatch]:
        """The rows of [part.start, part.end): ``position`` and every payload column.

        Deterministic: versions in order, each version's files in its order, rows in file
        order; only the versions the range covers are read.
        """
        return self.scan_columns(part.key, part.start, part.end, list(self.columns))

    def scan_columns(
        self, key: str, start: int, end: int, columns: list[str]
    ) -> Iterator[pa.RecordBatch]:
        """Only ``columns`` (payload names) and ``position`` of the rows of [start, end).

        Reads only those columns from the Parquet files (projection); partition columns come
        from the log. Same rows, in the same order, as :meth:`read_range`.
        """
        unknown = [c for c in columns if c not in self.columns]
        if unknown:
            allowed = f"columns of the front: {', '.join(self.columns)}"
            raise ConfigError(self.step, "columns", ", ".join(unknown), allowed)
        fields = [f for f in self._fields if f.name in columns]
        for version, low, high in self._spans(key, start, end):
            yield from self._version_batches(key, version, low, high, fields)

    def _version_batches(
        self, key: str, version: int, low: int, high: int, fields: list[pa.Field]
    ) -> Iterator[pa.RecordBatch]:
        """Rows [low, high) of ``version``, file by file."""
        offset = 0
        for data in self.version_rows(key, version).files:
            first, last = max(low, offset), min(high, offset + data.rows)
            if first < last:
                base = position_of(version, offset)
                yield from self._file_batches(data, first - offset, last - offset, base, fields)
            offset += data.rows
            if offset >= high:
                break

    def _file_batches(
        self, data: DataFile, first: int, last: int, base: int, fields: list[pa.Field]
    ) -> Iterator[pa.RecordBatch]:
        """Rows [first, last) of one data file, read a row group at a time."""
        fs, located = self._locate(data.path)
        parquet = pq.ParquetFile(fs.open_input_file(located))
        if parquet.metadata.num_rows != data.rows:
            msg = (
                f"{self.step}: the data file {data.path} of {self.table_url} has "
                f"{parquet.metadata.num_rows} rows, its log entry says {data.rows}"
            )
            raise DeltaReadError(msg)
        present = set(parquet.schema_arrow.names)
        read = [self.columns[f.name] for f in fields]
        read = [c for c in read if c in present and c not in self.partition_columns]
        start = 0
        for group in range(parquet.metadata.num_row_groups):
            count = parquet.metadata.row_group(group).num_rows
            low, high = max(first, start), min(last, start + count)
            if low < high:
                rows = parquet.read_row_group(group, columns=read).slice(low - start, high - low)
                yield self._batch(rows, data, base + low, fields)
            start += count

    def _batch(
        self, rows: pa.Table, data: DataFile, position: int, fields: list[pa.Field]
    ) -> pa.RecordBatch:
        """``position`` then the payload columns of ``rows`` (partition values filled in)."""
        count = rows.num_rows
        partition = dict(data.partition)
        arrays = [pa.array(range(position, position + count), pa.int64())]
        for field in fields:
            name = self.columns[field.name]
            if name in self.partition_columns:
                arrays.append(_constant(partition.get(name), field.type, count))
            elif name in rows.column_names:
                arrays.append(rows.column(name).combine_chunks().cast(field.type))
            else:  # a column added after the file was written: null in its rows
                arrays.append(pa.nulls(count, field.type))
        schema = pa.schema([pa.field("position", pa.int64(), nullable=False), *fields])
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    # --- storage -------------------------------------------------------------------------

    def _filesystem(self, step: str | None = None) -> tuple[pafs.FileSystem, str]:
        """The pyarrow file system for the table and the table's root in it (made lazily)."""
        if self._fs is None:
            self._fs = _filesystem(self.table_url, self.storage_options, step or self.step)
        return self._fs

    def _locate(self, path: str) -> tuple[pafs.FileSystem, str]:
        """The file system and path of a data file the log names."""
        fs, root = self._filesystem()
        parsed = urlparse(path)
        if not parsed.scheme:
            return fs, f"{root}/{unquote(path)}"
        if parsed.scheme == "file":
            return pafs.LocalFileSystem(), unquote(parsed.path)
        return fs, unquote(parsed.netloc + parsed.path)


def start_version(key: str) -> int:
    """The starting version ``V0`` a key names.

    >>> start_version("file:///t@00000000000000000003:commits")
    3
    """
    return int(key.rsplit("@", 1)[1].removesuffix(COMMITS))


def _log_name(root: str, version: int) -> str:
    return f"{root}/{LOG}/{version:020d}.json"


def _num_records(add: Mapping[str, Any]) -> int | None:
    """``numRecords`` of an add action's statistics, None if it has none."""
    stats = add.get("stats")
    if not stats:
        return None
    rows = json.loads(stats).get("numRecords")
    return None if rows is None else int(rows)


def _snapshot_partition(action: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The partition values of a delta-rs add action row (``partition.<column>``)."""
    prefix = "partition."
    return tuple((k[len(prefix) :], v) for k, v in action.items() if k.startswith(prefix))


def _constant(value: Any, kind: pa.DataType, count: int) -> pa.Array:
    """``count`` times a partition value (the log's string, or a typed one) as ``kind``."""
    if value is None:
        return pa.nulls(count, kind)
    one = pa.array([value]).cast(kind)
    return pa.repeat(one[0], count)


def _arrow_schema(schema: Any) -> pa.Schema:
    """A delta-rs schema as a pyarrow schema."""
    return pa.schema(schema.to_arrow())


def _schema_difference(want: pa.Schema, have: pa.Schema) -> str:
    """What differs between two schemas, in words ('' if they are equal)."""
    wanted = {f.name: f.type for f in want}
    found = {f.name: f.type for f in have}
    parts = []
    added = [n for n in found if n not in wanted]
    dropped = [n for n in wanted if n not in found]
    changed = [
        f"{n} {wanted[n]} -> {found[n]}" for n in wanted if n in found and found[n] != wanted[n]
    ]
    if added:
        parts.append("columns added: " + ", ".join(added))
    if dropped:
        parts.append("columns dropped: " + ", ".join(dropped))
    if changed:
        parts.append("types changed: " + ", ".join(changed))
    return "; ".join(parts)


def _payload_names(step: str, path: str, names: Sequence[str]) -> dict[str, str]:
    """Payload column name -> table column name: meta names get the prefix ``table_``."""
    meta = {f.name for f in META_FIELDS}
    out = {f"{RENAMED}{n}" if n in meta else n: n for n in names}
    if len(out) != len(names) or any(n in meta for n in out):
        clash = [n for n in names if n in meta and f"{RENAMED}{n}" in names]
        allowed = (
            f"a table without both a meta column's name and {RENAMED}<that name>: "
            f"{', '.join(clash)} clash"
        )
        raise ConfigError(step, "path", path, allowed)
    return out


def _check_clock(step: str, column: str | None, *, record: bool) -> None:
    """``timestampColumn`` with ``clock=record``, and only then."""
    if record and column is None:
        raise ConfigError(step, TIMESTAMP_OPTION, None, "a column name with clock=record")
    if column is not None and not record:
        raise ConfigError(step, TIMESTAMP_OPTION, column, "only with clock=record")


def _time_field(step: str, schema: pa.Schema, column: str) -> pa.Field:
    """The record-time column: an integer or timestamp column of the table."""
    usable = [
        f.name for f in schema if pa.types.is_integer(f.type) or pa.types.is_timestamp(f.type)
    ]
    if column not in usable:
        found = f" (it is {schema.field(column).type})" if column in schema.names else ""
        allowed = f"an integer or timestamp column of the table{found}; the table has: " + (
            ", ".join(usable) or "none"
        )
        raise ConfigError(step, TIMESTAMP_OPTION, column, allowed)
    return schema.field(column)


def _check_mapping(step: str, path: str, configuration: Mapping[str, str]) -> None:
    """Column mapping (physical names differ from the schema's) is not read."""
    mode = configuration.get("delta.columnMapping.mode", "none")
    if mode != "none":
        allowed = f"a table without column mapping (delta.columnMapping.mode is {mode!r})"
        raise ConfigError(step, "path", path, allowed)


# --- pyarrow file systems ---------------------------------------------------------------------

#: delta-rs storage option names (lower case) -> pyarrow S3FileSystem's arguments.
_S3_OPTIONS = {
    "aws_access_key_id": "access_key",
    "access_key_id": "access_key",
    "aws_secret_access_key": "secret_key",
    "secret_access_key": "secret_key",
    "aws_session_token": "session_token",
    "session_token": "session_token",
    "token": "session_token",
    "aws_region": "region",
    "region": "region",
    "aws_endpoint_url": "endpoint",
    "aws_endpoint": "endpoint",
    "endpoint_url": "endpoint",
    "endpoint": "endpoint",
}


def _filesystem(
    url: str, storage_options: Mapping[str, str] | None, step: str
) -> tuple[pafs.FileSystem, str]:
    """The pyarrow file system for a table URL and the table's root path in it.

    A local path (``file://``) or ``s3://``: for S3 the endpoint, region and credentials of
    ``storageOptions`` (delta-rs's names, any case), else the ``AWS_*`` environment.
    """
    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        return pafs.LocalFileSystem(), unquote(parsed.path).rstrip("/")
    if parsed.scheme not in ("s3", "s3a"):
        allowed = "a local path or an s3:// URL (the front reads with pyarrow's file systems)"
        raise ConfigError(step, "path", url, allowed)
    return _s3(storage_options or {}), (parsed.netloc + parsed.path).rstrip("/")


def _s3(storage_options: Mapping[str, str]) -> pafs.FileSystem:
    """The pyarrow S3 file system, configured as delta-rs is by the same storage options."""
    given: dict[str, str] = {}
    for name, value in storage_options.items():
        argument = _S3_OPTIONS.get(name.lower())
        if argument is not None:
            given.setdefault(argument, value)
    endpoint = given.pop("endpoint", None) or os.environ.get("AWS_ENDPOINT_URL")
    region = given.pop("region", None) or os.environ.get("AWS_REGION", "us-east-1")
    kwargs: dict[str, Any] = {"region": region, **given}
    if endpoint:
        scheme, _, host = endpoint.rpartition("://")
        kwargs.update(endpoint_override=host or endpoint, scheme=scheme or "https")
    return pafs.S3FileSystem(**kwargs)
