"""What every report records about the machine, its load and the library, and its printing."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

from benchmarks.lib.cli import Workdir


def load_average() -> float:
    """The 1-minute load average, rounded (the machine is shared: other work shows here)."""
    return round(os.getloadavg()[0], 2)


def load_averages() -> list[float]:
    """The 1, 5 and 15 minute load averages, to one decimal."""
    return [round(x, 1) for x in os.getloadavg()]


class Record:
    """What a run records about its machine: taken at the start, completed at the end."""

    def __init__(self, *, library: bool = False) -> None:
        self.began = time.perf_counter()
        self.load_before = load_average()
        #: before the run: what the run used, as far as git tells
        self.library = git_state() if library else None

    def machine(self, spark: str | None = None, **extra: Any) -> dict[str, Any]:
        """The machine, the load average before and now, ``extra`` and the library."""
        return machine(spark, load_before=self.load_before, **extra) | (
            {"library": self.library} if self.library is not None else {}
        )

    def seconds(self) -> float:
        """Seconds since the start."""
        return round(time.perf_counter() - self.began, 1)


def machine(
    spark: str | None = None, *, load_before: float | None = None, **extra: Any
) -> dict[str, Any]:
    """Python, CPUs, platform, Spark (``local[2]``), ``extra``, the load before and now."""
    found: dict[str, Any] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
    }
    if spark is not None:
        found |= {"spark": spark, "master": "local[2]"}
    found |= extra
    if load_before is not None:
        found["load_average_1m_before_after"] = [load_before, load_average()]
    return found


def git_state() -> dict[str, Any]:
    """The commit the library is at and which of its files differ (for provenance)."""
    git_in_root = ["git", "-C", str(Path(__file__).resolve().parents[2])]

    def git(*argv: str) -> str:
        try:
            done = subprocess.run(  # noqa: S603
                [*git_in_root, *argv], capture_output=True, text=True, check=True
            )
        except (OSError, subprocess.CalledProcessError):
            return ""
        return done.stdout.rstrip("\n")

    changed = git("status", "--porcelain", "--", "python").splitlines()
    return {
        "commit": git("rev-parse", "--short", "HEAD").strip(),
        "modified": [c[3:] for c in changed],
    }


def emit(report: dict[str, Any], work: Workdir | None = None) -> int:
    """Print ``report``; 1 if it is an error (``work`` is kept to look into), else 0."""
    print(json.dumps(report, indent=2))
    if "error" in report:
        return 1
    if work is not None:
        work.close()
    return 0
