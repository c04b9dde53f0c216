"""Rescale on a growing cluster: a Worker joins mid-run, the active partitions follow its cores.

A :class:`~flamestream.testing.standalone.StandaloneCluster` on this machine starts with one
1-core Worker. The generator pipeline (:mod:`benchmarks.lib.pipeline`: word count over the
``key`` column, ``--keys`` keys, the flamestream files sink), fed from a backlog
(``rowsPerSecond`` 0, ``--rows-per-batch`` a batch, ``clock=logical``), runs as an elastic
graph of ``P = --partitions`` key partitions starting with one active. In one application,
one after another:

* ``unrescaled``: one active partition throughout, on one Worker (the reference output);
* ``flamestream``: ``follow_cluster``: after ``--add-after`` batches a second 1-core Worker
  joins; the control channel sees the cores (the shim's listener), moves to two active
  partitions and migrates the slots a few per batch, the query never stopping;
* ``spark``: the same change done Spark's way on plain Spark's stateful word count
  (``groupBy(key).count()``, RocksDB state, one shuffle partition): the Worker joins, the
  query stops, ``StreamingCheckpointManager.repartition`` (PySpark 4.2+) rewrites its state
  into two partitions, and the query starts again; its downtime is reported.

Reported as JSON: how long the active count took to follow the new executor
(``follow_delay``: the Worker ALIVE -> its core granted to the application -> the executor
registered with the driver -> the first batch with two active partitions, in batches and
seconds, with the batches' durations in between), throughput before and after (rows per
second of batch time, steady batches),
the migration batches' durations against the steady ones, p99 admission -> release (a batch's
planning to its commit marker, per record) over the migration window and in steady state,
state bytes moved per second, the byte comparison of the released output with the unrescaled
run's, and the targets. Other Spark work on the machine skews every timing: rerun alone::

    python -m benchmarks.spark_rescale [--rows-per-batch N] [--batches B] [--add-after A]
        [--keys K] [--partitions P] [--settle S] [--variants ...] [--timeout S] [--work DIR]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.lib import checkpoint, cli, pipeline
from benchmarks.lib.record import Record, emit
from benchmarks.lib.stats import median, summary_or_none
from flamestream.testing.standalone import StandaloneCluster

VARIANTS = ["unrescaled", "flamestream", "spark"]
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    """The input's size, when the Worker joins, the graph's partitions, the variants."""
    parser = cli.parser(__doc__, timeout=600.0, repeat=None)
    cli.flag(parser, "--rows-per-batch", 20000, "records a batch (maxRecordsPerTrigger)")
    cli.flag(parser, "--batches", 24, "batches of input in all")
    cli.flag(parser, "--add-after", 6, "batches done when the second Worker is started")
    cli.flag(parser, "--keys", 50000, "distinct keys (the state's size)")
    cli.flag(parser, "--partitions", 2, "key partitions P (max parallelism)")
    cli.flag(parser, "--settle", 2, "batches a new core count must hold before a rescale")
    cli.flag(parser, "--variants", VARIANTS, nargs="+", choices=VARIANTS)
    return parser.parse_args(argv)


def session(cluster: StandaloneCluster) -> Any:
    """A session on ``cluster`` with flamestream's plugin; executors of 1 core, 2 at most."""
    from pyspark.sql import SparkSession

    import flamestream

    conf: dict[str, Any] = dict(cluster.app_conf())
    conf |= {
        "spark.cores.max": "2",
        "spark.scheduler.minRegisteredResourcesRatio": "0",  # start on the one Worker there is
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
    }
    builder = SparkSession.builder.master(cluster.master_url).appName("bench-rescale")
    spark = flamestream.configure(builder).config(map=conf).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def wait_for_cores(spark: Any, cores: int, timeout: float = 120.0) -> float:
    """Wait until the application has ``cores`` cores (the shim's view); seconds waited."""
    from flamestream.jvm import Shim

    shim = Shim.of_session(spark)
    began = time.monotonic()
    while shim is not None and shim.executors().cores != cores:
        if time.monotonic() - began > timeout:
            msg = f"the application did not get {cores} cores within {timeout:.0f} s"
            raise TimeoutError(msg)
        time.sleep(0.1)
    return round(time.monotonic() - began, 2)


