"""The ``files`` front: newline-delimited records appended over time to files in a directory.

Each file matching ``pattern`` under ``path`` (any fsspec URL: local, ``memory://``, object
stores) is a front. Only complete lines (ending in a newline) are admitted; a partial last
line waits for its newline. A record's determinant is ``(file, byte offset of the line)``:
``source`` is the file's path relative to ``path`` (errors and dead letters name the full
URL) and ``position`` the byte offset.

Options: ``path`` (required), ``pattern`` (``*``), ``encoding`` (``utf-8``), ``onBadRecord``
(``fail`` or ``deadLetter``), ``deadLetterPath`` (required with ``deadLetter``), plus the
common front options.
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
from flamestream.spark.config import OptionReader
from flamestream.spark.front import FrontRange, FrontSource

#: Bytes read per request when scanning files.
BLOCK = 1 << 20


class FilesSource(FrontSource):
    """Appended-to text files."""

    kind = "files"
    step = "front files"

    def __init__(self, options: OptionReader) -> None:
        self.path = options.string("path", required=True).rstrip("/")
        self.pattern = options.string("pattern", "*")
        self.encoding = options.string("encoding", "utf-8")
        try:
            codecs.lookup(self.encoding)
        except LookupError:
            raise ConfigError(options.step, "encoding", self.encoding, "a Python codec") from None
        self.on_bad_record = options.choice("onBadRecord", ["fail", "deadLetter"], "fail")
        self.dead_letter = options.optional_string("deadLetterPath")
        if self.on_bad_record == "deadLetter" and not self.dead_letter:
            raise ConfigError(
                options.step, "deadLetterPath", None, "a directory URL when onBadRecord=deadLetter"
            )
        fs, root = self._fs()
        if not fs.isdir(root):
            raise ConfigError(options.step, "path", self.path, "an existing directory URL")
        self._prefix = fs.unstrip_protocol(root).rstrip("/") + "/"
        self._fs_cache: Any = None

    def _fs(self) -> tuple[Any, str]:
        fs, root = fsspec.core.url_to_fs(self.path)
        return fs, root

    def payload_fields(self) -> list[pa.Field]:
        """The line, without its newline."""
        return [pa.field("value", pa.string())]

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
            if taken < records and offset == 0:
                break  # a line longer than a block: read the next block from the same start
            position += offset
        return position, taken

    def read_range(self, part: FrontRange) -> Iterator[pa.RecordBatch]:
        """The lines in [start, end), decoded; undecodable ones fail or go to dead letters."""
        fs, _ = fsspec.core.url_to_fs(part.key)
        path = fs._strip_protocol(part.key)
        utf8 = codecs.lookup(self.encoding).name == "utf-8"
        position = part.start
        while position < part.end:
            chunk = fs.cat_file(path, start=position, end=min(part.end, position + BLOCK))
            last = chunk.rfind(b"\n")
            if last < 0:
                msg = f"no newline in [{position}, {part.end}) although planning found one"
                raise RecordError(self.step, (part.key, position), msg)
            batch = _utf8_lines(chunk[:last], position) if utf8 else None
            if batch is not None:
                yield batch
                position += last + 1
                continue
            positions, values, bad = [], [], []
            offset = 0
            for line in chunk[: last + 1].split(b"\n")[:-1]:
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


def _utf8_lines(text: bytes, position: int) -> pa.RecordBatch | None:
    """The lines of ``text`` (which starts at ``position``, last newline cut off) at once.

    Split with Arrow kernels instead of line by line, same result: each line without its
    newline and trailing carriage returns, at the byte offset where it starts. None when ``text``
    is not valid UTF-8: then the line-by-line path finds the bad lines and deals with them.
    """
    try:
        text.decode("utf-8")  # Python's own check, so exactly the lines it would reject
    except UnicodeDecodeError:
        return None
    whole = pa.array([text], pa.binary()).view(pa.string())
    lines = pc.list_flatten(pc.split_pattern(whole, "\n"))
    steps = pc.add(pc.cast(pc.binary_length(lines), pa.int64()), 1)
    positions = pc.subtract(pc.cumulative_sum(steps, start=position), steps)
    if b"\r" in text:
        lines = pc.utf8_rtrim(lines, characters="\r")
    return pa.RecordBatch.from_arrays([positions, lines], names=["position", "value"])
