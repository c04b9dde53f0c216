"""The files sink's log of committed files, in Spark's own format: ``<path>/_spark_metadata/``.

Spark's file sink keeps a log beside its output that names the files each committed batch
added (``FileStreamSinkLog``), and Spark's file readers honour it: ``spark.read`` of the folder
(given as the one path) and ``spark.readStream`` on it read exactly the files the log names
(``MetadataLogFileIndex``), whatever else the folder holds. The files sink writes the same log,
as the last step of each batch's commit, so those readers see whole committed batches only,
at any moment, crashes included.

The format (Spark's ``CompactibleFileStreamLog``, version 1), in ``_spark_metadata/``:

* ``<batch>``: a line ``v1``, then one JSON ``SinkFileStatus`` a line for each file the batch
  added, no newline after the last: ``path`` (the file's URI, percent-encoded), ``size``,
  ``isDir``, ``modificationTime`` (ms), ``blockReplication``, ``blockSize``, ``action``
  (``add``). A batch that added no file has the version line only: a reader needs the file of
  every batch from the newest compaction on.
* ``<batch>.compact`` instead, every ``interval``-th batch (``(batch + 1) % interval == 0``):
  the entries of the compaction before it and of every batch since, then its own. A reader
  reads the newest compaction and the batches after it.

A new log's interval is Spark's ``spark.sql.streaming.fileSink.log.compactInterval`` (10 by
default); a log with compactions keeps the interval they imply, derived as Spark's writer and
readers derive it (:func:`log_interval`), so a reader set otherwise reads it all the same.

Each log file is written once, whole (:func:`write_atomically`: one PUT on an object store,
never a copy; a temporary and a rename on POSIX), and a batch's only after the batch's marker
(:meth:`flamestream.spark.durable.barrier.BarrierStore.commit`): it names committed files
only, and a replayed batch whose marker exists writes it if a crash came between the two.
Old log files go with the sink's retention (:meth:`SinkLog.forget_before`), in step with
Spark's offset log, as Spark's own sink drops its log files in step with
``minBatchesToRetain``.
"""

from __future__ import annotations

import contextlib
import json
import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote, unquote

import fsspec

from flamestream.errors import InvariantError
from flamestream.spark.durable.files import (
    filesystem,
    listing,
    remove,
    renames_atomically,
    stale_temporaries,
    write_atomically,
)

#: The log's folder under the output folder (Spark's ``FileStreamSink.metadataDir``).
METADATA_DIR = "_spark_metadata"

#: The first line of every log file (``FileStreamSinkLog.VERSION``).
VERSION = "v1"

#: The suffix of a compaction's file.
COMPACT = ".compact"

#: Spark's default compaction interval, and the conf that sets another.
DEFAULT_INTERVAL = 10
INTERVAL_CONF = "spark.sql.streaming.fileSink.log.compactInterval"

#: Whether old log files are deleted (Spark's default: yes).
DELETION_CONF = "spark.sql.streaming.fileSink.log.deletion"

#: What Hadoop's local and S3A file systems report of a file: one replica, 32 MiB blocks.
REPLICATION = 1
BLOCK_SIZE = 32 << 20

#: Characters a URI's path keeps as they are (as ``java.net.URI`` leaves them): the rest is
#: percent-encoded, and Spark's readers decode it back.
_URI_SAFE = "/:@!$&'()*+,;="

#: A log file's name: a batch id, a compaction's with its suffix.
_LOG_NAME = re.compile(r"^(\d+)(\.compact)?$")


@dataclass(frozen=True)
class LoggedFile:
    """A file a batch added: one line of the log."""

    uri: str  #: the file's URI, percent-encoded
    size: int  #: bytes
    modified: int  #: modification time, ms since the epoch

    def line(self) -> str:
        """The file's ``SinkFileStatus`` line, keys in Spark's order."""
        status = {
            "path": self.uri,
            "size": self.size,
            "isDir": False,
            "modificationTime": self.modified,
            "blockReplication": REPLICATION,
            "blockSize": BLOCK_SIZE,
            "action": "add",
        }
        return json.dumps(status, separators=(",", ":"))

    @classmethod
    def parse(cls, line: str) -> LoggedFile:
        """A ``SinkFileStatus`` line (written by this module or by Spark)."""
        status = json.loads(line)
        return cls(str(status["path"]), int(status["size"]), int(status["modificationTime"]))


def is_compaction(batch: int, interval: int) -> bool:
    """Whether ``batch``'s log file is a compaction (``CompactibleFileStreamLog``).

    >>> [b for b in range(12) if is_compaction(b, 3)]
    [2, 5, 8, 11]
    """
    return (batch + 1) % interval == 0