def front(args: argparse.Namespace) -> dict[str, Any]:
    """The generator's options: a backlog read ``--rows-per-batch`` at a time."""
    return {
        "rowsPerSecond": 0,
        "totalRows": args.rows_per_batch * args.batches,
        "maxRecordsPerTrigger": args.rows_per_batch,
        "keys": args.keys,
        "clock": "logical",
    }


def wait_for_grant(cluster: StandaloneCluster, cores: int, timeout: float = 120.0) -> float | None:
    """When the Master lists ``cores`` cores granted to the application (epoch s; None: unknown).

    The Master's ``/json`` (``activeapps[].cores``: the cores granted, executors started or
    not), polled every 20 ms.
    """
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        apps = cluster.state().get("activeapps", [])
        if not apps or "cores" not in apps[0]:
            return None
        if int(apps[0]["cores"]) >= cores:
            return time.time()
        time.sleep(0.02)
    return None


def adder(
    cluster: StandaloneCluster, after: int, spark: Any, log: dict[str, Any]
) -> Callable[[Any, pipeline.Watched], None]:
    """A watch poll that starts a Worker once ``after`` batches with rows are done.

    Logs (epoch s) when the Master listed the Worker ALIVE, granted its core to the
    application, and when the executor there registered with the driver (the scheduler's
    time of it, from the shim's listener).
    """

    def poll(query: Any, watched: pipeline.Watched) -> None:
        from flamestream.jvm import Shim

        if "worker_added_at" in log or len(watched.progress) < after or not query.isActive:
            return
        log["added_after_batch"] = max(watched.progress)
        log["worker"] = cluster.add_worker()
        log["worker_added_at"] = time.time()
        log["granted_at"] = wait_for_grant(cluster, 2)
        log["seconds_to_executor"] = wait_for_cores(spark, 2)
        shim = Shim.of_session(spark)
        log["registered_at"] = shim.executors().changed_at if shim is not None else None

    return poll


def run_graph(
    spark: Any, cluster: StandaloneCluster, args: argparse.Namespace, work: Path, follow: bool
) -> dict[str, Any]:
    """The elastic word count; with ``follow``, a Worker joins after ``--add-after`` batches."""
    from flamestream.spark.control.key_layout import ElasticPolicy

    out, ck = work / "out", work / "ck"
    policy = ElasticPolicy(active=1, follow_cluster=follow, settle=args.settle)
    log: dict[str, Any] = {}
    poll = adder(cluster, args.add_after, spark, log) if follow else None

    def starter(options: Any, out: Path, ck: Path) -> Any:
        return pipeline.start(
            spark, options, out, ck, release="commit", partitions=args.partitions, elastic=policy
        )

    watched = pipeline.run(starter, front(args), out, ck, args.timeout, args.timeout, poll)
    if not watched.finished:
        msg = f"the query did not read its {args.rows_per_batch * args.batches} rows in time"
        raise TimeoutError(msg)
    if "worker" in log:  # back to one Worker for the next variant
        cluster.kill_worker(log.pop("worker"))
        wait_for_cores(spark, 1)
    return {
        "watched": watched,
        "tasks": task_metrics(spark, watched),
        "checkpoint": checkpoint.read(ck),
        "ck": ck,
        "log": log,
        "out": out,
    }


