"""Approximate aggregations on Spark: the reference runtime's rows, sketches Spark SQL reads.

One query runs every approximate aggregation (``distinct_count`` as HLL over text and over
ints, as theta over both; ``quantiles``; ``heavy_hitters``; ``sum_estimates`` over a distinct
count) on two files fronts read at uneven rates, so a key's values arrive out of global-time
order and its sketches are replayed and invalidated. Released with ``render=render_json``,
every column equals the reference runtime's on the global times the fronts stamped: the
sketch bytes too. Then Spark SQL reads those sketches (through ``estimate_columns``): its
estimates and quantiles are ours, and our sketches merge with sketches Spark made itself from
the same raw values as if Spark had made them (same hashing, same format).
"""

from __future__ import annotations

import base64
import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from flamestream import Dataflow
from flamestream.approx import render_json
from flamestream.approx.folds import QuantileFold, datasketches
from flamestream.errors import ConfigError
from flamestream.graph.approximate import (
    distinct_count,
    heavy_hitters,
    quantiles,
    sum_estimates,
)
from flamestream.spark import SparkGraph, apply_graph, estimate_columns
from flamestream.spark.exec.general.items import encode_trace
from flamestream.testing import run_in_order

from .conftest import files_front, released, run_to_files, run_writer, write_lines

#: Read limits of the two fronts (one source each): uneven, so the second front's lines reach
#: a key before the first's earlier ones (two batches: few, as each costs seconds here).
LIMITS = (3, 6)
PAGES = ("home", "cart")
#: The quantiles' ranks: constants, as ``kll_sketch_get_quantile_double`` needs its rank.
RANKS = (0.1, 0.5, 0.9)
#: HLL sizes: 12 (Spark's default, list/set mode here) and 4 (16 registers: HLL mode).
USERS_LG_K, IDS_LG_K = 12, 4
THETA_LG_K = 5


def text(front: int) -> list[str]:
    """Six lines of 1-3 visits ``page:user:ms`` (users u1-u12, so keys repeat values)."""
    rng = random.Random(2000 + front)
    return [
        " ".join(
            f"{rng.choice(PAGES)}:u{rng.randint(1, 12)}:{rng.randint(1, 99)}"
            for _ in range(rng.randint(1, 3))
        )
        for _ in range(6)
    ]


def visits(line: str) -> list[tuple[str, str, int, int]]:
    """A line's visits: ``(page, user, user id, ms)``."""
    out = []
    for visit in line.split():
        page, user, ms = visit.split(":")
        out.append((page, user, int(user[1:]), int(ms)))
    return out


def page(visit: tuple[str, str, int, int]) -> str:
    return visit[0]


def approximate_flow() -> Dataflow:
    """Every approximate aggregation per page, and the lines themselves (their global times)."""
    flow = Dataflow("approximate")
    lines, shown = flow.broadcast("fork", flow.source("text"), 2)
    flow.sink("lines", shown)
    parsed = flow.flat_map("parse", lines, visits)
    users_in, ids_in, reach_in, seen_in, ms_in, hot_in = flow.broadcast("copy", parsed, 6)
    users = distinct_count(flow, "users", users_in, key=page, value=lambda v: v[1])
    users_out, users_summed = flow.broadcast("users-copy", users, 2)
    flow.sink("users", users_out)
    flow.sink("all-users", sum_estimates(flow, "all-users", users_summed))
    ids = distinct_count(flow, "ids", ids_in, key=page, value=lambda v: v[2], lg_k=IDS_LG_K)
    flow.sink("ids", ids)
    reach = distinct_count(
        flow, "reach", reach_in, key=page, value=lambda v: v[1], sketch="theta", lg_k=THETA_LG_K
    )
    flow.sink("reach", reach)
    seen = distinct_count(
        flow, "seen", seen_in, key=page, value=lambda v: v[2], sketch="theta", lg_k=THETA_LG_K
    )
    flow.sink("seen", seen)
    ms = quantiles(flow, "latency", ms_in, ranks=RANKS, key=page, value=lambda v: v[3], k=8)
    flow.sink("latency", ms)
    flow.sink("hot", heavy_hitters(flow, "hot", hot_in, key=page, value=lambda v: v[1], lg_max_k=3))
    return flow


