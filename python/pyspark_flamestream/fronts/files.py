"""The ``files`` front: newline-delimited records appended over time to files in a directory.

Each file matching ``pattern`` under ``path`` (any fsspec URL: local, ``memory://``, object
stores) is a front. Only complete lines (ending in a newline) are admitted; a partial last
line waits for its newline. A record's determinant is ``(file, byte offset of the line)``:
``source`` is the file's path relative to ``path`` (errors and dead letters name the full
URL) and ``position`` the byte offset.

Options: ``path`` (required), ``pattern`` (``*``), ``encoding`` (``utf-8``), ``onBadRecord``
(``fail`` or ``deadLetter``), ``deadLetterPath`` (required with ``deadLetter``),
``maxRecordBytes`` (none: lines of any length are read; else longer lines are bad records),
``timestampField`` (required with ``clock=record``: lines are JSON objects and this numeric
field is the record's time), plus the common front options.
"""

from __future__ import annotations

import codecs
import posixpath
from collections.abc import Iterator, Mapping
from typing import Any

import fsspec
import pyarrow as pa
import pyarrow.compute as pc

from flamestream.errors import ConfigError, RecordError
from flamestream.spark.connector.front import FrontSource
from flamestream.spark.connector.offsets import FrontRange
from flamestream.spark.connector.options import OptionReader
from flamestream.spark.connector.stamping import json_field_times

#: Bytes read per request when scanning files.
BLOCK = 1 << 20


