"""The ``files`` sink: released rows as JSON lines or Parquet files, named by batch id.

With ``release=commit`` (default) a batch is one file, ``part-<batch id>.jsonl`` (or
``.parquet``), sorted by global time, written whole by the batch's commit
(:func:`~flamestream.spark.durable.files.open_atomically`: a hidden temporary renamed on a
POSIX file system, one upload on an object store); a replayed batch writes the same file.

With ``release=tasks`` each write task attempt writes its own sorted part,
``part-<batch id>-<partition>.jsonl`` (more parts, ``…-<partition>-<k>.jsonl``, when its rows
come in several runs of global-time order, as a read task's sources do), under a hidden name
of its attempt's own, ``.part-<batch id>-<partition>.jsonl.<attempt>.tmp`` (a ``.`` first,
which Spark and most readers skip). The batch's commit publishes the parts its commit messages
name, those of the successful attempts (a rename; on an object store a server-side copy,
then a delete), and then removes every other file of the batch: visible parts an earlier
attempt of the batch published and this one did not, hidden parts of attempts that failed or
were killed by a crash. So a replayed batch overwrites its own files, and a restart clears
what its crashed attempt left, on any store.

Once a batch's commit is marked, the sink logs the batch's files in Spark's file sink log,
``<path>/_spark_metadata/`` (:mod:`flamestream.spark.durable.sink_log`): Spark's readers of
the folder (``spark.read.json(path)``, ``spark.readStream`` on it) read only the files it
names, so they see whole committed batches at any moment, never a batch half published or a
part an earlier attempt of a replayed batch left. A reader listing the folder itself sees
what is there; :func:`committed_files` gives the files the log names, for other readers.

Options: ``path`` (required), ``format`` (``json`` or ``parquet``), ``release`` (``commit``
or ``tasks``), plus the common sink options (``checkpointLocation``, ``stateLocation``,
``columns``: ``all``, ``value`` or ``value,time``, the columns each line or Parquet row holds;
see :mod:`flamestream.spark.connector.sink`).
"""

from __future__ import annotations

import contextlib
import json
import posixpath
import re
import struct
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from flamestream.errors import ConfigError
from flamestream.jvm import spark_confs
from flamestream.spark.connector.faults import crash_point
from flamestream.spark.connector.options import OptionReader
from flamestream.spark.connector.sink import PartWriter, SinkOutput
from flamestream.spark.durable import (
    attempt_of_task,
    listing,
    listing_details,
    open_atomically,
    publish_file,
    remove,
    renames_atomically,
)
from flamestream.spark.durable.files import TEMPORARY, abandon
from flamestream.spark.durable.sink_log import (
    DEFAULT_INTERVAL,
    DELETION_CONF,
    INTERVAL_CONF,
    METADATA_DIR,
    LoggedFile,
    SinkLog,
    committed_files,
    log_state,
    modified_ms,
)

__all__ = ["FilesOutput", "committed_files"]

#: A released file's name: ``part-<batch>[-<partition>[-<run>]].<jsonl|parquet>``.
_RELEASED = re.compile(r"^part-(\d{12})(?:-\d{5}(?:-\d+)?)?\.(?:jsonl|parquet)$")