#: The approximate aggregations' steps, and their sinks (same names).
APPROXIMATE = ("users", "all-users", "ids", "reach", "seen", "latency", "hot")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One file per front, padded to one size: each source, finished, reports that size."""
    folder = tmp_path_factory.mktemp("approximate")
    texts = [text(front) for front in range(len(LIMITS))]
    size = max(sum(len(line) + 1 for line in lines) for lines in texts)
    for front, lines in enumerate(texts):
        # every line starts below every file's end: the sink releases them all at the end
        lines[-1] += " " * (size - sum(len(line) + 1 for line in lines))
        write_lines(folder / f"f{front}" / "lines.txt", lines)
    return folder


def readers(spark: SparkSession, folder: Path) -> list[Any]:
    return [
        spark.readStream.format("flamestream")
        .option("front", "files")
        .option("path", str(folder / f"f{number}"))
        .option("clock", "logical")
        .option("frontIdBase", 10 * number)
        .option("maxRecordsPerTrigger", limit)
        for number, limit in enumerate(LIMITS)
    ]


@pytest.fixture(scope="module")
def streamed(
    spark: SparkSession, inputs: Path, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, int]:
    """The query's output folder and how many invalidated versions its barrier dropped."""
    work = tmp_path_factory.mktemp("approximate-run")
    graph = SparkGraph(approximate_flow(), partitions=2, render=render_json)
    writer = graph.write_stream(readers(spark, inputs), checkpoint_location=str(work / "ck"))
    run_writer(writer, work / "out")
    markers = (work / "ck" / "flamestream-sink" / "commits").glob("*.json")
    dropped = sum(json.loads(marker.read_text()).get("dropped", 0) for marker in markers)
    return work / "out", dropped


#: The released columns compared: every one the files sink writes but ``sink``.
COMPARED = ("ts", "front", "trace", "flags", "source", "position", "value")


def reference(flow: Dataflow, lines: list[dict[str, Any]]) -> dict[str, list[tuple[Any, ...]]]:
    """Each sink's rows by the reference runtime on the global times the fronts stamped."""
    per_front: dict[int, list[tuple[int, Any]]] = {}
    where: dict[tuple[int, int], tuple[str, int]] = {}
    for row in sorted(lines, key=lambda r: (r["front"], r["ts"])):
        per_front.setdefault(row["front"], []).append((row["ts"], row["value"]))
        where[row["ts"], row["front"]] = (row["source"], row["position"])
    result = run_in_order(flow, per_front)
    return {
        sink: [
            (t.ts, t.front, encode_trace(trace).hex(), 0, *where[t], render_json(payload))
            for t, trace, payload in result.rows(sink)
        ]
        for sink in flow.build().sinks
    }


def test_released_rows_are_the_reference_runtimes_byte_for_byte(streamed: tuple[Path, int]):
    out, dropped = streamed
    rows = released(out)
    lines = [r for r in rows if r["sink"] == "lines"]
    assert len(lines) == 6 * len(LIMITS)
    want = reference(approximate_flow(), lines)
    for sink, expected in want.items():
        got = [tuple(r[c] for c in COMPARED) for r in rows if r["sink"] == sink]
        assert got == expected, sink
    # late items came: the barrier dropped versions of estimates that replays replaced
    assert dropped > 0
    parsed = [(r["sink"], json.loads(r["value"])) for r in rows if r["sink"] in APPROXIMATE]
    kinds = {value["kind"] for _, value in parsed}
    assert kinds == {"hll", "theta", "kll", "frequent_items", "sum"}
    # the small sketches left exact mode: estimates with real bounds, compacted KLLs, purges
    assert any(v["lower"] < v["upper"] for sink, v in parsed if sink == "ids")
    assert any(v["approximate"] and v["rank_error"] > 0 for sink, v in parsed if sink == "latency")
    assert any(v["max_error"] > 0 for sink, v in parsed if sink == "hot")