class FilesSource(FrontSource):
    """Appended-to text files."""

    kind = "files"
    step = "front files"

    def __init__(self, options: OptionReader) -> None:
        self.path = options.string("path", required=True, what="directory URL").rstrip("/")
        self.pattern = options.string("pattern", "*", what="glob")
        self.encoding = options.string("encoding", "utf-8", what="Python codec name")
        try:
            codecs.lookup(self.encoding)
        except LookupError:
            raise ConfigError(options.step, "encoding", self.encoding, "a Python codec") from None
        self.on_bad_record = options.choice("onBadRecord", ["fail", "deadLetter"], "fail")
        self.dead_letter = options.optional_string("deadLetterPath", what="directory URL")
        if self.on_bad_record == "deadLetter" and not self.dead_letter:
            raise ConfigError(
                options.step, "deadLetterPath", None, "a directory URL when onBadRecord=deadLetter"
            )
        #: longer lines are bad records (fail or dead letter); None: lines of any length
        self.max_record_bytes = options.optional_integer("maxRecordBytes", minimum=1)
        #: clock=record: the numeric field of each line (a JSON object) that is its time
        self.timestamp_field = options.optional_string("timestampField", what="JSON field name")
        record = options.choice("clock", ["wall", "logical", "record"], "wall") == "record"
        if record and self.timestamp_field is None:
            raise ConfigError(
                options.step, "timestampField", None, "a JSON field name with clock=record"
            )
        if self.timestamp_field is not None and not record:
            raise ConfigError(
                options.step, "timestampField", self.timestamp_field, "only with clock=record"
            )
        if self.timestamp_field is not None:
            self.record_time_from = f"the lines' JSON field {self.timestamp_field!r}"
        fs, root = self._fs()
        if not fs.isdir(root):
            raise ConfigError(options.step, "path", self.path, "an existing directory URL")
        self._prefix = fs.unstrip_protocol(root).rstrip("/") + "/"
        self._fs_cache: Any = None

    def _fs(self) -> tuple[Any, str]:
        fs, root = fsspec.core.url_to_fs(self.path)
        return fs, root

    #: byte offsets: the next line starts past the newline, not at the next position
    positions_count_records = False

    def position_after(self, key: str, position: int) -> int:
        """Where the line after the one starting at ``position`` starts."""
        fs, _ = fsspec.core.url_to_fs(key)
        path = fs._strip_protocol(key)
        after = _line_end(fs, path, position, int(fs.size(path)))
        return position if after is None else after

    def payload_fields(self) -> list[pa.Field]:
        """The line, without its newline."""
        return [pa.field("value", pa.string())]

    def record_times(self, key: str, batch: pa.RecordBatch) -> pa.Array:
        """``clock=record``: each line's ``timestampField`` (lines are JSON objects)."""
        assert self.timestamp_field is not None  # clock=record requires it  # noqa: S101
        return json_field_times(self.step, key, self.timestamp_field, batch)

    def source_name(self, key: str) -> str:
        """The file's path under the front's directory."""
        return key[len(self._prefix) :] if key.startswith(self._prefix) else key

    def discover(self, known: Mapping[str, int]) -> dict[str, int]:
        """Every matching file, up to its last complete line."""
        fs, root = self._fs()
        out = {}
        for name in sorted(fs.glob(posixpath.join(root, self.pattern))):
            if fs.isdir(name):
                continue
            key = fs.unstrip_protocol(name)
            out[key] = self._last_line_end(fs, name, known.get(key, 0))
        return out

    def _last_line_end(self, fs: Any, name: str, floor: int) -> int:
        size = int(fs.size(name))
        end = size
        while end > floor:
            start = max(floor, end - BLOCK)
            chunk = fs.cat_file(name, start=start, end=end)
            cut: int = chunk.rfind(b"\n")
            if cut >= 0:
                return start + cut + 1
            end = start
        return floor

    def advance(self, key: str, start: int, end: int, records: int) -> tuple[int, int]:
        """After ``records`` complete lines from ``start``."""
        fs, _ = fsspec.core.url_to_fs(key)
        path = fs._strip_protocol(key)
        position, taken = start, 0
        while taken < records and position < end:
            chunk = fs.cat_file(path, start=position, end=min(end, position + BLOCK))
            offset = 0
            while taken < records:
                cut = chunk.find(b"\n", offset)
                if cut < 0:
                    break
                offset = cut + 1
                taken += 1
            if taken < records and offset == 0:  # a line longer than a block: find its end
                after = _line_end(fs, path, position + len(chunk), end)
                if after is None:
                    break
                position, taken = after, taken + 1
                continue
            position += offset
        return position, taken

    def read_range(self, part: FrontRange) -> Iterator[pa.RecordBatch]:
        """The lines in [start, end), decoded; bad ones fail or go to dead letters.

        A line is bad if it is undecodable or longer than ``maxRecordBytes``.
        """
        fs, _ = fsspec.core.url_to_fs(part.key)
        path = fs._strip_protocol(part.key)
        utf8 = codecs.lookup(self.encoding).name == "utf-8"
        limit = self.max_record_bytes
        position = part.start
        while position < part.end:
            chunk = fs.cat_file(path, start=position, end=min(part.end, position + BLOCK))
            last = chunk.rfind(b"\n")
            if last < 0:  # the line at position is longer than a block: read it whole
                after = _line_end(fs, path, position + len(chunk), part.end)
                if after is None:
                    msg = f"no newline in [{position}, {part.end}) although planning found one"
                    raise RecordError(self.step, (part.key, position), msg)
                if limit is not None and after - 1 - position > limit:
                    self._refuse_long(part, fs, path, position, after)  # raises, or dead letter
                    position = after
                    continue
                chunk = fs.cat_file(path, start=position, end=after)
                last = len(chunk) - 1
            batch = _utf8_lines(chunk[:last], position, limit) if utf8 else None
            if batch is not None:
                yield batch
                position += last + 1
                continue
            positions, values, bad = [], [], []
            offset = 0
            for line in chunk[: last + 1].split(b"\n")[:-1]:
                if limit is not None and len(line) > limit:
                    if self.on_bad_record == "fail":
                        raise self._too_long(part, position + offset, len(line))
                    bad.append((position + offset, line))
                    offset += len(line) + 1
                    continue
                try:
                    values.append(line.decode(self.encoding).rstrip("\r"))
                    positions.append(position + offset)
                except UnicodeDecodeError as exc:
                    if self.on_bad_record == "fail":
                        raise RecordError(
                            self.step, (part.key, position + offset), str(exc)
                        ) from exc
                    bad.append((position + offset, line))
                offset += len(line) + 1
            if bad:
                self._dead_letter(part, bad)
            yield pa.RecordBatch.from_pydict(
                {"position": pa.array(positions, pa.int64()), "value": values}
            )
            position += last + 1

    def _too_long(self, part: FrontRange, position: int, length: int) -> RecordError:
        """The error for a line longer than ``maxRecordBytes``, naming its file and offset."""
        return RecordError(
            self.step,
            (part.key, position),
            f"the line is {length} bytes long, more than maxRecordBytes = {self.max_record_bytes}",
            problem="refused the record",
            hint="raise maxRecordBytes, or fix or remove the record",
        )

    def _refuse_long(self, part: FrontRange, fs: Any, path: str, start: int, after: int) -> None:
        """A line over ``maxRecordBytes`` and over a block: fail, or dead-letter it in pieces.

        Its dead letter has the usual format (``file<TAB>offset<TAB>hex bytes``), in a file of
        its own named by its offset, written a block at a time: the line is never held whole.
        """
        if self.on_bad_record == "fail":
            raise self._too_long(part, start, after - 1 - start)
        assert self.dead_letter is not None  # checked at query start  # noqa: S101
        out_fs, root = fsspec.core.url_to_fs(self.dead_letter)
        out_fs.makedirs(root, exist_ok=True)
        target = posixpath.join(root, f"front-{part.front}-{start:016d}.txt")
        with out_fs.open(target, "w") as out:
            out.write(f"{part.key}\t{start}\t")
            for begin in range(start, after - 1, BLOCK):
                out.write(fs.cat_file(path, start=begin, end=min(after - 1, begin + BLOCK)).hex())
            out.write("\n")

    def _dead_letter(self, part: FrontRange, bad: list[tuple[int, bytes]]) -> None:
        """Write undecodable lines where the user asked, named by their position.

        A replay overwrites the same file instead of adding another.
        """
        assert self.dead_letter is not None  # checked at query start  # noqa: S101
        fs, root = fsspec.core.url_to_fs(self.dead_letter)
        fs.makedirs(root, exist_ok=True)
        target = posixpath.join(root, f"front-{part.front}-{bad[0][0]:016d}.txt")
        lines = [f"{part.key}\t{pos}\t{raw.hex()}" for pos, raw in bad]
        with fs.open(target, "w") as out:
            out.write("\n".join(lines) + "\n")