class FilesOutput(SinkOutput):
    """JSON lines or Parquet files named by batch id."""

    kind = "files"
    supports_task_release = True

    def __init__(self, options: OptionReader) -> None:
        self.path = options.string("path", required=True, what="directory URL").rstrip("/")
        self.format = options.choice("format", ["json", "parquet"], "json")
        self.suffix = "jsonl" if self.format == "json" else "parquet"
        self.step = options.step
        self._check_path(options)
        #: the log of committed files Spark's readers go by; its settings are read at start
        self.log = SinkLog(self.path)
        #: the files this process's commit made visible, by batch, until it logs them
        self._made: dict[int, set[str]] = {}

    def _check_path(self, options: OptionReader) -> None:
        """Fail before the query starts if ``path`` cannot become the output directory.

        ``path`` must be a directory, or not exist yet with a directory (not a file) as its
        nearest existing ancestor: else the first commit, which creates it, would fail.
        """
        allowed = "a directory URL (existing, or to be created), not a file"
        try:
            fs, root = fsspec.core.url_to_fs(self.path)
        except (ValueError, ImportError) as exc:
            raise ConfigError(options.step, "path", self.path, f"{allowed} ({exc})") from None
        where = root
        while not fs.exists(where):
            parent = posixpath.dirname(where.rstrip("/"))
            if not parent or parent == where:
                return  # nothing of it exists yet (an object store's new bucket, say)
            where = parent
        if not fs.isdir(where):
            shown = fs.unstrip_protocol(where)
            found = "is a file" if where == root else f"has a file in its way: {shown}"
            raise ConfigError(options.step, "path", self.path, f"{allowed}; it {found}")

    def prepare(self, marked: int) -> None:
        """Get the log ready for the batches after ``marked`` (query start, driver).

        1. Spark's settings for its sink log (through the JVM shim, when it runs): the
           interval of a new log and whether old log files are deleted.
        2. The log's interval (a log with compactions keeps theirs) and its newest batch.
        3. A log ahead of the sink's markers is not this checkpoint's (a batch is logged
           only after its marker): refused, before this query's batches overwrite files
           with the names of that log's.
        4. A log behind them is made good: the batches a crash left between their marker
           and their log entry logged now; a folder without a log (written before the sink
           kept one, or whose log was removed) gets one from its files of the marked batches.
        5. The log's folder made: Spark's readers go by the log from the first file on.
        """
        # 1. Spark's settings
        conf = spark_confs([INTERVAL_CONF, DELETION_CONF])
        default = _interval(self.step, conf.get(INTERVAL_CONF))
        deletion = conf.get(DELETION_CONF, "true").strip().lower() != "false"
        # 2. the log as it is
        interval, latest = log_state(self.path, default)
        self.log = SinkLog(self.path, interval, deletion)
        # 3. another query's log
        if latest > marked:
            raise ConfigError(
                self.step,
                "path",
                self.path,
                f"a folder without a {METADATA_DIR} log, or with this checkpoint's: it logs "
                f"batches up to {latest}, this checkpoint's sink committed "
                + (f"up to {marked}" if marked >= 0 else "none")
                + " (another query's output?); write to a new path, or remove that one",
            )
        # 4. made good
        fs, root = fsspec.core.url_to_fs(self.path)
        if latest < 0 <= marked:  # one listing of the folder: it may hold many batches
            files = self._logged(fs, listing_details(fs, root, "part-"), range(marked + 1))
            self.log.rebuild(marked, files)
        else:
            for batch in range(latest + 1, marked + 1):
                self.log.add(batch, self._batch_files(fs, root, batch))
        # 5. the folder
        self.log.make_folder()

    def _batch_files(self, fs: Any, root: str, batch_id: int) -> list[LoggedFile]:
        """The released files in the folder of batch ``batch_id``: one prefix listing."""
        infos = listing_details(fs, root, f"part-{batch_id:012d}")
        return self._logged(fs, infos, range(batch_id, batch_id + 1)).get(batch_id, [])

    def _logged(
        self, fs: Any, infos: list[dict[str, Any]], batches: range
    ) -> dict[int, list[LoggedFile]]:
        """The released files among ``infos`` (listing entries) of ``batches``, by batch."""
        found: dict[int, list[LoggedFile]] = {}
        for info in sorted(infos, key=lambda i: str(i["name"])):
            name = posixpath.basename(str(info["name"]).rstrip("/"))
            match = _RELEASED.match(name)
            if match and int(match.group(1)) in batches:
                logged = LoggedFile(
                    self.log.file_uri(name), int(info["size"]), modified_ms(fs, info)
                )
                found.setdefault(int(match.group(1)), []).append(logged)
        return found

    def committed(self, batch_id: int, replayed: bool) -> None:
        """Log the batch's released files (its marker is written): Spark's readers read them.

        The files are those visible under the batch's names: the commit released and
        published them before its marker, and removed every other file of the batch. A
        replay finding the marker changes none of them, and logs them only if a crash came
        before the log was written. One prefix listing (on local disk, where a listing reads
        the whole folder, which grows with every batch, a ``stat`` of each file this commit
        made visible) and one write (a compaction reads the log files since the one before).
        """
        if replayed and self.log.has(batch_id):
            return
        fs, root = fsspec.core.url_to_fs(self.path)
        made = self._made.pop(batch_id, set())  # this commit's release and publish, if any
        if replayed or not renames_atomically(fs):
            self.log.add(batch_id, self._batch_files(fs, root, batch_id))
            return
        infos = []
        for name in sorted(made):
            with contextlib.suppress(FileNotFoundError):  # an attempt's, since removed
                infos.append(dict(fs.info(posixpath.join(root, name))))
        batch = range(batch_id, batch_id + 1)
        self.log.add(batch_id, self._logged(fs, infos, batch).get(batch_id, []))

    def forget_before(self, batch_id: int) -> None:
        """Delete the log files readers no longer need (``SinkLog.forget_before``)."""
        self.log.forget_before(batch_id)

    def release(self, batch_id: int, rows: pa.Table) -> None:
        """Write the batch's file atomically."""
        fs, root = fsspec.core.url_to_fs(self.path)
        target = posixpath.join(root, f"part-{batch_id:012d}.{self.suffix}")
        with open_atomically(fs, target) as out:
            self._write(out, rows)
        self._made.setdefault(batch_id, set()).add(posixpath.basename(target))

    def write_part(self, batch_id: int, partition_id: int, rows: pa.Table, run: int = 0) -> str:
        """Write a task's part under a hidden name; the commit publishes it."""
        part = self.open_part(batch_id, partition_id, run)
        part.write(rows)
        return part.close()

    def open_part(self, batch_id: int, partition_id: int, run: int = 0) -> PartWriter:
        """A task's part, written as its blocks come (a Parquet row group, or lines, each).

        Into a hidden file of the task attempt's own, which the commit publishes: concurrent
        attempts never interleave, and each file is written once.
        """
        return _FilesPart(self, batch_id, partition_id, run)

    def discard(self, batch_id: int, parts: list[str]) -> None:
        """Remove the hidden parts of a batch whose commit was done before (a replay)."""
        fs, root = fsspec.core.url_to_fs(self.path)
        self._clear(fs, root, batch_id, None)

    def publish(self, batch_id: int, parts: list[str]) -> None:
        """Publish the attempts' hidden ``parts``; remove every other file of the batch.

        Run again after a crash, it finds the parts published already (a replayed batch's
        tasks wrote them again under hidden names first, so both cases end in the same files).
        """
        fs, root = fsspec.core.url_to_fs(self.path)
        for hidden in parts:
            with contextlib.suppress(FileNotFoundError):  # published before a crash
                publish_file(
                    fs, posixpath.join(root, hidden), posixpath.join(root, _visible(hidden))
                )
            crash_point("sink.commit.published", batch_id)  # (at the first part)
        self._clear(fs, root, batch_id, {_visible(hidden) for hidden in parts})
        self._made.setdefault(batch_id, set()).update(_visible(hidden) for hidden in parts)

    def _clear(self, fs: Any, root: str, batch_id: int, keep: set[str] | None) -> None:
        """Remove batch ``batch_id``'s hidden parts, and its visible ones not in ``keep``.

        ``keep=None`` leaves the visible ones. Two listings of the batch's names only (on an
        object store, filtered by the server): the folder itself grows without end.
        """
        prefix = f"part-{batch_id:012d}-"
        stale = listing(fs, root, "." + prefix)
        if keep is not None:
            stale += [p for p in listing(fs, root, prefix) if posixpath.basename(p) not in keep]
        remove(fs, stale)

    def _write(self, out: Any, rows: pa.Table) -> None:
        if self.format == "parquet":
            pq.write_table(rows, out, **_parquet_options(rows.schema))
        else:
            _write_json_lines(out, rows)