@pytest.fixture(scope="module")
def rows(spark: SparkSession, streamed: tuple[Path, int]) -> DataFrame:
    """The released rows as the files sink wrote them, read by Spark."""
    out, _ = streamed
    return spark.read.json(str(out / "part-*.jsonl"))


@pytest.fixture(scope="module")
def estimates(rows: DataFrame) -> DataFrame:
    """The released rows, parsed."""
    return estimate_columns(rows)


def expected_columns(value: str) -> dict[str, Any]:
    """What ``estimate_columns`` makes of one released row's text, by Python's json."""
    fields = json.loads(value)
    if "sketch" in fields:
        fields["sketch"] = base64.b64decode(fields["sketch"])
    return fields


def test_estimate_columns_parses_every_kind(estimates: DataFrame, streamed: tuple[Path, int]):
    """Every field of every released row, typed: what Python's json reads from the text."""
    out, _ = streamed
    texts = {(r["sink"], r["ts"], r["front"], r["trace"]): r["value"] for r in released(out)}
    rows = estimates.where(F.col("sink") != "lines").collect()
    assert len(rows) == len(texts) - 6 * len(LIMITS)
    for row in rows:
        got = row.asDict(recursive=True)
        want = expected_columns(texts[got["sink"], got["ts"], got["front"], got["trace"]])
        if isinstance(got["sketch"], bytearray):
            got["sketch"] = bytes(got["sketch"])
        assert {name: got[name] for name in want} == want, got["sink"]
        assert all(got[name] is None for name in set(got) - set(want) - set(COMPARED) - {"sink"})
    lines = estimates.where(F.col("sink") == "lines").select("kind", "sketch").collect()
    assert lines and all(r.kind is None and r.sketch is None for r in lines)
    types = dict(estimates.dtypes)
    assert types["sketch"] == "binary" and types["n"] == "bigint"
    assert types["values_lower"] == "array<double>" and types["lower"] == "double"
    assert types["items"] == "array<struct<item:string,estimate:bigint,lower:bigint,upper:bigint>>"


def test_estimate_columns_parses_apply_output(spark: SparkSession, inputs: Path):
    """``apply()`` on a bounded read of a front: its value column parsed where it is made."""
    flow = Dataflow("bounded")
    parsed = flow.flat_map("parse", flow.source("text"), visits)
    seen = distinct_count(flow, "seen", parsed, key=page, value=lambda v: v[2], sketch="theta")
    flow.sink("out", seen)
    front = (
        spark.read.format("flamestream")
        .option("front", "files")
        .option("path", str(inputs / "f0"))
        .option("clock", "logical")
        .load()
    )
    records = [(row.ts, row.value) for row in front.select("ts", "value").collect()]
    out = estimate_columns(SparkGraph(flow, partitions=1, render=render_json).apply(front))
    spark_estimate = F.theta_sketch_estimate("sketch").alias("spark")
    got = out.select("ts", "trace", "key", "estimate", spark_estimate).collect()
    want = run_in_order(flow, {0: sorted(records)}).rows("out")
    assert sorted((r.ts, bytes(r.trace).hex(), r.key, r.estimate) for r in got) == sorted(
        (t.ts, encode_trace(trace).hex(), p.key, p.value.estimate) for t, trace, p in want
    )
    assert all(r.spark == java_round(r.estimate) for r in got)


def test_estimate_columns_names_a_missing_or_clashing_column(spark: SparkSession):
    df = spark.createDataFrame([("{}", "x")], "text string, kind string")
    with pytest.raises(ConfigError, match=r"estimate_columns: option 'column' = 'value'"):
        estimate_columns(df)
    with pytest.raises(ConfigError, match=r"rename \['kind'\]"):
        estimate_columns(df, "text")


