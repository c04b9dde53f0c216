"""A child driver started with ``SPARK_CONF_DIR`` = the project's ``conf/`` (and nothing else):
the shim's plugin and listeners come from ``spark-defaults.conf`` alone. Prints one JSON line
(``RESULT {...}``) for ``test_shim_conf.py`` to check.

    python -m tests.spark.shim_job <work dir>
"""

from __future__ import annotations

import json
import sys
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


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(Path(sys.argv[1]))))
