"""Run a query module in a child process that a crash point may SIGKILL (shared by crash tests)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from flamestream.spark.faults import ENV

ROOT = Path(__file__).resolve().parents[1]


def run_child(module: str, args: list[str], crash_at: str | None = None) -> int:
    """Run ``python -m module *args``; return 0, or -SIGKILL if a crash point killed it.

    The child gets its own process group (a crash kills that group, never the test runner),
    ``FLAMESTREAM_CRASH_AT`` only if ``crash_at`` is given, and a driver JVM tuned to start
    fast. Any other exit fails the calling test with the child's stderr.
    """
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env["PYSPARK_PYTHON"] = sys.executable
    # short-lived driver JVMs: C1 only and the serial collector start about 20% faster
    env["PYSPARK_SUBMIT_ARGS"] = (
        "--driver-java-options '-XX:TieredStopAtLevel=1 -XX:+UseSerialGC' pyspark-shell"
    )
    if crash_at:
        env[ENV] = crash_at
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        capture_output=True,
        timeout=300,
        check=False,
    )
    if done.returncode not in (0, -signal.SIGKILL):
        raise AssertionError(done.stderr.decode()[-3000:])
    return done.returncode
