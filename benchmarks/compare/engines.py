"""The peer engines, each run as a subprocess of its own virtualenv's Python.

A peer's script (``peers/<name>_wordcount.py``) counts the corpus and writes its counts and
its own timing of the flow to a JSON file, which :func:`run` reads back and checks.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.compare import venvs
from benchmarks.compare.corpus import mismatch
from benchmarks.compare.errors import MismatchError, PeerError

SCRIPTS = Path(__file__).with_name("peers")


@dataclass(frozen=True)
class Peer:
    """A peer engine: its PyPI package and version, its script, its environment."""

    name: str
    package: str
    version: str  #: the version asked for (installed exactly, or the virtualenv fails)
    env: tuple[tuple[str, str], ...] = ()  #: extra environment of the script

    @property
    def script(self) -> Path:
        """The peer's word count script."""
        return SCRIPTS / f"{self.name}_wordcount.py"


#: The peers by variant name, at their default versions (``--bytewax`` / ``--pathway``).
PEERS = {
    "bytewax": Peer("bytewax", "bytewax", "0.21.1"),
    "pathway": Peer("pathway", "pathway", "0.33.0", (("PATHWAY_THREADS", "1"),)),
}


def _environment(peer: Peer) -> dict[str, str]:
    """The environment of this process without Spark's and Python's variables, plus the peer's."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK", "PYTHON"))}
    kept.pop("VIRTUAL_ENV", None)
    return kept | dict(peer.env)


def run(
    peer: Peer, python: Path, source: Path, result: Path, expected: Counter[str], timeout: float
) -> tuple[float, dict[str, Any]]:
    """Run the peer's script once: its flow's seconds, and what else it reported.

    Raises PeerError if it fails or times out, MismatchError if its counts are wrong.
    """
    result.unlink(missing_ok=True)
    command = [str(python), str(peer.script), str(source), str(result)]
    began = time.perf_counter()
    try:
        done = subprocess.run(  # noqa: S603
            command, env=_environment(peer), capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as e:
        msg = f"{peer.name}: {peer.script.name} did not finish within {timeout} s"
        raise PeerError(msg) from e
    process_seconds = time.perf_counter() - began
    if done.returncode or not result.exists():
        tail = "\n".join(done.stderr.strip().splitlines()[-8:])
        msg = f"{peer.name}: {peer.script.name} exited with {done.returncode}: {tail}"
        raise PeerError(msg)
    report = json.loads(result.read_text())
    result.unlink()
    problem = mismatch(expected, report.pop("counts"))
    if problem is not None:
        msg = f"{peer.name}: final counts: {problem}"
        raise MismatchError(msg)
    seconds = float(report.pop("seconds"))
    return seconds, report | {"process_seconds": round(process_seconds, 3)}


def ensure(peer: Peer, root: Path) -> Path:
    """The peer's virtualenv Python (created and installed on first use)."""
    return venvs.ensure(root, peer.package, peer.version)
