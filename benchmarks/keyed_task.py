"""Word count's keyed write task in one process: the Python a sink write task runs, phase by phase.

``python -m benchmarks.keyed_task [--lines N] [--files F] [--release every|latest]
[--columns all|value|value,time] [--partitions P] [--repeat R] [--pause S]``

What the Spark benchmarks cannot show: where a write task's Python time goes. Without Spark,
it makes what the shuffle would hand a key partition and runs on it what the sink's write
task runs, timing each phase:

1. the front's reads (not timed): each corpus file's lines as a files front's rows, through
   the graph's first stage as the fronts run it (``FrontStage.read``: split and count in
   Arrow, packed for ``every``, combined per word for ``latest``);
2. the shuffle (not timed): the block rows of key partition 0 of ``--partitions`` (the
   fronts send a keyed stage's rows in blocks, one per key partition, by Spark's hash of the
   key: ``exec.shuffle.blocks``), file after file as the map outputs come;
3. opening the blocks (and unpacking packed rows) and the sort by meta, as
   ``KeyedRunner._partition`` does them;
4. the keyed stage (``KeyedRunner._runs``), its render tail (``WithTails``) and the part the
   sink writes as the runs come (``sink.fill_parts`` into a Parquet part, with the columns
   the sink's ``columns`` option names), below a min-time that releases everything;
5. the garbage collection below the min-time and the state's snapshot.

Run it with ``.venv/bin/flamestream-python -m benchmarks.keyed_task``: started for a module,
the launcher gives it the jemalloc options Spark's workers get (docs/connectors.md).
``--pause`` sleeps between repetitions: on a virtual machine that hands freed pages back to
its host, a task's first touch of fresh memory is what a Spark worker meets between batches.
Prints JSON: per phase the median seconds and every run, the median CPU seconds (the
process's, the part's writing thread included: what the task costs a shared core), the
rows, the part's bytes, the peak resident set.
"""

from __future__ import annotations

import resource
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from benchmarks.compare.corpus import corpus
from benchmarks.lib import cli
from benchmarks.lib.record import emit, load_averages, machine
from benchmarks.lib.stats import median
from benchmarks.lib.workloads import word_count_graph

#: Where generated corpora are kept (shared with ``make bench-compare``).
CORPUS_DIR = Path(__file__).resolve().parent.parent / ".bench"
#: Lines per front read block (the files front reads blocks of bytes; about this many lines).
BLOCK_LINES = 16_384
PHASES = ("unpack_sort", "keyed_render_write", "snapshot")
#: The sink's ``columns`` choices (``flamestream.spark.connector.sink.COLUMNS``).
COLUMNS = ["all", "value", "value,time"]


def front_blocks(path: Path, front: int) -> Iterator[pa.RecordBatch]:
    """A file's lines as a files front's rows: ts by line, its front, source, byte offset."""
    from flamestream.spark.connector.front import META_FIELDS

    lines = path.read_text().splitlines()
    offsets = np.concatenate(([0], np.cumsum([len(line) + 1 for line in lines])[:-1]))
    schema = pa.schema([*META_FIELDS, pa.field("value", pa.string())])
    for start in range(0, len(lines), BLOCK_LINES):
        part = lines[start : start + BLOCK_LINES]
        n = len(part)
        yield pa.RecordBatch.from_arrays(
            [
                pa.array(np.arange(start, start + n) + 1, pa.int64()),
                pa.array(np.full(n, front), pa.int32()),
                pa.array([str(path)] * n, pa.string()),
                pa.array(offsets[start : start + n], pa.int64()),
                pa.array(part, pa.string()),
            ],
            schema=schema,
        )


def shuffled(graph: Any, files: list[Path], partitions: int) -> list[pa.RecordBatch]:
    """Key partition 0's block rows of the first stage's output, file by file (steps 1, 2)."""
    from flamestream.spark.exec.shuffle.blocks import block_keys

    stage = graph._front_stage("value", partitions)
    mine = block_keys(partitions)[0]
    found = []
    for front, path in enumerate(files):
        for rows in stage.read(front_blocks(path, front)):
            hits = pc.equal(rows.column("key"), pa.scalar(mine, pa.binary()))
            found.append(rows.filter(hits))
    return found


def once(
    graph: Any, rows: list[pa.RecordBatch], out: Path, columns: str = "all"
) -> dict[str, float]:
    """Steps 3 to 5 on ``rows``, timed, the cyclic collector paused as the task has it.

    ``columns``: the sink's ``columns`` option (what the part holds of each released row).
    """
    from flamestream.spark.exec.worker.gc_pause import gc_paused

    with gc_paused():
        return _once(graph, rows, out, columns)


