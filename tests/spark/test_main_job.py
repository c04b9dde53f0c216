"""The README's first command runs the main job: a word count with late lines on three fronts.

The job must run to its verification and pass it, and what it claims must hold: lines did
arrive late (the grouping replayed and invalidated, the barrier dropped invalidated
versions), every line read was counted once in the progress, and the released rows are the
reference runtime's, checked here again from the output files.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from flamestream.examples import stream_files
from flamestream.examples.wordcount import load_sample

from .conftest import run_example

BATCH = re.compile(
    r"batch +(\d+): read +(\d+) lines \( *(\d+) rows to Spark\) \| grouping replayed +(\d+), "
    r"invalidated +(\d+) \| barrier dropped +(\d+), released +(\d+), holds +(\d+)"
)


def test_the_main_job_replays_late_lines_and_releases_the_reference_output(tmp_path: Path):
    done = run_example("flamestream.examples.stream_files", tmp_path)
    batches = [tuple(map(int, found)) for found in BATCH.findall(done.stdout)]
    fronts = stream_files.make_fronts(load_sample().splitlines(), copies=3)
    lines = sum(len(front.records) for front in fronts)
    assert sum(b[1] for b in batches) == lines  # the progress counted every line once
    assert any(b[2] < b[1] for b in batches)  # while Spark's numInputRows counts blocks
    assert sum(b[3] for b in batches) > 0 and sum(b[4] for b in batches) > 0  # late lines
    assert sum(b[5] for b in batches) > 0  # invalidated versions dropped before release
    assert sum(b[3] > 0 for b in batches) >= 2  # late in more than one batch
    assert batches[-1][7] == 0  # nothing held at the end

    released = stream_files.released_rows(tmp_path / "out")
    assert sum(b[6] for b in batches) == len(released)
    want = stream_files.expected_rows(fronts)
    got = [stream_files.as_released(row) for row in released]
    assert Counter(got) == Counter(want)  # every column, traces and flags included
    assert [r[:3] for r in got] == sorted(r[:3] for r in got)  # released in meta order
