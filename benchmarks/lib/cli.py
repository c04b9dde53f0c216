"""An experiment's flags and working directory."""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path
from typing import Any


def flag(
    parser: argparse.ArgumentParser, name: str, default: Any, text: str = "", **kw: Any
) -> None:
    """``name`` (``--...``) with its help ``text``, typed as its default (or its items)."""
    if default is not None:
        kw.setdefault("type", type(default[0] if isinstance(default, list) else default))
    parser.add_argument(name, default=default, help=text or None, **kw)


def parser(doc: str | None, *, timeout: float, repeat: int | None = 2) -> argparse.ArgumentParser:
    """The parser with the shared flags: ``--timeout``, ``--work``; ``--repeat``, ``--warmup``."""
    made = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    if repeat is not None:
        flag(made, "--repeat", repeat, "timed runs of each case")
        flag(made, "--warmup", 1, "untimed runs of each case first")
    flag(made, "--timeout", timeout, "seconds per query")
    # absolute: executors of a standalone cluster run in their Workers' folders, where a
    # relative checkpoint path names another place
    made.add_argument("--work", type=_absolute, help="working directory (default: a temp dir)")
    return made


def _absolute(path: str) -> Path:
    return Path(path).resolve()


def step_parser(
    doc: str | None, rate: str, variants: list[str], probe_rows: list[int]
) -> argparse.ArgumentParser:
    """The flags of the step benchmarks: the input's timing, the budget, variants, probes."""
    made = parser(doc, timeout=300.0, repeat=None)
    flag(made, "--rate", None, f"{rate} (default: probed)", type=float)
    flag(made, "--before", 15.0, "seconds before the step")
    flag(made, "--after", 25.0, "seconds of input after it")
    flag(made, "--drain", 15.0, "seconds after the input ends until a stop")
    flag(made, "--settle", 5.0, "records available in the first seconds are not measured")
    flag(made, "--target-ms", 4000.0, "latency budget")
    flag(made, "--variants", variants, nargs="+", choices=variants)
    flag(made, "--probe-rows", probe_rows, "probe batch sizes", nargs=2)
    flag(made, "--probe-batches", 3, "timed batches per probe")
    return made


def corpus_flags(made: argparse.ArgumentParser, lines: int, files: int = 4) -> None:
    """``--lines``, ``--files`` and ``--batches`` of a generated corpus."""
    flag(made, "--lines", lines, "corpus lines")
    flag(made, "--files", files, "corpus files")
    flag(
        made,
        "--batches",
        1,
        "split the input into B batches (maxRecordsPerTrigger = lines / B,"
        " maxFilesPerTrigger = files / B)",
    )


def parse(made: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """The flags; stop unless ``--batches`` divides ``--files`` (whole files per batch)."""
    args = made.parse_args(argv)
    if "batches" in args and (args.batches < 1 or args.files % args.batches):
        made.error(f"--batches must divide --files ({args.files}); got {args.batches}")
    return args


class Workdir:
    """The run's directory (``--work`` or a temp dir), and fresh output and checkpoint folders."""

    def __init__(self, given: Path | None, prefix: str) -> None:
        self.path = given or Path(tempfile.mkdtemp(prefix=prefix))
        self.path.mkdir(parents=True, exist_ok=True)
        self.temporary = given is None
        self.count = 0

    def fresh(self, kind: str = "") -> tuple[Path, Path]:
        """New output and checkpoint directories (a reused ``--work`` may hold old ones)."""
        self.count += 1
        stem = f"{kind}-" if kind else ""
        paths = self.path / f"{stem}out-{self.count}", self.path / f"{stem}ck-{self.count}"
        self.drop(*paths)
        return paths

    @staticmethod
    def drop(*paths: Path) -> None:
        """Remove ``paths``, whatever they hold."""
        for path in paths:
            shutil.rmtree(path, ignore_errors=True)

    def close(self) -> None:
        """Remove the directory if it is a temp dir."""
        if self.temporary:
            self.drop(self.path)