def java_round(estimate: float) -> int:
    """``Math.round``, as ``hll_sketch_estimate`` and ``theta_sketch_estimate`` round."""
    return math.floor(estimate + 0.5)


def test_spark_estimates_our_distinct_count_sketches_as_we_do(estimates: DataFrame):
    read = {"hll": F.hll_sketch_estimate("sketch"), "theta": F.theta_sketch_estimate("sketch")}
    approximate = 0
    for kind, function in read.items():
        rows = estimates.where(F.col("kind") == kind)
        pairs = rows.select("sink", "estimate", "approximate", function.alias("spark")).collect()
        assert pairs
        for row in pairs:
            assert row.spark == java_round(row.estimate), (kind, row)
        approximate += sum(row.estimate != round(row.estimate) for row in pairs)
    assert approximate  # some estimates were not counts: HLL mode's


def test_spark_reads_our_quantiles_inclusive(estimates: DataFrame):
    ranks = F.array(*(F.lit(rank) for rank in RANKS))
    rows = (
        estimates.where(F.col("kind") == "kll")
        .select(
            "values",
            "n",
            "approximate",
            F.kll_sketch_get_quantile_double("sketch", ranks).alias("spark"),
            F.kll_sketch_get_n_double("sketch").alias("spark_n"),
        )
        .collect()
    )
    assert rows and any(row.approximate for row in rows)
    for row in rows:
        assert row.spark == row["values"], row
        assert row.spark_n == row.n


def raw_visits(rows: DataFrame) -> DataFrame:
    """The visits the fronts admitted, parsed by Spark SQL from the lines sink's rows."""
    visit = F.explode(F.split(F.trim("value"), " +")).alias("visit")
    parts = F.split("visit", ":")
    return (
        rows.where(F.col("sink") == "lines")
        .select(visit)
        .where(F.col("visit") != "")
        .select(parts[1].alias("user"), F.substring(parts[1], 2, 9).alias("id"))
    )


#: Per sink: the raw values' column as Spark types it, the sketch size and kind.
MERGES = {
    "users": ("user", "string", USERS_LG_K, "hll"),
    "ids": ("id", "int", IDS_LG_K, "hll"),
    "reach": ("user", "string", THETA_LG_K, "theta"),
    "seen": ("id", "bigint", THETA_LG_K, "theta"),
}


@pytest.fixture(scope="module")
def sparks_own(rows: DataFrame) -> dict[str, Any]:
    """Per sink, Spark's own sketch over the same raw values, its estimate, and the count of
    distinct values (one job for all)."""
    visits = raw_visits(rows)
    columns = []
    for sink, (column, cast, lg_k, kind) in MERGES.items():
        value = F.col(column).cast(cast)
        if kind == "hll":
            sketch, estimate = F.hll_sketch_agg(value, lg_k), F.hll_sketch_estimate
        else:
            sketch, estimate = F.theta_sketch_agg(value, lg_k), F.theta_sketch_estimate
        columns += [
            sketch.alias(f"{sink}_sketch"),
            estimate(sketch).alias(f"{sink}_estimate"),
            F.count_distinct(value).alias(f"{sink}_distinct"),
        ]
    return visits.agg(*columns).first().asDict()