class _FilesPart(PartWriter):
    """A write task's part file, written block by block (``FilesOutput.open_part``)."""

    def __init__(self, output: FilesOutput, batch_id: int, partition_id: int, run: int) -> None:
        self.fs, root = fsspec.core.url_to_fs(output.path)
        if renames_atomically(self.fs):  # a folder to make (an object store has none)
            self.fs.makedirs(root, exist_ok=True)
        more = f"-{run}" if run else ""  # a task's further parts (most tasks write one)
        name = f"part-{batch_id:012d}-{partition_id:05d}{more}.{output.suffix}"
        self.hidden = _hidden(name, attempt_of_task())
        self.own = posixpath.join(root, self.hidden)
        self.parquet = output.format == "parquet"
        # written once, under the attempt's own name: on an object store it appears (whole)
        # when closed; on local disk a crash leaves part of it, hidden, which the batch's
        # commit (run again after the crash) removes
        self.out = self.fs.open(self.own, "wb")
        self.writer: pq.ParquetWriter | None = None

    def write(self, rows: pa.Table) -> None:
        """Append ``rows``: a Parquet row group, or their lines."""
        if not self.parquet:
            if rows.num_rows:
                _write_json_lines(self.out, rows)
            return
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.out, rows.schema, **_parquet_options(rows.schema))
        if rows.num_rows:  # no empty row group
            self.writer.write_table(rows)

    def close(self) -> str:
        """Finish the file; its hidden name, for the commit to publish."""
        if self.writer is not None:
            self.writer.close()
        self.out.close()
        return self.hidden

    def abort(self) -> None:
        """Drop the attempt's file: nothing of it stays (an upload is never completed)."""
        if self.writer is not None:  # closed first: else it writes its footer when collected
            self.writer.close()
        abandon(self.fs, self.out, self.own)