def last_compaction(batch: int, interval: int) -> int:
    """The newest compaction at or before ``batch`` (-1: none yet).

    >>> last_compaction(7, 3), last_compaction(8, 3), last_compaction(1, 3)
    (5, 8, -1)
    """
    return (batch + 1) // interval * interval - 1


def derive_interval(default: int, compaction: int) -> int:
    """The interval a log whose one compaction is ``compaction`` has, as Spark derives it.

    The smallest divisor of ``compaction + 1`` at least ``default`` (and at most half of
    it), else ``compaction + 1``: Spark's ``deriveCompactInterval``.

    >>> derive_interval(10, 9), derive_interval(10, 29), derive_interval(10, 19)
    (10, 10, 20)
    """
    n = compaction + 1
    if n <= default:
        return n
    if default < n // 2:
        return next((i for i in range(default, n // 2 + 1) if n % i == 0), n)
    return n


def log_interval(compactions: Iterable[int], default: int) -> int:
    """The interval of a log with these compactions; ``default`` for a log without any.

    Two or more: the distance between the newest two. One: :func:`derive_interval`. As
    Spark's ``CompactibleFileStreamLog.compactInterval``.

    >>> log_interval([], 10), log_interval([9, 19, 29], 5), log_interval([4], 10)
    (10, 10, 5)
    """
    newest = sorted(compactions, reverse=True)
    if len(newest) >= 2:
        return newest[0] - newest[1]
    if newest:
        return derive_interval(default, newest[0])
    return default


def folder_uri(url: str) -> str:
    """The URI of the output folder ``url`` (any fsspec URL), as the log names its files.

    A local path becomes ``file:///…`` (absolute, as Spark's own sink writes it); any other
    keeps the scheme it was given (``s3a://bucket/out``: name ``path`` as Spark's readers
    name the folder). The path is percent-encoded.
    """
    protocol, _ = fsspec.core.split_protocol(url)
    _, root = filesystem(url)
    if protocol in (None, "file", "local"):
        return "file://" + quote(root.rstrip("/") or "/", safe=_URI_SAFE)
    return f"{protocol}://" + quote(root.rstrip("/"), safe=_URI_SAFE)


def modified_ms(fs: Any, info: Mapping[str, Any]) -> int:
    """A file's modification time in ms, from its listing entry (asked for if absent)."""
    when = info.get("mtime", info.get("LastModified"))
    if when is None:
        when = fs.modified(info["name"])
    if isinstance(when, datetime):
        return int(when.timestamp() * 1000)
    return int(float(when) * 1000)


class SinkLog:
    """The log of committed files of one output folder (``url``, any fsspec URL).

    ``interval``: its compaction interval (fixed for the folder once a compaction exists:
    :meth:`scan`); ``deletion``: whether :meth:`forget_before` deletes old log files. Made on
    the driver at query start, pickled to each batch's commit.
    """

    def __init__(self, url: str, interval: int = DEFAULT_INTERVAL, deletion: bool = True):
        self.url = url.rstrip("/")
        self.interval = interval
        self.deletion = deletion
        self.uri = folder_uri(self.url)

    def _folder(self) -> tuple[Any, str]:
        fs, root = filesystem(self.url)
        return fs, posixpath.join(root, METADATA_DIR)

    def name(self, batch: int) -> str:
        """The name of batch ``batch``'s log file."""
        return f"{batch}{COMPACT}" if is_compaction(batch, self.interval) else str(batch)

    def file_uri(self, name: str) -> str:
        """The URI of the output folder's file ``name``."""
        return f"{self.uri}/{quote(name, safe=_URI_SAFE)}"

    # --- writing ---------------------------------------------------------------------------

    def make_folder(self) -> None:
        """Make the log's folder, so that Spark's readers go by the log from the first file on.

        Spark's readers take a folder with ``_spark_metadata`` for a sink's output, and
        ``spark.readStream`` decides so once, when it first finds files. An object store has no
        folders: a zero-byte object named ``_spark_metadata/`` is one for Hadoop's S3A.
        """
        fs, folder = self._folder()
        if renames_atomically(fs):
            fs.makedirs(folder, exist_ok=True)
        elif not listing(fs, folder):
            fs.pipe_file(folder + "/", b"")

    def add(self, batch: int, files: Iterable[LoggedFile]) -> None:
        """Write batch ``batch``'s log file, naming ``files``; once, whole.

        A compaction names, before them, every file of the compaction before it and of the
        batches since (each of their log files read once).
        """
        fs, folder = self._folder()
        lines = [logged.line() for logged in files]
        if is_compaction(batch, self.interval):
            since = range(max(0, batch - self.interval), batch)
            lines = [line for earlier in since for line in self.lines(earlier)] + lines
        data = "\n".join([VERSION, *lines]).encode()
        write_atomically(fs, posixpath.join(folder, self.name(batch)), data)

    def has(self, batch: int) -> bool:
        """Whether batch ``batch``'s log file exists (asked of the store, not of a cache)."""
        fs, folder = self._folder()
        with contextlib.suppress(AttributeError):
            fs.invalidate_cache(folder)
        return bool(fs.exists(posixpath.join(folder, self.name(batch))))

    def rebuild(self, newest: int, files: Mapping[int, list[LoggedFile]]) -> None:
        """Log batches ``0 … newest`` of a folder without a log, from ``files`` (by batch).

        For a folder whose batches were committed but not logged (written before the sink
        kept a log, or whose log was removed): the newest compaction at or before ``newest``,
        with the one before it (two compactions give readers the interval), then the batches
        after it, in that order, so that the log is readable at every step.
        """
        fs, folder = self._folder()
        compaction = last_compaction(newest, self.interval)
        for point in (compaction - self.interval, compaction):
            if point >= 0:
                named = [f for batch in sorted(files) if batch <= point for f in files[batch]]
                data = "\n".join([VERSION, *(f.line() for f in named)]).encode()
                write_atomically(fs, posixpath.join(folder, self.name(point)), data)
        for batch in range(compaction + 1, newest + 1):
            self.add(batch, files.get(batch, []))

    def forget_before(self, batch: int) -> int:
        """Delete the log files no reader needs once batch ``batch`` is the oldest kept; how many.

        Everything before the newest compaction at or before ``batch`` (readers read from the
        newest compaction on, which is not older), and temporaries crashes left there. One
        listing. Nothing when Spark's ``spark.sql.streaming.fileSink.log.deletion`` is off.
        """
        if not self.deletion:
            return 0
        fs, folder = self._folder()
        entries = listing(fs, folder)
        keep_from = last_compaction(batch, self.interval)
        old = [path for number, _, path in _log_files(entries) if number < keep_from]
        remove(fs, old + stale_temporaries(entries, keep_from))
        return len(old)

    # --- reading ---------------------------------------------------------------------------

    def lines(self, batch: int) -> list[str]:
        """The ``SinkFileStatus`` lines of batch ``batch``'s log file."""
        fs, folder = self._folder()
        return _status_lines(fs, posixpath.join(folder, self.name(batch)))


def _log_files(paths: Iterable[str]) -> list[tuple[int, bool, str]]:
    """(batch, is a compaction, path) of the log files among ``paths``."""
    found = []
    for path in paths:
        match = _LOG_NAME.match(posixpath.basename(path.rstrip("/")))
        if match:
            found.append((int(match.group(1)), bool(match.group(2)), path))
    return found


def _status_lines(fs: Any, path: str) -> list[str]:
    """The lines after the version line of the log file at ``path``."""
    version, *lines = fs.cat_file(path).decode("utf-8").split("\n")
    if version != VERSION:
        msg = f"{path}: a log file of version {version!r}; flamestream reads {VERSION!r}"
        raise InvariantError(msg)
    return [line for line in lines if line]


def log_state(url: str, default_interval: int) -> tuple[int, int]:
    """(the interval, the newest logged batch or -1) of the output folder ``url``'s log.

    From one listing, as Spark reads them: the interval from the compactions
    (:func:`log_interval`), and the newest batch whose log file has the name that interval
    gives it (``getLatestBatchId``).
    """
    fs, root = filesystem(url)
    found = _log_files(listing(fs, posixpath.join(root, METADATA_DIR)))
    interval = log_interval([number for number, compact, _ in found if compact], default_interval)
    named = [number for number, compact, _ in found if compact == is_compaction(number, interval)]
    return interval, max(named, default=-1)


def committed_files(url: str, default_interval: int = DEFAULT_INTERVAL) -> list[str] | None:
    """The files of the output folder ``url`` that its log names, as its file system's paths.

    None if the folder has no log. Read as Spark's readers read it (``allFiles``): the newest
    batch logged, the newest compaction at or before it and the batches after it. A log file
    removed by the writer's clean-up while it is read (a compaction came) sends the read
    round once more.
    """
    fs, root = filesystem(url)
    if not fs.exists(posixpath.join(root, METADATA_DIR)):
        return None
    try:
        lines = _committed_lines(url, default_interval)
    except FileNotFoundError:  # removed by a clean-up while read: the log has moved on
        lines = _committed_lines(url, default_interval)
    return [fs._strip_protocol(unquote(LoggedFile.parse(line).uri)) for line in lines]


def _committed_lines(url: str, default_interval: int) -> list[str]:
    """The status lines a reader takes from ``url``'s log, read now."""
    interval, newest = log_state(url, default_interval)
    log = SinkLog(url, interval)
    first = max(0, last_compaction(newest, interval))
    return [line for batch in range(first, newest + 1) for line in log.lines(batch)]
