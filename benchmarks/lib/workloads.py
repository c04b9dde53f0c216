"""Shared inputs and graphs: the generated corpus, the word count, the 6-step chain, the sink."""

from __future__ import annotations

import json
import shutil
import zlib
from collections import Counter
from dataclasses import dataclass
from operator import add
from pathlib import Path
from typing import Any

#: Every generated line is this long, newline included.
LINE_BYTES = 60

#: Words the lines are made of.
VOCABULARY = (
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
    "november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu"
)
WORDS = VOCABULARY.split()


def line(index: int) -> str:
    """Line ``index`` of the corpus: a pure function of ``index``, ``LINE_BYTES - 1`` chars."""
    words = " ".join(WORDS[(index * 7 + k * k * 5 + k) % len(WORDS)] for k in range(8))
    text = f"{index:010d} {words}"
    return text[: LINE_BYTES - 1].ljust(LINE_BYTES - 1, ".")


def word_counts(lines: int) -> Counter[str]:
    """Every word of the first ``lines`` lines and its occurrences."""
    return Counter(word for i in range(lines) for word in line(i).split())


@dataclass(frozen=True)
class Corpus:
    """``files`` files of consecutive lines under ``folder``, read in ``batches`` batches."""

    folder: Path
    lines: int
    files: int
    batches: int = 1
    bytes: int = 0

    @classmethod
    def write(cls, folder: Path, lines: int, files: int, batches: int = 1) -> Corpus:
        """Generate the files (``folder`` is emptied first)."""
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        total = 0
        for f in range(files):
            first, stop = lines * f // files, lines * (f + 1) // files
            data = "".join(line(i) + "\n" for i in range(first, stop)).encode()
            (folder / f"part-{f:03d}.txt").write_bytes(data)
            total += len(data)
        return cls(folder, lines, files, batches, total)

    def front(self, spark: Any) -> Any:
        """The flamestream files front over the corpus (``maxRecordsPerTrigger`` per batch)."""
        return self.reader(spark).load()

    def reader(self, spark: Any) -> Any:
        """:meth:`front`'s reader, not loaded (for ``SparkGraph.write_stream``)."""
        reader = spark.readStream.format("flamestream").option("front", "files")
        if self.batches > 1:
            reader = reader.option("maxRecordsPerTrigger", -(-self.lines // self.batches))
        return reader.option("path", str(self.folder))

    def text(self, spark: Any) -> Any:
        """Spark's file source over the corpus (``maxFilesPerTrigger`` per batch)."""
        reader = spark.readStream
        if self.batches > 1:
            reader = reader.option("maxFilesPerTrigger", self.files // self.batches)
        return reader.text(str(self.folder))

    def report(self, **extra: Any) -> dict[str, Any]:
        """The ``input`` section of a report."""
        return {
            "lines": self.lines,
            "bytes": self.bytes,
            "files": self.files,
            "line_bytes": LINE_BYTES,
            "batches": self.batches,
            **extra,
        }


def files_sink(
    rows: Any, out: Path, ck: Path, fmt: str | None = "json", release: str | None = "tasks"
) -> Any:
    """``rows`` to the flamestream files sink (options left out when None)."""
    writer = rows.writeStream.format("flamestream").option("checkpointLocation", str(ck))
    return files_options(writer, out, fmt, release)


def files_options(
    writer: Any, out: Path, fmt: str | None = "json", release: str | None = "tasks"
) -> Any:
    """A ``format("flamestream")`` writer (e.g. ``write_stream``'s) into the files sink."""
    writer = writer.option("sink", "files")
    for name, value in (("format", fmt), ("release", release)):
        if value is not None:
            writer = writer.option(name, value)
    return writer.option("path", str(out))


def word_count_graph(*, commutative: bool = False, declared: bool = False) -> Any:
    """flat_map split -> map_reduce (word, 1) with + -> map ``"word=count"`` -> sink.

    ``declared``: the count as ``flamestream.count`` (commutative) and the render as
    ``Template("{key}={value}")``, which the Spark runtime may run in Arrow; else written out
    with a lambda mapper and a lambda render.
    """
    from flamestream import Dataflow, Template, count, map_reduce

    flow = Dataflow("wordcount")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    if declared:
        counts = count(flow, "count", words)
    else:
        counts = map_reduce(
            flow, "count", words, mapper=lambda w: (w, 1), reducer=add, commutative=commutative
        )
    render = Template("{key}={value}") if declared else (lambda r: f"{r.key}={r.value}")
    flow.sink("out", flow.map("render", counts, render))
    return flow


def readme_word_count_graph() -> Any:
    """The README's first graph: split -> map_reduce with a lambda mapper and reducer -> sink.

    Not commutative, no render: the sink gets the ``Reduced`` items, rendered by ``repr``
    (``Reduced(key='w', value=3)``), as the README's graph is written.
    """
    from flamestream import Dataflow, map_reduce

    flow = Dataflow("wordcount")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    counts = map_reduce(flow, "count", words, mapper=lambda w: (w, 1), reducer=lambda a, b: a + b)
    flow.sink("counts", counts)
    return flow


def gaps_graph() -> Any:
    """Per key, the time since its previous event: parse -> grouping(window=2) -> gap.

    Events are JSON lines ``{"key": .., "time": ..}``; every step is a user's lambda (the
    general path): ``json.loads``, the key, a filter dropping each key's first window (one
    event, no gap) and a map rendering ``"key,time,gap"`` (the later event's time, the gap
    to the one before it in the key's global-time order).
    """
    from flamestream import Dataflow

    flow = Dataflow("gaps")
    events = flow.map("parse", flow.source("events"), lambda text: json.loads(text))
    pairs = flow.grouping("pairs", events, window=2, key=lambda event: event["key"])
    two = flow.filter("after-first", pairs, lambda pair: len(pair) == 2)
    gaps = flow.map(
        "gap",
        two,
        lambda pair: f"{pair[1]['key']},{pair[1]['time']},{pair[1]['time'] - pair[0]['time']}",
    )
    flow.sink("out", gaps)
    return flow


def word_count_expected(lines: int) -> tuple[int, int]:
    """Rows and crc32 sum of the word count's values: ``word=1`` .. ``word=<count>``."""
    counts = word_counts(lines)
    values = sum(
        zlib.crc32(f"{word}={n}".encode())
        for word, count in counts.items()
        for n in range(1, count + 1)
    )
    return sum(counts.values()), values


def _not_a_number(word: str) -> bool:
    return not word.isdigit()


def _odd_length(tagged: tuple[int, str]) -> bool:
    return tagged[0] % 2 == 1


def _tag(word: str) -> tuple[int, str]:
    return len(word), word


def _render(tagged: tuple[int, str]) -> str:
    return f"{tagged[1]}:{tagged[0]}"


def chain_graph() -> Any:
    """Six stateless steps: split, drop line numbers, upper, tag (len, w), odd only, render."""
    from flamestream import Dataflow

    flow = Dataflow("chain")
    words = flow.flat_map("split", flow.source("lines"), str.split)
    kept = flow.filter("words-only", words, _not_a_number)
    tagged = flow.map("tag", flow.map("upper", kept, str.upper), _tag)
    odd = flow.filter("odd", tagged, _odd_length)
    flow.sink("out", flow.map("render", odd, _render))
    return flow


def chain_expected(lines: int) -> tuple[int, int]:
    """Rows and crc32 sum of the values the chain graph emits for the corpus (pure Python)."""
    rows = checksum = 0
    for i in range(lines):
        for word in filter(_not_a_number, line(i).split()):
            tagged = _tag(word.upper())
            if _odd_length(tagged):
                rows += 1
                checksum += zlib.crc32(_render(tagged).encode())
    return rows, checksum


#: The graphs by name (built fresh for every query), and what they release for the corpus.
GRAPHS = {"wordcount": word_count_graph, "chain": chain_graph}
EXPECTED = {"wordcount": word_count_expected, "chain": chain_expected}