def _once(graph: Any, rows: list[pa.RecordBatch], out: Path, columns: str) -> dict[str, float]:
    from flamestream.model import GlobalTime
    from flamestream.runtime.grouping import GroupingState
    from flamestream.spark.connector.options import OptionReader
    from flamestream.spark.connector.sink import (
        TaskParts,
        _released,
        fill_parts,
        kept_columns,
        written_columns,
    )
    from flamestream.spark.exec.general.items import RELEASED_COLUMNS, sorted_by_meta
    from flamestream.spark.exec.general.keyed import _INPUT_COLUMNS, KeyedRunner, _items_of
    from flamestream.spark.exec.general.tails import WithTails
    from pyspark_flamestream.sinks.files import FilesOutput

    (plan,) = [s for s in graph.stages if s.grouping]
    keyed = KeyedRunner(
        graph.graph, plan, graph.keys, graph.render, latest=graph.release == "latest"
    )
    task = WithTails(keyed, [graph._runner(t, named=False) for t in graph.plan.tails(plan)])
    written = written_columns(columns, RELEASED_COLUMNS)
    kept = kept_columns(written, RELEASED_COLUMNS)
    if kept is not None:  # as BarrierWriter.__init__ tells the stage
        task.keep_only(kept)
    g = keyed.grouping
    state = GroupingState(g.step_id, g.window, g.key)
    everything = GlobalTime(2**62, 0)
    sink = FilesOutput(OptionReader("sink files", {"path": str(out), "format": "parquet"}))
    began, began_cpu = time.perf_counter(), time.process_time()
    tables = _items_of([b for b in rows if b.num_rows], _INPUT_COLUMNS)  # as the task does
    table = sorted_by_meta(
        pa.Table.from_batches(tables).select(_INPUT_COLUMNS), coded_traces=True
    )  # as KeyedRunner._partition sorts
    del tables
    sorted_at, sorted_cpu = time.perf_counter(), time.process_time()

    def released() -> Iterator[pa.Table]:
        for output in keyed._runs(table, state, everything):
            for done in task.through_tails(output, keyed.handed_payloads):
                yield pa.Table.from_batches([_released(done, kept or RELEASED_COLUMNS)])

    parts = TaskParts(sink, 0, 0, background=True, columns=written)  # as the write task has it
    left = fill_parts(parts, released(), everything)
    if (left is not None and left.num_rows) or len(parts.parts) != 1:
        msg = "every row below the min-time should go into one part"
        raise AssertionError(msg)
    (part,) = parts.close()
    wrote, wrote_cpu = time.perf_counter(), time.process_time()
    state.collect_garbage(everything)  # as the task does before its snapshot
    state.snapshot()
    ended, ended_cpu = time.perf_counter(), time.process_time()
    return {
        "unpack_sort": sorted_at - began,
        "keyed_render_write": wrote - sorted_at,
        "snapshot": ended - wrote,
        "cpu_unpack_sort": sorted_cpu - began_cpu,
        "cpu_keyed_render_write": wrote_cpu - sorted_cpu,
        "cpu_snapshot": ended_cpu - wrote_cpu,
        "rows_in": table.num_rows,
        "rows_out": parts.rows,
        "bytes_out": (out / part).stat().st_size,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the phases ``--repeat`` times on one key partition; print JSON."""
    made = cli.parser(__doc__, timeout=600.0)
    cli.flag(made, "--lines", 400_000, "corpus lines")
    cli.flag(made, "--files", 4, "corpus files")
    cli.flag(made, "--release", "every", "what the count releases", choices=["every", "latest"])
    cli.flag(made, "--columns", "all", "the sink's columns option", choices=COLUMNS)
    cli.flag(made, "--partitions", 2, "key partitions (the task runs partition 0)")
    cli.flag(made, "--pause", 0.0, "seconds slept between repetitions")
    args = made.parse_args(argv)
    from flamestream.spark import SparkGraph

    load_before = load_averages()
    graph = SparkGraph(word_count_graph(commutative=True, declared=True), release=args.release)
    made_corpus = corpus(CORPUS_DIR, args.lines, args.files)
    files = sorted(made_corpus.path.glob("*.txt"))
    rows = shuffled(graph, files, args.partitions)
    runs: list[dict[str, float]] = []
    with tempfile.TemporaryDirectory() as work:
        for nth in range(args.warmup + args.repeat):
            run = once(graph, rows, Path(work) / f"out-{nth}", args.columns)
            if nth >= args.warmup:
                runs.append(run)
            time.sleep(args.pause)
    report = {
        "benchmark": "keyed_task",
        "input": {
            "lines": args.lines,
            "files": args.files,
            "release": args.release,
            "columns": args.columns,
        },
        "partition": f"0 of {args.partitions} (Spark's hash of the key)",
        "rows_in": runs[0]["rows_in"],
        "rows_out": runs[0]["rows_out"],
        "bytes_out": runs[0]["bytes_out"],
        "seconds_median": {p: median(r[p] for r in runs) for p in PHASES},
        "cpu_seconds_median": {p: median(r[f"cpu_{p}"] for r in runs) for p in PHASES},
        "seconds_runs": {p: [round(r[p], 3) for r in runs] for p in PHASES},
        "total_median": median(sum(r[p] for p in PHASES) for r in runs),
        "cpu_total_median": median(sum(r[f"cpu_{p}"] for p in PHASES) for r in runs),
        "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3),
        "pause": args.pause,
        "machine": machine(load_before=load_before[0]),
    }
    return emit(report)


if __name__ == "__main__":
    sys.exit(main())
