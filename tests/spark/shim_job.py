"""A child driver started with ``SPARK_CONF_DIR`` = the project's ``conf/`` (and nothing else):
the shim's plugin and listeners come from ``spark-defaults.conf`` alone. Prints one JSON line
(``RESULT {...}``) for ``test_shim_conf.py`` to check.

    python -m tests.spark.shim_job <work dir>
"""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from flamestream.jvm import Shim, conf_defaults


def main(base: Path) -> dict[str, Any]:
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.port", "0")  # the Prometheus servlet lives in the UI: any free port
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    shim = Shim.of_session(spark)
    assert shim is not None, "no shim: spark-defaults.conf was not applied"
    out: dict[str, Any] = {}

    def run(name: str, **options: Any) -> dict[str, Any]:
        reader = (
            spark.readStream.format("flamestream")  # no register(): found by PySpark
            .option("front", "generator")
            .option("rowsPerSecond", 0)
            .option("totalRows", 60)
            .option("clock", "logical")
        )
        for key, value in options.items():
            reader = reader.option(key, str(value))
        query = (
            reader.load()
            .writeStream.format("flamestream")
            .option("sink", "files")
            .option("path", str(base / name / "out"))
            .option("checkpointLocation", str(base / f"{name}-ck"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        offsets = base / f"{name}-ck" / "offsets"
        batches = sorted(int(p.name) for p in offsets.iterdir() if p.name.isdigit())
        last = json.loads((offsets / str(batches[-1])).read_text().splitlines()[-1])
        return {"batches": len(batches), "id": str(query.id), "last": last}

    spark.sql("SET spark.flamestream.maxRecordsPerTrigger=20")
    out["set"] = run("set")
    out["option"] = run("option", maxRecordsPerTrigger=30)
    spark.sql("SET spark.flamestream.maxRecordsPerTrigger=abc")
    try:
        run("bad")
    except Exception as error:  # reported to the test, which checks it
        out["bad"] = str(error)
    spark.sql("RESET spark.flamestream.maxRecordsPerTrigger")
    out["fileDefault"] = run("file", controller="on", minRecordsPerTrigger=10)
    spark.sql("SET spark.flamestream.targetLatencyMs=9000")
    out["setOverFile"] = run("setfile", controller="on", minRecordsPerTrigger=10)
    out["optionOverSet"] = run("optset", controller="on", targetLatencyMs=7000)
    out["packed"] = run("packed", partitions=4)  # 4 sources, readTasks = parallelism = 2
    # Spark's own setting for its file sink log, read by the files sink through the shim
    spark.sql("SET spark.sql.streaming.fileSink.log.compactInterval=2")
    out["compacted"] = run("compacted", maxRecordsPerTrigger=10)
    spark.sql("RESET spark.sql.streaming.fileSink.log.compactInterval")
    log = base / "compacted" / "out" / "_spark_metadata"
    out["compacted"]["log"] = sorted(p.name for p in log.iterdir() if not p.name.startswith("."))
    out["compacted"]["read"] = spark.read.json(str(log.parent)).count()
    out["defaults"] = conf_defaults(shim)
    out["cpuBudget"] = cpu_budget_runs(spark, base, shim)
    out["hello"] = shim.request("hello")
    # the file's recommended conf: every Python task above talked to Spark over a Unix socket
    out["unixSockets"] = spark.sparkContext.getConf().get("spark.python.unix.domain.socket.enabled")
    out["progress"] = {query: len(events) for query, events in shim.progress().items()}
    controller = out["fileDefault"]["last"]["controller"]["id"]
    out["matched"] = {q: len(e) for q, e in shim.progress(match=controller, last=1).items()}
    out["tasks"] = shim.tasks()
    out["gauges"] = shim.request("gauges")["gauges"]
    url = spark.sparkContext.uiWebUrl
    with urllib.request.urlopen(f"{url}/metrics/prometheus/") as page:  # noqa: S310 - loopback
        text = page.read().decode()
    out["prometheus"] = [line for line in text.splitlines() if "FlameStreamPlugin" in line]
    spark.stop()
    return out


def word_count() -> Any:
    from flamestream import Dataflow, map_reduce

    flow = Dataflow("keys")
    counts = map_reduce(
        flow, "count", flow.source("keys"), mapper=lambda k: (k, 1), reducer=lambda a, b: a + b
    )
    flow.sink("counts", counts)
    return flow


def budgeted_run(
    spark: SparkSession, work: Path, policy: Any, total: int, rate: int, expected: int = 0
) -> dict[str, Any]:
    """The word count over a logical-clock generator, with ``policy`` (None: unbudgeted).

    ``rate`` 0: AvailableNow; else a processing-time query on a generator of ``rate`` rows a
    second, stopped once ``expected`` rows are released.
    """
    from flamestream.spark import apply_graph
    from flamestream.spark.control.budgeted import LimitBoard

    reader = (
        spark.readStream.format("flamestream")
        .option("front", "generator")
        .option("partitions", 1)  # one front: global times are positions, whatever the batches
        .option("rowsPerSecond", rate)
        .option("totalRows", total)
        .option("keys", 50)
        .option("clock", "logical")
    )
    if not rate:
        reader = reader.option("maxRecordsPerTrigger", 100)
    df = apply_graph(
        word_count(),
        reader if policy else reader.load(),
        payload="key",
        checkpoint_location=str(work),
        partitions=2,
        budgets=policy,
    )
    writer = (
        df.writeStream.format("flamestream")
        .option("checkpointLocation", str(work))
        .option("sink", "files")
        .option("path", str(work / "out"))
    )
    if rate:
        query = writer.trigger(processingTime="0 seconds").start()
        deadline = time.monotonic() + 180
        while len(released(work / "out")) < expected and time.monotonic() < deadline:
            time.sleep(0.2)
        query.stop()
    else:
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination(300)
    rows = [(r["ts"], r["front"], r["value"]) for r in released(work / "out")]
    board = LimitBoard(str(work / "flamestream-graph")).entries() if policy else []
    offsets = work / "offsets"
    reads = []
    for batch in sorted(int(p.name) for p in offsets.iterdir() if p.name.isdigit()):
        for line in (offsets / str(batch)).read_text().splitlines()[2:]:
            if '"budget"' in line:
                reads.append(json.loads(line)["budget"])
    return {"rows": rows, "board": board, "reads": reads}


def released(out: Path) -> list[dict[str, Any]]:
    found = []
    for part in sorted(out.glob("part-*.jsonl")):
        found += [json.loads(line) for line in part.read_text().splitlines()]
    return found


def cpu_budget_runs(spark: SparkSession, base: Path, shim: Shim) -> dict[str, Any]:
    """The CPU the shim measures, and the budget policy holding (or reporting) a CPU budget."""
    from flamestream.spark.control.budgeted import BudgetPolicy

    out: dict[str, Any] = {"before": shim.request("cpu")}
    out["fixed"] = budgeted_run(spark, base / "cpu-fixed", None, 600, 0)
    out["unreachable"] = budgeted_run(
        spark,
        base / "cpu-unreachable",
        BudgetPolicy(max_cpu_us_per_record=0.001, min_rows=50, max_rows=100),
        600,
        0,
    )
    # measured first, unmanaged (a budget nothing costs that much), then half of that
    policy = BudgetPolicy(target_latency_ms=8000, min_rows=10, max_cpu_us_per_record=1e9)
    expected = len(out["fixed"]["rows"])
    free = budgeted_run(spark, base / "cpu-free", policy, 1500, 150, expected)
    measured = [e["cpuMs"] / e["rows"] for e in free["board"] if e["cpuMs"] and e["rows"]]
    budget_us = 1000 * sorted(measured)[len(measured) // 2] / 2
    held = BudgetPolicy(
        target_latency_ms=8000, min_rows=10, max_cpu_us_per_record=budget_us, cpu_window_ms=4000
    )
    out["free"] = free
    out["held"] = budgeted_run(spark, base / "cpu-held", held, 1500, 150, expected)
    out["budgetUs"] = budget_us
    out["after"] = shim.request("cpu")
    return out


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(Path(sys.argv[1]))))
