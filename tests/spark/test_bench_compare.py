"""bench-compare's general-path rows at a tiny size: each runs, and its check can fail.

The harness runs in the tests' session (``main(..., spark=spark)``, which leaves it running):
the lambdas word count and its Arrow-UDF peer over a small word corpus, the gaps workload's
variants over a small event corpus, every output checked by the harness itself. Then the
checkers are handed wrong outputs and must raise ``MismatchError``.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from benchmarks.compare import harness, spark_gaps, spark_variants
from benchmarks.compare.errors import MismatchError
from pyspark.sql import SparkSession

NEW = (
    "flamestream_every_values",
    "flamestream_lambdas",
    "pyspark_udf",
    "flamestream_gaps",
    "pyspark_gaps_pandas_state",
    "pyspark_gaps_transform_with_state",
)


@pytest.fixture(scope="module")
def ran(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict:
    work = tmp_path_factory.mktemp("bench-compare")
    argv = ["--lines", "300", "--events", "600", "--keys", "12", "--rounds", "1"]
    argv += ["--warmup", "0", "--plot", "", "--work", str(work), "--variants", *NEW]
    status = harness.main(argv, spark=spark)
    found = json.loads((work / "bench-compare.json").read_text())
    found["status"] = status
    return found


def test_the_new_variants_run_and_release_what_their_checks_expect(ran: dict) -> None:
    words, made = ran["input"], ran["events_input"]
    for name in NEW:
        variant = ran["variants"][name]
        assert not variant.get("errors"), (name, variant.get("errors"))
        [run] = variant["runs"]
        # the checks passed; output_rows is what they counted
        if name in harness.GAPS:
            assert run["output_rows"] == made["gaps"] == 600 - made["distinct"]
            assert variant["events_per_second"] > 0
        else:
            assert run["output_rows"] >= words["distinct"]
            assert variant["words_per_second"] > 0
    assert ran["ratios"]["flamestream_lambdas_vs_pyspark_udf"] > 0
    assert ran["ratios"]["flamestream_gaps_vs_pyspark_gaps_pandas_state"] > 0
    assert ran["workloads"]["flamestream_gaps"] == "gaps"


def test_every_variant_ran_without_an_error(ran: dict) -> None:
    """transformWithStateInPandas included: the project installs protobuf, which pyspark's
    state client needs, and its driver worker gets a blocking connection from a warm start."""
    assert ran["errors"] == []
    assert ran["status"] == 0


def _parquet(spark: SparkSession, rows: list[tuple], ddl: str, out: Path) -> Path:
    spark.createDataFrame(rows, ddl).coalesce(1).write.parquet(str(out))
    return out


def test_the_gaps_checks_fail_on_a_wrong_gap(spark: SparkSession, tmp_path: Path) -> None:
    expected = [("a", 5, 3), ("a", 9, 4), ("b", 10, 6)]
    right = _parquet(spark, [("a,5,3",), ("b,10,6",), ("a,9,4",)], "value string", tmp_path / "r")
    assert spark_gaps.check_flamestream(spark, right, expected, "flamestream_gaps") == {
        "output_rows": 3
    }
    wrong = _parquet(spark, [("a,5,3",), ("b,10,6",), ("a,9,5",)], "value string", tmp_path / "w")
    with pytest.raises(MismatchError, match="flamestream_gaps: gaps per key"):
        spark_gaps.check_flamestream(spark, wrong, expected, "flamestream_gaps")
    _parquet(spark, [*expected, expected[0]], spark_gaps.GAP_DDL, tmp_path / "t" / "b=0")
    with pytest.raises(MismatchError, match="1 released more than once"):
        spark_gaps.check_peer(spark, tmp_path / "t", expected, "pyspark_gaps_pandas_state")


def test_the_word_count_checks_fail_on_a_wrong_count(spark: SparkSession, tmp_path: Path) -> None:
    expected = Counter({"x": 2, "y": 1})
    peer = [("x", 1, 0), ("y", 1, 0), ("x", 3, 1)]  # batch 1 says 3 for x
    out = tmp_path / "udf"
    for batch in (0, 1):
        rows = [(w, n) for w, n, b in peer if b == batch]
        _parquet(spark, rows, "word string, count long", out / f"batch={batch}")
    with pytest.raises(MismatchError, match="pyspark_udf: the latest batch's count"):
        spark_variants.check_plain(spark, out, expected, name="pyspark_udf")
    rows = [("x=1",), ("x=2",), ("y=1",), ("y=1",)]  # y's 1 twice
    twice = _parquet(spark, rows, "value string", tmp_path / "f")
    with pytest.raises(MismatchError, match=r"flamestream_lambdas: .* released twice"):
        spark_variants.check_flamestream(
            spark, twice, expected, "latest", name="flamestream_lambdas"
        )
