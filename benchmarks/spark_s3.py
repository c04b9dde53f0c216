"""Spark S3 benchmark: the same queries with their checkpoint and output on S3 and on local disk.

A SeaweedFS on loopback (:class:`flamestream.testing.seaweedfs.SeaweedFS`): Spark's checkpoint
on ``s3a://`` (hadoop-aws), flamestream's stores and the files sink's output on ``s3://``
(s3fs), the input on local disk in both cases (the front's reads are not what is compared).
Two workloads, each run on both stores, the stores interleaved, ``--repeat`` times:

``floor``
    a passthrough in batches of ``--floor-batch`` lines (``maxRecordsPerTrigger``): the
    per-batch cost of the checkpoint and the sink's commit, nearly no data.
``wordcount``
    the word count graph (keyed state under the checkpoint) over ``--lines`` lines in
    batches of ``--batch`` lines.

Reported per workload and store: the median seconds per batch (Spark's ``triggerExecution``)
and wall seconds per run, S3 over local; and, on S3, the S3 requests per batch by type, from
SeaweedFS's own counter ``SeaweedFS_s3_request_total`` (every request any client made: Spark's
S3A and every process's s3fs), read before and after each run. Prints one JSON object::

    python -m benchmarks.spark_s3 [--lines N] [--batch B] [--floor-lines N] [--floor-batch B]
        [--repeat R]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fsspec.config

from benchmarks.lib.record import emit, machine
from benchmarks.lib.session import local_spark
from benchmarks.lib.timing import Run, run_query
from benchmarks.lib.workloads import line, word_count_graph
from flamestream.spark import apply_graph
from flamestream.testing.seaweedfs import SeaweedFS

STORES = ("local", "s3")


def arguments(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    made = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    made.add_argument("--lines", type=int, default=20_000, help="word count input lines")
    made.add_argument("--batch", type=int, default=2_000, help="word count lines per batch")
    made.add_argument("--floor-lines", type=int, default=100, help="passthrough input lines")
    made.add_argument("--floor-batch", type=int, default=10, help="passthrough lines per batch")
    made.add_argument("--repeat", type=int, default=3, help="runs per workload and store")
    made.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    return made.parse_args(argv)


def write_input(folder: Path, lines: int) -> None:
    """``lines`` generated lines in one file."""
    folder.mkdir(parents=True)
    (folder / "lines.txt").write_text("".join(line(i) + "\n" for i in range(lines)))


def reader(spark: Any, source: Path, per_batch: int) -> Any:
    """The files front over ``source``, ``per_batch`` lines a batch, logical clock."""
    return (
        spark.readStream.format("flamestream")
        .option("front", "files")
        .option("path", str(source))
        .option("maxRecordsPerTrigger", per_batch)
        .option("clock", "logical")
    )


def define(spark: Any, workload: str, source: Path, root: str, per_batch: int) -> Any:
    """The writer of one run: checkpoint ``<root>/ck``, output ``<root>/out``."""
    checkpoint = root.replace("s3://", "s3a://") + "/ck"
    if workload == "floor":
        rows = reader(spark, source, per_batch).load()
    else:
        rows = apply_graph(
            word_count_graph(), reader(spark, source, per_batch), checkpoint_location=checkpoint
        )
    return (
        rows.writeStream.format("flamestream")
        .option("sink", "files")
        .option("path", f"{root}/out")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
    )


def once(
    s3: SeaweedFS, run: Callable[[str], Run], store: str, local: Path
) -> tuple[Run, dict[str, int]]:
    """One run on ``store``; with the S3 requests it made, by type."""
    if store == "local":
        return run(str(local / uuid.uuid4().hex)), {}
    bucket = f"bench-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(bucket)
    before = s3.request_counts()
    done = run(f"s3://{bucket}")
    after = s3.request_counts()
    return done, {kind: after[kind] - before.get(kind, 0) for kind in after}


def summary(runs: list[tuple[Run, dict[str, int]]]) -> dict[str, Any]:
    """Medians over the runs of one workload on one store."""
    per_batch = [r.triggers / max(r.batches, 1) for r, _ in runs]
    out: dict[str, Any] = {
        "batches": runs[0][0].batches,
        "seconds_per_batch": round(statistics.median(per_batch), 4),
        "wall_seconds": round(statistics.median(r.seconds for r, _ in runs), 3),
        "runs_seconds_per_batch": [round(x, 4) for x in per_batch],
    }
    if runs[0][1]:
        kinds = sorted({kind for _, counts in runs for kind in counts})
        requests = {
            kind: statistics.median(c.get(kind, 0) / max(r.batches, 1) for r, c in runs)
            for kind in kinds
        }
        out["s3_requests_per_batch"] = {k: round(v, 1) for k, v in requests.items() if v}
        out["s3_requests_per_batch_total"] = round(sum(requests.values()), 1)
    return out


def measure(args: argparse.Namespace, s3: SeaweedFS, work: Path) -> dict[str, Any]:
    """Every workload on both stores, interleaved, ``--repeat`` rounds (after one warm-up)."""
    spark = local_spark("flamestream-bench-s3", s3.spark_conf())
    sizes = {"floor": (args.floor_lines, args.floor_batch), "wordcount": (args.lines, args.batch)}
    results: dict[str, Any] = {}
    for workload, (lines, per_batch) in sizes.items():
        source = work / f"in-{workload}"
        write_input(source, lines)

        def run(
            root: str, workload: str = workload, source: Path = source, n: int = per_batch
        ) -> Run:
            return run_query(lambda: define(spark, workload, source, root, n), args.timeout)

        runs: dict[str, list[tuple[Run, dict[str, int]]]] = {store: [] for store in STORES}
        for store in STORES:  # warm-up: JIT, workers, first bucket
            once(s3, run, store, work)
        for _ in range(args.repeat):
            for store in STORES:
                runs[store].append(once(s3, run, store, work))
        cases = {store: summary(done) for store, done in runs.items()}
        ratio = cases["s3"]["seconds_per_batch"] / cases["local"]["seconds_per_batch"]
        results[workload] = {"lines": lines, "per_batch": per_batch, **cases}
        results[workload]["s3_over_local_per_batch"] = round(ratio, 2)
    spark.stop()
    return results


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its JSON report."""
    args = arguments(argv)
    with SeaweedFS() as s3, tempfile.TemporaryDirectory(prefix="flamestream-bench-s3-") as work:
        os.environ.update(s3.environment())  # before the session: its runners inherit it
        fsspec.config.set_conf_env(fsspec.config.conf)  # fsspec read FSSPEC_* on import
        results = measure(args, s3, Path(work))
    report = {
        "benchmark": "spark_s3",
        "machine": machine(),
        "requests_counted_by": "SeaweedFS_s3_request_total (server side, every client)",
        **results,
    }
    return emit(report)


if __name__ == "__main__":
    raise SystemExit(main())