def task_metrics(spark: Any, watched: pipeline.Watched) -> dict[int, Any]:
    """The shim's task metrics of the query's recent batches (where a batch's time went)."""
    from flamestream.jvm import Shim, ShimError

    shim = Shim.of_session(spark)
    ids = {p["id"] for p in watched.progress.values()}
    if shim is None or len(ids) != 1:
        return {}
    try:
        batches = shim.tasks().get(ids.pop(), [])
    except ShimError:
        return {}
    return {int(b["batch"]): b["stages"] for b in batches}


def batch_rows(watched: pipeline.Watched) -> list[dict[str, Any]]:
    """Per batch with rows: id, rows, trigger seconds, Spark's phases (ms)."""
    return [
        {
            "batch": b,
            "rows": int(p["numInputRows"]),
            "seconds": p["durationMs"]["triggerExecution"] / 1000,
            "phases_ms": dict(p["durationMs"]),
        }
        for b, p in sorted(watched.progress.items())
    ]


def throughput(batches: list[dict[str, Any]]) -> float | None:
    """Rows per second of batch time."""
    took = sum(b["seconds"] for b in batches)
    return round(sum(b["rows"] for b in batches) / took, 1) if took else None


def latencies(ck: checkpoint.Checkpoint, path: Path, ids: set[int]) -> list[float]:
    """Admission -> release of every record of batches ``ids``: planning to commit marker.

    The planning: when the batch's offset was logged (``clock=logical`` offsets carry no wall
    clock); the release: the sink's commit marker.
    """
    from flamestream.spark.durable import QueryCheckpoint

    log = QueryCheckpoint(str(path))
    found: list[float] = []
    for batch in ck.batches:
        if batch.id in ids and batch.released is not None:
            planned = os.stat(log.offset_path(batch.id)).st_mtime
            found += [batch.released - planned] * batch.rows
    return found


def migration(ck: checkpoint.Checkpoint) -> list[dict[str, Any]]:
    """The batches a new layout took effect in: slots moved, their bytes, the reason."""
    found, previous = [], 0
    for batch in sorted(ck.layouts):
        layout = ck.layouts[batch]
        if int(layout.get("decisions", 0)) != previous and "moved" in layout:
            found.append(
                {
                    "batch": batch,
                    "active": layout.get("active"),
                    "slots": len(layout["moved"]),
                    "bytes": int(layout.get("movedBytes", 0)),
                    "reason": layout.get("reason"),
                }
            )
        previous = int(layout.get("decisions", 0))
    return found


def batch_times(path: Path) -> dict[int, tuple[float, float | None]]:
    """Per logged batch: when its offset was logged and when it was committed (epoch s)."""
    from flamestream.spark.durable import QueryCheckpoint

    log = QueryCheckpoint(str(path))
    found: dict[int, tuple[float, float | None]] = {}
    for batch in log.logged_batches():
        commit = path / "commits" / str(batch)
        done = commit.stat().st_mtime if commit.exists() else None
        found[batch] = (os.stat(log.offset_path(batch)).st_mtime, done)
    return found


def follow_delay(run: dict[str, Any], settle: int) -> dict[str, Any] | None:
    """From the new executor to the active count's change: batches and seconds, and where.

    ``registered_in_batch``: the batch running when the executor registered (the last one
    logged before); ``active_changed_in_batch``: the first whose control offset has more
    active partitions than batch 0's. What bounds it (docs/rescale.md): the batch running at
    the registration ends, the next planning reads the cores, and ``settle`` readings in a
    row (one per committed batch) act: ``batches`` = ``settle``, ``seconds`` = the rest of
    the running batch and the ``settle - 1`` batches after it.
    """
    log, layouts = run["log"], run["checkpoint"].layouts
    registered = log.get("registered_at")
    if registered is None or not layouts:
        return None
    times = batch_times(run["ck"])
    first = layouts[min(layouts)]["active"]
    changed = next((b for b in sorted(layouts) if layouts[b]["active"] != first), None)
    running = max((b for b, (planned, _) in times.items() if planned <= registered), default=-1)
    granted = log.get("granted_at")
    at_grant = max(
        (b for b, (planned, _) in times.items() if granted and planned <= granted), default=-1
    )
    out: dict[str, Any] = {
        "settle": settle,
        "worker_alive_to_grant_s": _since(log["worker_added_at"], granted),
        "grant_to_registration_s": _since(granted, registered),
        "registered_in_batch": running,
        "granted_in_batch": at_grant if granted else None,
        "running_batch_ends_after_registration_s": _since(registered, times[running][1])
        if running in times
        else None,
    }
    if changed is None:
        return out | {"active_changed_in_batch": None}
    between = [b for b in sorted(times) if running <= b < changed]
    return out | {
        "active_changed_in_batch": changed,
        "batches": changed - running,
        "seconds": _since(registered, times[changed][0]),
        "batches_from_grant": changed - at_grant if granted else None,
        "seconds_from_grant": _since(granted, times[changed][0]),
        "batch_seconds_between": [_since(*times[b]) for b in between],
    }


