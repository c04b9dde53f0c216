"""Bytewax word count: DirSource -> flat_map split -> count_final -> list, one worker.

Run by the Bytewax virtualenv's Python: ``python bytewax_wordcount.py INPUT_DIR RESULT``.
"""

from __future__ import annotations

import json
import sys
import time
from importlib.metadata import version
from pathlib import Path


def main(source: Path, result: Path) -> None:
    """Count the words of ``source/*.txt`` with ``run_main`` (one worker); write the result."""
    import bytewax.operators as op
    from bytewax.connectors.files import DirSource
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, run_main

    counted: list[tuple[str, int]] = []
    flow = Dataflow("wordcount")
    lines = op.input("lines", flow, DirSource(source, glob_pat="*.txt"))
    words = op.flat_map("split", lines, str.split)
    counts = op.count_final("count", words, key=str)
    op.output("out", counts, TestingSink(counted))
    began = time.perf_counter()
    run_main(flow)
    seconds = time.perf_counter() - began
    report = {
        "seconds": seconds,
        "counts": dict(counted),
        "version": version("bytewax"),
        "workers": 1,
        "rows": len(counted),
    }
    result.write_text(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
