"""Spark passthrough benchmark: flamestream files front -> files sink vs Spark's file source/sink.

Interleaved ``Trigger.AvailableNow`` runs on one generated corpus: ``flamestream`` (the sink's
default ``release=commit``), ``flamestream_tasks`` (``release=tasks``), ``flamestream_values``
(``release=tasks``, ``columns=value``: only the value, as the built-in sink writes),
``flamestream_graph`` / ``flamestream_graph_values`` (the empty graph's ``write_stream``:
the fronts send the sink their rows in blocks; every column / ``columns=value``) and
``builtin``; all outputs must hold the same rows. See docs/benchmarks.md. Prints one JSON object::

    python -m benchmarks.spark_passthrough [--lines N] [--files F] [--repeat R]
        [--format json|parquet] [--batches B] [--warmup W] [--work DIR]
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.lib import cli
from benchmarks.lib.record import machine
from benchmarks.lib.timing import TIMING_NOTE, Rounds, Run, run_cases, timings
from benchmarks.lib.workloads import Corpus, files_options, files_sink

#: The flamestream output's columns (the built-in one has only ``value``).
FLAMESTREAM_SCHEMA = "ts long, front int, source string, position long, value string"


def arguments(argv: list[str] | None) -> argparse.Namespace:
    """The corpus and the output format."""
    parser = cli.parser(__doc__, timeout=1800.0)
    cli.corpus_flags(parser, 1_000_000)
    cli.flag(parser, "--format", "json", choices=["json", "parquet"])
    return cli.parse(parser, argv)


class Passthrough:
    """The cases' queries on one corpus, and what each run wrote."""

    def __init__(self, spark: Any, args: argparse.Namespace, work: cli.Workdir) -> None:
        self.spark, self.format = spark, args.format
        self.corpus = Corpus.write(work.path / "in", args.lines, args.files, args.batches)
        self.written: dict[str, set[tuple[int, int]]] = {}

    def cases(self) -> dict[str, Callable[[Path, Path], Any]]:
        """The cases, each a ``define(out, checkpoint)``."""
        return {
            "flamestream": partial(self.flamestream, "commit", "all"),
            "flamestream_tasks": partial(self.flamestream, "tasks", "all"),
            "flamestream_values": partial(self.flamestream, "tasks", "value"),
            "flamestream_graph": partial(self.graph, "all"),
            "flamestream_graph_values": partial(self.graph, "value"),
            "builtin": self.builtin,
        }

    def flamestream(self, release: str, columns: str, out: Path, ck: Path) -> Any:
        """Files front -> files sink, writing ``columns`` (docs/connectors.md)."""
        sink = files_sink(self.corpus.front(self.spark), out, ck, self.format, release)
        return sink.option("columns", columns).trigger(availableNow=True)

    def graph(self, columns: str, out: Path, ck: Path) -> Any:
        """The empty graph's ``write_stream`` (rows in blocks), ``release=tasks``, ``columns``."""
        from flamestream import Dataflow
        from flamestream.spark import SparkGraph

        flow = Dataflow("passthrough")
        flow.sink("out", flow.source("lines"))
        writer = SparkGraph(flow).write_stream(
            self.corpus.reader(self.spark), checkpoint_location=str(ck)
        )
        writer = files_options(writer, out, self.format, "tasks").option("columns", columns)
        return writer.trigger(availableNow=True)

    def builtin(self, out: Path, ck: Path) -> Any:
        """Spark's text source -> Spark's file sink."""
        writer = self.corpus.text(self.spark).writeStream.format(self.format)
        writer = writer.option("path", str(out)).option("checkpointLocation", str(ck))
        return writer.trigger(availableNow=True)

    def check(self, case: str, out: Path, _run: Run) -> None:
        """Rows in ``out`` and a checksum of their values, read back with spark.read."""
        from pyspark.sql import functions as F

        reader = self.spark.read.format(self.format)
        if self.format == "json":
            only_value = case in ("builtin", "flamestream_values", "flamestream_graph_values")
            reader = reader.schema("value string" if only_value else FLAMESTREAM_SCHEMA)
        value = F.crc32(F.col("value").cast("binary"))
        row = reader.load(str(out)).agg(F.count(F.lit(1)), F.sum(value)).first()
        self.written.setdefault(case, set()).add((int(row[0]), int(row[1] or 0)))

    def analyse(self, rounds: Rounds[str], spark_version: str) -> dict[str, Any]:
        """Timings and ratios against ``builtin``; an error if the cases wrote different rows."""
        agreed = {check for results in self.written.values() for check in results}
        if len(agreed) != 1 or next(iter(agreed))[0] != self.corpus.lines:
            return {
                "error": "the cases wrote different rows (count, crc32 sum of the values)",
                "expected_rows": self.corpus.lines,
                "written": {case: sorted(found) for case, found in self.written.items()},
            }
        timed = timings(self.corpus.lines, rounds.runs, rounds.warmups)
        ratios = {
            f"{case}_vs_builtin_{kind}": round(rates[case] / rates["builtin"], 3)
            for case in rounds.runs
            if case != "builtin"
            for kind, rates in (
                ("rows_per_second", timed.rate),
                ("steady_rows_per_second", timed.steady),
            )
        }
        return {
            "machine": machine(spark_version),
            "input": self.corpus.report(output_format=self.format),
            **timed.report,
            "ratios": ratios,
            "target": {"ratio": 0.6, "met_by": sorted(k for k, v in ratios.items() if v >= 0.6)},
            "best_ratio": max(ratios.values()),
            "notes": NOTES,
        }


def main(argv: list[str] | None = None) -> int:
    """Run the cases, check they wrote the same rows, print JSON."""
    return run_cases("passthrough", arguments(argv), Passthrough)


NOTES = [
    TIMING_NOTE,
    "phases_median_seconds: start_to_first_batch is start() to the first batch's trigger "
    "timestamp (for flamestream with a Python planner process); add_batch Spark's addBatch "
    "summed over batches (the tasks, for flamestream also the barrier commit and release); "
    "steady_rows_per_second = rows / trigger_execution.",
    "flamestream / flamestream_tasks: front 'files' -> sink 'files', release=commit (one "
    "sorted file per batch, from the driver) / tasks (each task its own sorted part), 5 "
    "columns; flamestream_values: release=tasks with columns=value (1 column, the value); "
    "flamestream_graph(_values): SparkGraph(source -> sink).write_stream, release=tasks, "
    "the rows in blocks from the fronts' reads to the sink's tasks (all columns / value); "
    "builtin: spark.readStream.text -> the built-in file sink, 1 column (value). "
    "See docs/benchmarks.md, 'Files passthrough'.",
    "check: every output read back with spark.read must hold the input's row count and the "
    "same crc32 sum of the values.",
]


if __name__ == "__main__":
    raise SystemExit(main())