def _since(start: float | None, end: float | None) -> float | None:
    """``end - start`` in seconds, rounded; None if either is unknown."""
    return None if start is None or end is None else round(end - start, 2)


def analyse_graph(run: dict[str, Any]) -> dict[str, Any]:
    """The follow run's figures: before, the migration window, after."""
    batches, ck, log = batch_rows(run["watched"]), run["checkpoint"], run["log"]
    moves = migration(ck)
    if log and not moves:
        msg = "the input ended before the rescale's first move: raise --batches"
        raise RuntimeError(msg)
    moved = {m["batch"] for m in moves}
    added = log.get("added_after_batch", -1)
    before = [b for b in batches if 0 < b["batch"] <= added]  # batch 0: the warm-up
    last_move = max(moved, default=added)
    after = [b for b in batches if b["batch"] > last_move]
    window = [b for b in batches if b["batch"] in moved]
    steady_s = median([b["seconds"] for b in before]) if before else None
    moved_seconds = sum(b["seconds"] for b in window)
    p99 = {
        name: summary_or_none(latencies(ck, run["ck"], {b["batch"] for b in part}))
        for name, part in (("steady_before", before), ("migration", window), ("after", after))
    }
    return {
        "worker": log,
        "batches": len(batches),
        "migration": moves,
        "batch_seconds": {
            "steady_before_median": steady_s,
            "migration": [round(b["seconds"], 3) for b in window],
            "migration_phases_ms": [b["phases_ms"] for b in window],
            # per stage, per task: [partition, ms, records in, records out]
            "migration_tasks": {b: run["tasks"].get(b) for b in sorted(moved)},
            "steady_before_tasks": {b["batch"]: run["tasks"].get(b["batch"]) for b in before[-1:]},
            "after_median": median([b["seconds"] for b in after]) if after else None,
        },
        "throughput_rows_per_s": {"before": throughput(before), "after": throughput(after)},
        "admission_to_release_ms": p99,
        "state_bytes_moved": sum(m["bytes"] for m in moves),
        "state_bytes_moved_per_s": (
            round(sum(m["bytes"] for m in moves) / moved_seconds) if moved_seconds else None
        ),
        "per_batch": [[b["batch"], b["rows"], round(b["seconds"], 3)] for b in batches],
    }