def _interval(step: str, value: str | None) -> int:
    """The compaction interval Spark's conf ``value`` sets (unset: Spark's default)."""
    if value is None:
        return DEFAULT_INTERVAL
    if not value.strip().isdigit() or int(value) < 1:  # Spark's own file sink refuses it too
        raise ConfigError(step, INTERVAL_CONF, value, "a positive integer (10 by default)")
    return int(value)


def _hidden(name: str, attempt: int) -> str:
    """The hidden name task attempt ``attempt`` writes part ``name`` under."""
    return f".{name}.{attempt}{TEMPORARY}"


def _visible(hidden: str) -> str:
    """The part's own name, from the hidden name of an attempt's file (:func:`_hidden`)."""
    return hidden[1:].removesuffix(TEMPORARY).rsplit(".", 1)[0]


def _parquet_options(schema: pa.Schema) -> dict[str, Any]:
    """How the sink writes Parquet: dictionaries and statistics where they pay."""
    return {
        "use_dictionary": [name for name in DICTIONARY_COLUMNS if name in schema.names],
        "write_statistics": [name for name in schema.names if name not in UNSUMMARIZED_COLUMNS],
    }


#: Parquet columns worth a dictionary: their values repeat (a source per file, a sink per
#: query). Tried on the others too (traces, rendered values), Parquet's dictionary only
#: filled up and fell back: word count's 3 M released rows wrote in 0.69-0.76 s with it
#: everywhere, 0.54 s so, and 4 MB smaller than with none.
DICTIONARY_COLUMNS = ("source", "sink")

#: Parquet columns written without min/max statistics: no reader prunes by an encoded trace,
#: and computing them was a tenth of the write (1.75 M released rows: 0.31 -> 0.29 s).
UNSUMMARIZED_COLUMNS = ("trace",)

#: Rows rendered at a time when writing JSON lines (bounds the memory a release needs).
JSON_SLICE = 1 << 16

#: Strings ``json.dumps`` copies verbatim between quotes: printable ASCII except ``"`` and ``\``.
_VERBATIM = r"^[ !#-\[\]-~]*$"

#: The bytes of such strings: a buffer without any other byte needs no escaping at all.
_VERBATIM_BYTES = bytes(b for b in range(0x20, 0x7F) if b not in b'"\\')

_TEXT = pa.large_string()


def _write_json_lines(out: Any, rows: pa.Table) -> None:
    """Write ``rows`` as JSON lines, byte for byte what :func:`_json_lines` gives.

    Columns are rendered to JSON text with Arrow kernels (integers, booleans, strings that
    need no escaping) and joined into lines per slice; other values go through ``json.dumps``
    one column at a time. Tables without rows, without columns or with duplicate column
    names keep the row-by-row path.
    """
    names = rows.column_names
    if not names or len(set(names)) != len(names) or not rows.num_rows:
        out.write(_json_lines(rows))
        return
    heads = [("{" if i == 0 else ",") + json.dumps(n) + ":" for i, n in enumerate(names)]
    glue = pa.scalar("", _TEXT)
    for part in rows.to_batches(max_chunksize=JSON_SLICE):  # the table's chunks: no copy
        if not part.num_rows:  # where a column's chunks are empty (they cut the others')
            continue
        lines = pc.binary_join_element_wise(*_line_pieces(heads, part.columns), glue)
        out.write(memoryview(_text_buffer(lines)))  # no copy of the lines


def _line_pieces(heads: list[str], columns: list[pa.Array]) -> list[Any]:
    """What a JSON line joins: text constant in every line (a scalar), and columns' values.

    A column holding one value throughout (a front's source and front id, a sink's name) is
    rendered once and becomes part of the constant text around it: fewer pieces to join.
    """
    uniform = [_uniform(column) for column in columns]
    uniform[-1] = uniform[-1] and not all(uniform)  # joined, one column at least is an array
    pieces: list[Any] = []
    constant = ""
    for head, column, folded in zip(heads, columns, uniform, strict=True):
        constant += head
        escapes = _needs_escapes(column) if _is_text(column) else None
        if folded:
            constant += _json_values(column.slice(0, 1))[0].as_py()
        elif escapes is False and not column.null_count:  # its quotes are constant text too
            pieces += [pa.scalar(constant + '"', _TEXT), column.cast(_TEXT)]
            constant = '"'
        else:
            pieces += [pa.scalar(constant, _TEXT), _json_values(column, escapes)]
            constant = ""
    return [*pieces, pa.scalar(constant + "}\n", _TEXT)]


