"""``sink=delta`` with the table on S3 (SeaweedFS): every released row in it exactly once.

The child (:mod:`tests.s3.delta_s3_job`) runs the word count with its input, Spark's
checkpoint and the Delta table on S3, is SIGKILLed between a batch's Delta commit and the
sink's marker, and restarts: the replayed commit must find its application transaction in
the table on S3 and append nothing. delta-rs creates each log entry with a conditional PUT
(``If-None-Match: *``); that the store refuses a second one is what makes a lost commit
impossible without a locking provider, so it is checked too. A writer killed after it wrote
data objects, before its commit, leaves objects no version names: ``clean_up`` removes
exactly those, through s3fs.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from fsspec.asyn import sync
from pyspark.sql import SparkSession

from flamestream.testing.seaweedfs import SeaweedFS
from pyspark_flamestream.sinks.delta import clean_up

from ..crash import reachable_in_turn, run_chain
from ..spark.test_delta_sink import reference
from ..unit.test_delta_checks import killed_writer
from .helpers import BucketRun, make_graph_input, upload

JOB = "tests.s3.delta_s3_job"

#: After batch 1's Delta commit, before its marker: the restart replays that commit.
CRASHES = ["sink.commit.released:1"]


def store(s3: SeaweedFS) -> dict[str, str]:
    """delta-rs's storage options for the server (credentials too, for this process)."""
    return {
        "AWS_ENDPOINT_URL": s3.endpoint_url,
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": s3.region,
        "AWS_ACCESS_KEY_ID": s3.access_key,
        "AWS_SECRET_ACCESS_KEY": s3.secret_key,
    }


def test_the_store_refuses_a_second_put_if_absent(run: BucketRun):
    fs = run.fs

    def put() -> None:
        key = "_delta_log/00000000000000000000.json"
        request = {"Bucket": run.bucket, "Key": key, "Body": b"{}", "IfNoneMatch": "*"}
        sync(fs.loop, fs._call_s3, "put_object", **request)

    put()
    with pytest.raises(OSError, match="pre-conditions"):
        put()


def test_killed_word_count_into_a_delta_table_on_s3_releases_every_row_once(
    spark: SparkSession, seaweedfs: SeaweedFS, run: BucketRun, tmp_path: Path
):
    assert reachable_in_turn(CRASHES)
    make_graph_input(tmp_path)
    upload(run.fs, tmp_path, run.bucket)
    table = f"s3://{run.bucket}/table"
    endpoint = {k: v for k, v in store(seaweedfs).items() if k.endswith(("_URL", "_HTTP"))}
    args = [f"s3://{run.bucket}/in", table, f"s3a://{run.bucket}/ck", json.dumps(endpoint)]

    def committed() -> list[int]:
        history = DeltaTable(table, storage_options=store(seaweedfs)).history()
        return [int(commit["flamestream.batch"]) for commit in reversed(history)]

    def after_crash(crash: str) -> None:
        assert committed() == [0, 1], f"after {crash}"

    run_chain(JOB, args, CRASHES, after_crash)
    assert committed() == [0, 1, 2]
    rows = DeltaTable(table, storage_options=store(seaweedfs)).to_pyarrow_table().to_pylist()
    got = Counter((r["ts"], r["front"], r["value"]) for r in rows)
    assert got == reference(spark, tmp_path)
    logs = [p for p in run.objects() if p.startswith("table/_delta_log/")]
    assert sorted(logs) == [f"table/_delta_log/{v:020d}.json" for v in range(3)]
    assert run.leftovers() == []


def test_clean_up_removes_the_objects_of_a_killed_commit_on_s3(
    seaweedfs: SeaweedFS, run: BucketRun
):
    table, options = f"s3://{run.bucket}/table", store(seaweedfs)
    write_deltalake(table, pa.table({"x": pa.array([1, 2], pa.int64())}), storage_options=options)
    killed_writer(table, batches=5, target=1, storage=options)  # each batch an object
    rows = DeltaTable(table, storage_options=options).to_pyarrow_table()
    named = {
        uri.rsplit("/", 1)[1] for uri in DeltaTable(table, storage_options=options).file_uris()
    }
    data = {p.removeprefix("table/") for p in run.objects() if p.endswith(".parquet")}
    left = data - named
    assert left and len(named) == 1
    reach = seaweedfs.storage_options()  # s3fs's (this process read fsspec's settings before)
    assert set(clean_up(table, fsspec_options=reach)) == left
    assert {p.removeprefix("table/") for p in run.objects() if p.endswith(".parquet")} == named
    assert DeltaTable(table, storage_options=options).to_pyarrow_table() == rows
    assert clean_up(table, fsspec_options=reach) == []