@pytest.mark.parametrize("sink", list(MERGES))
def test_our_sketches_merge_with_sparks_own(
    spark: SparkSession, estimates: DataFrame, sparks_own: dict[str, Any], sink: str
):
    """Ours (every page's) merged with Spark's over the same values estimate as Spark's alone.

    A value hashed otherwise than Spark hashes it would count twice in the union.
    """
    _, _, lg_k, kind = MERGES[sink]
    ours = estimates.where(F.col("sink") == sink).select(F.lit(True).alias("ours"), "sketch")
    theirs = spark.createDataFrame([(False, sparks_own[f"{sink}_sketch"])], ours.schema)
    merge = {
        "hll": lambda sketch: F.hll_sketch_estimate(F.hll_union_agg(sketch)),
        "theta": lambda sketch: F.theta_sketch_estimate(F.theta_union_agg(sketch, lg_k)),
    }[kind]
    # the union aggregations skip nulls: ours alone, then ours and Spark's
    got = (
        ours.unionByName(theirs)
        .agg(
            merge(F.when(F.col("ours"), F.col("sketch"))).alias("ours"),
            merge(F.col("sketch")).alias("merged"),
        )
        .first()
    )
    alone, distinct = sparks_own[f"{sink}_estimate"], sparks_own[f"{sink}_distinct"]
    assert got.merged == alone == got.ours, (sink, got, alone, distinct)
    if kind == "theta" or lg_k == USERS_LG_K:  # few values: exact (theta) or coupons (HLL)
        assert alone == distinct


def test_spark_reads_kll_quantiles_where_the_cpp_library_differs(spark: SparkSession):
    """Ranks where DataSketches C++ and Java disagree: ``0.55 * 180`` is 99.00000000000001
    (Java rounds it to 99, C++ takes its ceiling, 100), and a compacted sketch whose max
    was dropped (Java puts it back). Our quantiles are Java's, so Spark's."""
    ranks = (0.5, 0.55, 0.9, 1.0)
    wide, narrow = QuantileFold(ranks, k=200), QuantileFold(ranks, k=8)
    exact = wide.initial(1)
    for value in range(2, 181):
        exact = wide.reducer(exact, value)
    compacted = narrow.initial(5)
    for value in (99, 3, 42, 7, 96, 12, 60, 33):
        compacted = narrow.reducer(compacted, value)
    cpp = datasketches().kll_doubles_sketch.deserialize
    assert (exact.values[1], cpp(exact.sketch).get_quantile(0.55, True)) == (99.0, 100.0)
    assert (compacted.values[2], cpp(compacted.sketch).get_quantile(0.9, True)) == (99.0, 96.0)
    at = F.array(*(F.lit(rank) for rank in ranks))
    sketches = spark.createDataFrame(
        [(bytearray(q.sketch),) for q in (exact, compacted)], "sketch binary"
    )
    read = sketches.select(F.kll_sketch_get_quantile_double("sketch", at).alias("q"))
    assert [tuple(row.q) for row in read.collect()] == [exact.values, compacted.values]


def test_describe_names_each_approximate_aggregation():
    described = SparkGraph(approximate_flow()).describe()
    for step in APPROXIMATE:
        assert f"  approximate {step}: " in described, described
    assert "HLL lg_k=4" in described and "theta lg_k=5" in described
    assert "quantiles 0.1, 0.5, 0.9, KLL k=8" in described
    assert "heavy hitters" in described and "sum of the latest estimate" in described


def test_a_dict_value_fails_naming_the_reduce_step_and_determinant(
    spark: SparkSession, tmp_path: Path
):
    write_lines(tmp_path / "in" / "a.txt", ["home:u1:5", "home:u2:7"])  # one key: one task
    flow = Dataflow("bad")
    parsed = flow.flat_map("parse", flow.source("lines"), visits)
    bad = distinct_count(flow, "visitors", parsed, key=page, value=lambda v: {"user": v[1]})
    flow.sink("out", bad)
    df = files_front(spark, tmp_path / "in", clock="logical")
    out = apply_graph(flow, df, checkpoint_location=str(tmp_path / "ck"), render=render_json)
    with pytest.raises(Exception) as caught:
        run_to_files(out, tmp_path / "out", tmp_path / "ck")
    text = str(caught.value)
    assert "StepError: step 'visitors.reduce'" in text, text
    assert "distinct_count hashes int, float or str values, got dict {'user': 'u1'}" in text
    assert "determinant ('a.txt', 0)" in text
    assert released(tmp_path / "out") == []
