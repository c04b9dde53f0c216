"""Pathway word count: plaintext.read (static) -> split -> flatten -> groupby count.

Run by the Pathway virtualenv's Python: ``python pathway_wordcount.py INPUT_DIR RESULT``.
``mode="static"`` reads the files once and ends; ``PATHWAY_THREADS`` (set by the harness)
gives the engine's threads. The output is collected with ``pw.io.subscribe``: each change
(word, count, is_addition) nets per (word, count) and the count left standing is the result.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from importlib.metadata import version
from pathlib import Path
from typing import Any


def split(line: str) -> list[str]:
    """The line's whitespace-separated words."""
    return line.split()


def main(source: Path, result: Path) -> None:
    """Count the words of ``source/*.txt`` with ``pw.run``; write the result."""
    import pathway as pw

    changes: Counter[tuple[str, int]] = Counter()
    events: Counter[str] = Counter()

    def on_change(key: object, row: dict[str, Any], time: int, is_addition: bool) -> None:
        changes[row["word"], row["count"]] += 1 if is_addition else -1
        events["additions" if is_addition else "retractions"] += 1

    lines = pw.io.plaintext.read(str(source / "*.txt"), mode="static")
    words = lines.select(word=pw.apply_with_type(split, list[str], pw.this.data))
    counts = (
        words.flatten(pw.this.word)
        .groupby(pw.this.word)
        .reduce(pw.this.word, count=pw.reducers.count())
    )
    pw.io.subscribe(counts, on_change=on_change)
    began = time.perf_counter()
    pw.run(monitoring_level=pw.MonitoringLevel.NONE)
    seconds = time.perf_counter() - began
    standing = {word: n for (word, n), net in changes.items() if net > 0}
    report = {
        "seconds": seconds,
        "counts": standing,
        "version": version("pathway"),
        "workers": int(os.environ.get("PATHWAY_THREADS", "1")),
        "rows": len(standing),
        "changes": dict(events),
    }
    result.write_text(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