def _utf8_lines(text: bytes, position: int, limit: int | None = None) -> pa.RecordBatch | None:
    """The lines of ``text`` (which starts at ``position``, last newline cut off) at once.

    Split with Arrow kernels instead of line by line, same result: each line without its
    newline and trailing carriage returns, at the byte offset where it starts. None when ``text``
    is not valid UTF-8, or has a line of more than ``limit`` bytes: then the line-by-line path
    finds the bad lines and deals with them.
    """
    try:
        text.decode("utf-8")  # Python's own check, so exactly the lines it would reject
    except UnicodeDecodeError:
        return None
    whole = pa.array([text], pa.binary()).view(pa.string())
    lines = pc.list_flatten(pc.split_pattern(whole, "\n"))
    lengths = pc.cast(pc.binary_length(lines), pa.int64())
    if limit is not None and pc.max(lengths).as_py() > limit:
        return None
    steps = pc.add(lengths, 1)
    positions = pc.subtract(pc.cumulative_sum(steps, start=position), steps)
    if b"\r" in text:
        lines = pc.utf8_rtrim(lines, characters="\r")
    return pa.RecordBatch.from_arrays([positions, lines], names=["position", "value"])


def _line_end(fs: Any, path: str, start: int, end: int) -> int | None:
    """Just past the first newline of ``path`` in [start, end), or None if there is none."""
    position = start
    while position < end:
        chunk = fs.cat_file(path, start=position, end=min(end, position + BLOCK))
        if not chunk:
            return None  # the file is shorter than planned
        cut: int = chunk.find(b"\n")
        if cut >= 0:
            return position + cut + 1
        position += len(chunk)
    return None