def _is_text(column: pa.Array) -> bool:
    return bool(pa.types.is_string(column.type) or pa.types.is_large_string(column.type))


def _needs_escapes(text: pa.Array) -> bool:
    """Whether a string in ``text`` has a byte that JSON escapes (or is not ASCII)."""
    return bool(_text_buffer(text.cast(_TEXT)).to_pybytes().translate(None, _VERBATIM_BYTES))


def _uniform(column: pa.Array) -> bool:
    """Whether every value of ``column`` (not empty) equals the first, which is not null."""
    if column.null_count or pa.types.is_nested(column.type):
        return False
    first = column[0]
    return bool(pc.all(pc.equal(column, first)).as_py())


def _json_values(column: pa.Array, escapes: bool | None = None) -> pa.Array:
    """Every value of ``column`` as the JSON text ``json.dumps`` gives it; no nulls.

    ``escapes``: for text, whether a value needs escapes, if the caller knows already.
    """
    kind = column.type
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        text = pc.cast(column, _TEXT)
    elif _is_text(column):
        column = column.cast(_TEXT)
        quote = pa.scalar('"', _TEXT)
        text = pc.binary_join_element_wise(quote, column, quote, pa.scalar("", _TEXT))
        if _needs_escapes(column) if escapes is None else escapes:
            escape = pc.invert(pc.fill_null(pc.match_substring_regex(column, _VERBATIM), True))
            escaped = [json.dumps(v) for v in column.filter(escape).to_pylist()]
            text = pc.replace_with_mask(text, escape, pa.array(escaped, _TEXT))
    elif pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        text = _hex_values(column.cast(pa.large_binary()))
    else:
        dumps = json.dumps
        text = pa.array(
            [dumps(_plain(v), separators=(",", ":")) for v in column.to_pylist()], _TEXT
        )
    return pc.fill_null(text, pa.scalar("null", _TEXT))


def _hex_values(column: pa.Array) -> pa.Array:
    """Each bytes value as ``json.dumps(value.hex())`` gives it (nulls stay null).

    One ``hex()`` over the values' bytes back to back, then the offsets doubled: the trace
    column of every graph output is binary, and hexing it value by value was most of the
    rendering time.
    """
    _, offsets, data = column.buffers()
    bounds = pa.Array.from_buffers(pa.int64(), len(column) + 1, [None, offsets], 0, column.offset)
    first, last = bounds[0].as_py(), bounds[-1].as_py()
    raw = data.slice(first, last - first).to_pybytes() if data else b""
    digits = pa.py_buffer(raw.hex().encode())
    doubled = pc.multiply(pc.subtract(bounds, first), 2).buffers()[1]
    hexed = pa.Array.from_buffers(_TEXT, len(column), [None, doubled, digits], 0)
    quote = pa.scalar('"', _TEXT)
    quoted = pc.binary_join_element_wise(quote, hexed, quote, pa.scalar("", _TEXT))
    return pc.if_else(pc.is_null(column), pa.scalar(None, _TEXT), quoted)


def _text_buffer(text: pa.Array) -> pa.Buffer:
    """The UTF-8 bytes of a large_string array's values, back to back (not copied)."""
    _, offsets, data = text.buffers()
    if offsets is None or data is None:
        return pa.py_buffer(b"")
    (first,) = struct.unpack_from("<q", offsets, 8 * text.offset)  # int64 offsets
    (last,) = struct.unpack_from("<q", offsets, 8 * (text.offset + len(text)))
    return data.slice(first, last - first)


def _plain(value: Any) -> Any:
    return value.hex() if isinstance(value, bytes) else value


def _json_lines(rows: pa.Table) -> bytes:
    """JSON lines, row by row: the reference for :func:`_write_json_lines`."""
    lines = (
        json.dumps({k: _plain(v) for k, v in row.items()}, separators=(",", ":"))
        for row in rows.to_pylist()
    )
    return ("\n".join(lines) + "\n").encode()