def targets(report: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets, each with its figure and whether it is met."""
    seconds = report["batch_seconds"]
    steady, longest = seconds["steady_before_median"], max(seconds["migration"], default=None)
    rates = report["throughput_rows_per_s"]
    lat = report["admission_to_release_ms"]
    p99_window = (lat["migration"] or {}).get("p99")
    p99_steady = (lat["steady_before"] or {}).get("p99")
    ratio = rates["after"] / rates["before"] if rates["before"] and rates["after"] else None

    def met(value: float | None, bound: float, *, at_least: bool = False) -> dict[str, Any]:
        ok = None if value is None else (value >= bound if at_least else value <= bound)
        return {"value": None if value is None else round(value, 2), "bound": bound, "met": ok}

    return {
        "longest_migration_batch_over_steady": met(
            longest / steady if longest and steady else None, 2.0
        ),
        "p99_window_over_steady": met(
            p99_window / p99_steady if p99_window and p99_steady else None, 2.0
        ),
        "throughput_after_over_before": met(ratio, 1.6, at_least=True),
    }


def released_bytes(out: Path) -> bytes:
    """Every released file's bytes, in name (batch) order."""
    return b"".join(p.read_bytes() for p in sorted(out.glob("part-*")))


def spark_query(spark: Any, args: argparse.Namespace, ck: Path, *, once: bool = False) -> Any:
    """Plain Spark's stateful word count over the same generator front (no-op sink).

    ``once``: one batch (a restart's first is the batch a stop left uncommitted), then stop.
    """
    reader = spark.readStream.format("flamestream").option("front", "generator")
    for name, value in {"partitions": pipeline.GENERATOR_PARTITIONS, **front(args)}.items():
        reader = reader.option(name, value)
    counts = reader.load().groupBy("key").count()
    writer = counts.writeStream.format("noop").outputMode("update")
    writer = writer.option("checkpointLocation", str(ck))
    if once:
        return writer.trigger(once=True).start()
    return writer.trigger(processingTime="0 seconds").start()


def watch_until(query: Any, rows: int, deadline: float) -> dict[int, dict[str, Any]]:
    """Poll ``query`` until it read ``rows`` rows (or ``deadline``); its batches with rows."""
    seen: dict[int, dict[str, Any]] = {}
    while True:
        for p in query.recentProgress:
            if int(p["numInputRows"]):
                seen[int(p["batchId"])] = p
        total = sum(int(p["numInputRows"]) for p in seen.values())
        if total >= rows or not query.isActive or time.time() > deadline:
            if query.exception() is not None:
                raise query.exception()
            return seen
        time.sleep(0.05)


def progress_batches(seen: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per batch: id, rows, seconds, and its end (epoch s)."""
    from datetime import datetime

    found = []
    for b, p in sorted(seen.items()):
        start = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
        took = p["durationMs"]["triggerExecution"] / 1000
        found.append({"batch": b, "rows": int(p["numInputRows"]), "seconds": took})
        found[-1]["end"] = start + took
    return found


def run_spark_way(
    spark: Any, cluster: StandaloneCluster, args: argparse.Namespace, work: Path
) -> dict[str, Any]:
    """Spark's way: the Worker joins, stop, repartition the state to ``P``, start again."""
    ck, deadline = work / "ck", time.time() + args.timeout
    spark.conf.set("spark.sql.shuffle.partitions", "1")  # fixed in the checkpoint from here
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
    query = spark_query(spark, args, ck)
    watch_until(query, args.add_after * args.rows_per_batch, deadline)
    worker = cluster.add_worker()
    to_executor = wait_for_cores(spark, 2)
    stopping = time.time()
    query.stop()
    first = progress_batches(watch_until(query, 0, deadline))  # every batch until the stop
    first += finish_interrupted(spark, args, ck)
    stopped = time.time()
    left = args.rows_per_batch * args.batches - sum(b["rows"] for b in first)
    if left <= 0:
        cluster.kill_worker(worker)
        msg = "the input ended before the second Worker's executor came: raise --batches"
        raise RuntimeError(msg)
    spark._streamingCheckpointManager.repartition(str(ck), args.partitions)
    repartitioned = time.time()
    query = spark_query(spark, args, ck)
    try:
        second = progress_batches(watch_until(query, left, deadline))
    finally:
        query.stop()
        cluster.kill_worker(worker)
        spark.conf.set("spark.sql.shuffle.partitions", "2")
        spark.conf.unset("spark.sql.streaming.stateStore.providerClass")
    wait_for_cores(spark, 1)
    restart_end = second[0]["end"] if second else None
    return {
        "seconds_to_executor": to_executor,
        "stop_s": round(stopped - stopping, 2),  # with the interrupted batch run to its end
        "repartition_s": round(repartitioned - stopped, 2),
        "downtime_s": round(restart_end - stopping, 2) if restart_end else None,
        "first_batch_after_restart_s": round(second[0]["seconds"], 3) if second else None,
        "batch_seconds": {
            "before_median": median([b["seconds"] for b in first[1:]]) if first[1:] else None,
            "after_median": median([b["seconds"] for b in second[1:]]) if second[1:] else None,
        },
        "throughput_rows_per_s": {
            "before": throughput(first[1:]),
            "after": throughput(second[1:]),
        },
        "per_batch": [[b["batch"], b["rows"], round(b["seconds"], 3)] for b in first + second],
    }


def finish_interrupted(spark: Any, args: argparse.Namespace, ck: Path) -> list[dict[str, Any]]:
    """Run the batch a stop left uncommitted, once: a state repartition needs a clean end."""
    from flamestream.spark.durable import QueryCheckpoint

    log = QueryCheckpoint(str(ck))
    logged = log.logged_batches()
    if not logged or log.last_committed_batch() >= logged[-1]:
        return []
    query = spark_query(spark, args, ck, once=True)
    query.awaitTermination(args.timeout)
    return progress_batches(watch_until(query, 0, time.time() + args.timeout))


def measure(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Every variant in one application on a one-Worker cluster; failures reported."""
    report: dict[str, Any] = {}
    with StandaloneCluster(workers=1, worker_cores=1, worker_memory="1g") as cluster:
        spark = session(cluster)
        try:
            runs: dict[str, Any] = {}
            for name in args.variants:
                folder = work / name
                cli.Workdir.drop(folder)  # a reused --work holds an earlier run's checkpoint
                try:
                    if name == "spark":
                        report["spark"] = run_spark_way(spark, cluster, args, folder)
                        continue
                    runs[name] = run_graph(spark, cluster, args, folder, name == "flamestream")
                except Exception as exc:  # one failed variant leaves the others
                    report[name] = {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}
            if "flamestream" in runs:
                try:
                    report["flamestream"] = analyse_graph(runs["flamestream"])
                    report["follow_delay"] = follow_delay(runs["flamestream"], args.settle)
                    report["targets"] = targets(report["flamestream"])
                except RuntimeError as exc:
                    report["flamestream"] = {"error": str(exc)}
            if "flamestream" in runs and "unrescaled" in runs:
                same = released_bytes(runs["flamestream"]["out"])
                report["output_identical_to_unrescaled"] = same == released_bytes(
                    runs["unrescaled"]["out"]
                ) and bool(same)
                steady = batch_rows(runs["unrescaled"]["watched"])[1:]  # batch 0: the warm-up
                report["unrescaled"] = {
                    "batch_seconds_median": median([b["seconds"] for b in steady]),
                    "throughput_rows_per_s": throughput(steady),
                }
        finally:
            spark.stop()
    return report


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print one JSON object."""
    args = arguments(argv)
    record = Record(library=True)
    workdir = cli.Workdir(args.work, "bench-rescale-")
    report: dict[str, Any] = {
        "benchmark": "spark_rescale",
        "input": {
            "rows_per_batch": args.rows_per_batch,
            "batches": args.batches,
            "add_after": args.add_after,
            "keys": args.keys,
            "partitions": args.partitions,
            "settle": args.settle,
        },
    }
    report |= measure(args, workdir.path)
    report["machine"] = record.machine(
        "4.3", master="spark:// (1 Worker x 1 core, a second one joining)"
    )
    report["seconds"] = record.seconds()
    return emit(report, workdir)


if __name__ == "__main__":
    raise SystemExit(main())
