"""The history-then-live example: an archive backfilled, then the live files, one query.

It must pass its own verification (the released rows are the reference runtime's over the
archive below the cut and the live files from the cut on), show a backfill that switched, and
admit every line of the text exactly once although archive and live files overlap the cut.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from flamestream.examples import backfill, stream_files
from flamestream.examples.wordcount import load_sample

from .conftest import run_example


def test_the_backfill_example_switches_once_and_releases_the_reference_output(tmp_path: Path):
    done = run_example("flamestream.examples.backfill", tmp_path)
    bars = re.findall(r"(backfill|live) \[[# ]+\] +([\d.]+)%", done.stdout)
    assert bars[0][0] == "backfill" and bars[-1] == ("live", "100.0")
    assert re.search(r"switched in batch \d+", done.stdout)

    records = backfill.timed_lines(load_sample().splitlines(), copies=3)
    cut, archive, live = backfill.split(records)
    assert any(t >= cut for f in archive for t, _ in f.records)  # overlaps past the cut
    assert any(t < cut for f in live for t, _ in f.records)  # and before it
    released = stream_files.released_rows(tmp_path / "out")
    got = [stream_files.as_released(row) for row in released]
    assert Counter(got) == Counter(backfill.expected_rows(cut, archive, live))
    # every line of the text counted once: each word's last count is its occurrences
    words = Counter(w for _, line in records for w in stream_files.words_of(line))
    highest: dict[str, int] = {}
    for row in got:
        word, count = row[4].rsplit("=", 1)
        highest[word] = max(highest.get(word, 0), int(count))
    assert highest == dict(words)
