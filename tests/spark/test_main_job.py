"""The README's first command runs the main job: it must run to its verification, and pass it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from flamestream.launcher import worker_python

ROOT = Path(__file__).resolve().parents[2]


def test_the_main_job_releases_every_line_once_in_order(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, "-m", "flamestream.examples.stream_files", "--work", str(tmp_path)],
        cwd=ROOT,
        env=dict(os.environ, PYSPARK_PYTHON=worker_python()),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert "verification: OK, every line released exactly once: True" in done.stdout
    assert "backlog" in done.stdout  # the per-batch progress lines read the end offsets
