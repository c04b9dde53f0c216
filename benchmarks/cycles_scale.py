"""Cycles at scale: time per row as one global time, or one loop, grows (not a timed test).

Two workloads, each at growing sizes, on the reference runtime (in process) and on Spark:

``components``: connected components (``flamestream.examples.components``) over random edges
(``n`` edges over ``n // 3`` nodes, so components merge and label waves go round the loop),
streamed in batches of ``--batch`` edges on Spark. Rows: edges. The reference also reports its
deliveries (label waves grow with the graph) and the seconds per delivery.

``fanout``: one record whose items fan out to ``n`` rows of one global time, through a
grouping whose cycle sends every item once more to another key (on Spark through the loop
channel), and to a sink: the grouping's index and the barrier hold ``n`` rows of one global
time, and the hops arrive behind the items of their new key, so they replay and invalidate.
Rows: ``n``.

Every run's result is checked: components against an independent union-find of the edges,
fanout against its count of released rows (the reference's, on Spark). Prints one JSON
object: per workload, runtime and size, the seconds, the rows and the microseconds per row;
and per workload and runtime the growth of the time per row from the smallest size to the
largest, against ``log2`` of the size ratio (the target: no more than a log factor)::

    python -m benchmarks.cycles_scale [--parts components fanout] [--runtimes reference spark]
        [--components-sizes 1000 10000 100000] [--fanout-sizes 1000 10000 100000]
        [--batch B] [--partitions P] [--timeout S] [--work DIR]

``make bench-cycles`` runs it (flags in ``CYCLES_ARGS``).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.lib import cli
from benchmarks.lib.record import Record, emit
from benchmarks.lib.session import spark_session
from flamestream import Dataflow
from flamestream.examples.components import components, labels
from flamestream.testing import run_in_order

PARTS = ["components", "fanout"]
RUNTIMES = ["reference", "spark"]
#: keys of the fanout grouping (each hop moves an item to the next key)
FANOUT_KEYS = 16


def arguments(argv: list[str] | None) -> argparse.Namespace:
    """The flags."""
    made = cli.parser(__doc__, timeout=3600.0, repeat=None)
    cli.flag(made, "--parts", PARTS, "workloads", nargs="+", choices=PARTS)
    cli.flag(made, "--runtimes", RUNTIMES, "runtimes", nargs="+", choices=RUNTIMES)
    cli.flag(made, "--components-sizes", [1000, 10000, 100000], "edges", nargs="+")
    cli.flag(made, "--fanout-sizes", [1000, 10000, 100000], "rows of one global time", nargs="+")
    cli.flag(made, "--batch", 1000, "edges per micro-batch on Spark (maxRecordsPerTrigger)")
    cli.flag(made, "--partitions", 0, "components' key partitions on Spark (0: the graph's: 1)")
    cli.flag(made, "--fanout-partitions", 2, "fanout's key partitions on Spark (hops cross)")
    cli.flag(made, "--seed", 1, "the random edges' seed")
    return made.parse_args(argv)


def random_edges(count: int, seed: int) -> list[str]:
    """``count`` edges ``"u v"`` over ``count // 3`` nodes (at least 2)."""
    rng = random.Random(seed)
    nodes = max(2, count // 3)
    return [f"{rng.randrange(nodes)} {rng.randrange(nodes)}" for _ in range(count)]


def union_find(lines: list[str]) -> dict[int, int]:
    """Each node's component, as its least member: the oracle, independent of the graph."""
    parent: dict[int, int] = {}

    def root(n: int) -> int:
        while parent.setdefault(n, n) != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for line in lines:
        a, b = (root(int(x)) for x in line.split())
        parent[max(a, b)] = min(a, b)
    return {n: root(n) for n in sorted(parent)}


def fanout() -> Dataflow:
    """One record ``"n"`` -> ``n`` items of its global time, each hopping once to a hop key.

    Items ``(v, 0)`` are grouped by ``v % K``; each tuple goes to the sink, and a tuple ending
    at an item sends it on as ``(v, 1)``, to hop key ``K + (v // 2) % K``: the odd ones by a
    detour one step longer, so they come to their buckets behind the even ones they precede
    (on Spark, hops from other key partitions come a batch later). Each late hop re-emits
    the one tuple after it (it ends at a hop: nothing goes on), which the sink's newer
    version replaces. So ``2n`` tuples are released, and there are about ``n / 2`` replays,
    not a cascade.
    """
    flow = Dataflow("fanout")
    fanned = flow.flat_map("fan", flow.source("records"), lambda line: fan(int(line)))
    inbox = flow.merge("inbox", fanned)
    windows = flow.grouping("by_key", inbox, window=2, key=fanout_key)
    shown, onward = flow.broadcast("tuples", windows, 2)
    flow.sink("out", flow.map("show", shown, lambda w: ",".join(f"{v}.{h}" for v, h in w)))
    first = flow.filter("at_item", onward, lambda w: w[-1][1] == 0, version_stable=True)
    even, odd = flow.broadcast("split", flow.map("hop", first, lambda w: (w[-1][0], 1)), 2)
    flow.add_merge_input(inbox, flow.filter("even", even, is_even, version_stable=True))
    late = flow.filter("odd", odd, lambda p: not is_even(p), version_stable=True)
    flow.add_merge_input(inbox, flow.map("detour", late, lambda p: p))
    return flow


def fanout_key(item: tuple[int, int]) -> int:
    """An item's key: ``v % K``; a hop's: ``K + (v // 2) % K`` (two neighbours share one)."""
    value, hops = item
    return value % FANOUT_KEYS if hops == 0 else FANOUT_KEYS + value // 2 % FANOUT_KEYS


def is_even(item: tuple[int, int]) -> bool:
    """Whether an item's value is even."""
    return item[0] % 2 == 0


def fan(n: int) -> list[tuple[int, int]]:
    """The items a record fans out to: ``(value, hops)``."""
    return [(v, 0) for v in range(n)]


def fanout_checked(released: list[str], size: int) -> bool:
    """One tuple per item ends at each item and its hop, and nothing else is released."""
    ends = sorted(tuple(int(x) for x in value.rsplit(",", 1)[-1].split(".")) for value in released)
    return ends == sorted([(v, h) for v in range(size) for h in (0, 1)])


def reference_components(size: int, seed: int) -> dict[str, Any]:
    """Components on the reference runtime, each edge to quiescence; checked by union-find."""
    lines = random_edges(size, seed)
    began = time.perf_counter()
    result = run_in_order(components(), {0: [(t + 1, line) for t, line in enumerate(lines)]})
    seconds = time.perf_counter() - began
    delivered = result.stats.delivered
    return {
        "seconds": round(seconds, 3),
        "rows": size,
        "us_per_row": round(1e6 * seconds / size, 2),
        "deliveries": delivered,
        "us_per_delivery": round(1e6 * seconds / delivered, 2),
        "checked": labels(result.payloads()) == union_find(lines),
    }


def reference_fanout(size: int) -> dict[str, Any]:
    """The fanout record on the reference runtime; its released rows counted."""
    began = time.perf_counter()
    result = run_in_order(fanout(), {0: [(1, str(size))]})
    seconds = time.perf_counter() - began
    released = result.payloads()
    stats = result.stats
    return {
        "seconds": round(seconds, 3),
        "rows": size,
        "us_per_row": round(1e6 * seconds / size, 2),
        "released": len(released),
        "replayed": stats.replayed,
        "invalidated": stats.invalidated,
        "checked": fanout_checked(released, size),
    }


def spark_run(
    spark: Any, flow: Dataflow, lines: list[str], batch: int, partitions: int, work: Path
) -> tuple[float, list[str]]:
    """Seconds to run ``flow`` over ``lines``, and the released values in release order.

    The lines are one file of a files front, read ``batch`` a micro-batch (AvailableNow),
    its reader given to ``write_stream`` as the README shows (so the front waits for a busy
    loop); ``partitions`` 0: the graph's default.
    """
    from flamestream.spark import SparkGraph

    source, out, checkpoint = work / "in", work / "out", work / "ck"
    source.mkdir(parents=True)
    (source / "lines.txt").write_text("".join(f"{line}\n" for line in lines))
    began = time.perf_counter()
    reader = (
        spark.readStream.format("flamestream")
        .option("front", "files")
        .option("path", str(source))
        .option("maxRecordsPerTrigger", batch)
        .option("clock", "logical")
    )
    graph = SparkGraph(flow, partitions=partitions or None)
    query = (
        graph.write_stream(reader, checkpoint_location=str(checkpoint))
        .option("sink", "files")
        .option("path", str(out))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds = time.perf_counter() - began
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    values = [
        json.loads(line)["value"]
        for part in sorted(out.glob("part-*.jsonl"))
        for line in part.read_text().splitlines()
    ]
    return seconds, values


def spark_case(
    spark: Any, part: str, size: int, args: argparse.Namespace, work: Path
) -> dict[str, Any]:
    """One workload at one size on Spark, checked."""
    if part == "components":
        lines = random_edges(size, args.seed)
        seconds, values = spark_run(spark, components(), lines, args.batch, args.partitions, work)
        checked = labels(values) == union_find(lines)
    else:
        seconds, values = spark_run(spark, fanout(), [str(size)], 1, args.fanout_partitions, work)
        checked = fanout_checked(values, size)
    markers = sorted((work / "ck" / "flamestream-sink" / "commits").glob("*.json"))
    return {
        "seconds": round(seconds, 3),
        "rows": size,
        "us_per_row": round(1e6 * seconds / size, 2),
        "released": len(values),
        "batches": len(markers),
        # rows the sink's commits dropped: invalidated versions and tombstones (the barrier's
        # invalidation check had work to do)
        "dropped": sum(json.loads(m.read_text()).get("dropped", 0) for m in markers),
        "checked": checked,
    }


def failing_or(case: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    """``case(*args)``, or what it raised: one failing size does not lose the others' figures."""
    try:
        return case(*args)
    except Exception as exc:  # the report says what failed (the work dir stays to look into)
        return {"error": f"{type(exc).__name__}: {str(exc)[:2000]}"}


def growth(cases: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Time per row at the largest size over the smallest's, beside log2 of the size ratio."""
    sizes = sorted((size for size in cases if "error" not in cases[size]), key=int)
    if len(sizes) < 2:
        return {}
    small, large = cases[sizes[0]], cases[sizes[-1]]
    ratio = large["us_per_row"] / small["us_per_row"] if small["us_per_row"] else None
    return {
        "per_row_ratio": None if ratio is None else round(ratio, 2),
        "log2_size_ratio": round(math.log2(int(sizes[-1]) / int(sizes[0])), 2),
    }


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Every workload, runtime and size the flags ask for."""
    results: dict[str, Any] = {}
    sizes = {"components": args.components_sizes, "fanout": args.fanout_sizes}
    for part in args.parts:
        for runtime in args.runtimes:
            cases: dict[str, dict[str, Any]] = {}
            if runtime == "reference":
                for size in sizes[part]:
                    ran = (
                        reference_components(size, args.seed)
                        if part == "components"
                        else reference_fanout(size)
                    )
                    cases[str(size)] = ran
            else:
                with spark_session(f"cycles-{part}") as spark:
                    # untimed: the first query pays the JVM's and the Python workers' start
                    cli.Workdir.drop(warm := work / f"{part}-warmup")
                    spark_case(spark, part, sizes[part][0], args, warm)
                    for size in sizes[part]:
                        place = work / f"{part}-{size}"
                        cli.Workdir.drop(place)  # a reused --work may hold an earlier run
                        cases[str(size)] = failing_or(spark_case, spark, part, size, args, place)
            results[f"{part}/{runtime}"] = {"sizes": cases, "growth": growth(cases)}
    return results


def main(argv: list[str] | None = None) -> int:
    """Run and print the JSON report."""
    args = arguments(argv)
    record = Record(library=True)
    work = cli.Workdir(args.work, "flamestream-cycles-")
    report: dict[str, Any] = {"benchmark": "cycles_scale"}
    try:
        report["results"] = run(args, work.path)
    except Exception as exc:  # the report says what failed, the work dir stays to look into
        report["error"] = f"{type(exc).__name__}: {exc}"
    report["machine"] = record.machine("local[2]" if "spark" in args.runtimes else None)
    report["seconds"] = record.seconds()
    return emit(report, work)


if __name__ == "__main__":
    raise SystemExit(main())
