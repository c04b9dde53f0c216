"""The S3 test server and the settings it hands out, without Spark.

A fresh process that has only :meth:`SeaweedFS.environment` reaches the bucket through both
``s3://`` and ``s3a://`` (fsspec maps both to s3fs), as the source runners, commit workers
and executors Spark starts do; S3A's jars match pyspark's Hadoop.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import fsspec
import pytest
import s3fs

from flamestream.testing.seaweedfs import (
    HADOOP_VERSION,
    SeaweedFS,
    SeaweedFSError,
    pyspark_hadoop_version,
)

from .helpers import BucketRun

CHILD = """
import fsspec
fs, root = fsspec.core.url_to_fs("s3a://{bucket}/from-child")
fs.pipe(root + "/a", b"written through s3a")
other, _ = fsspec.core.url_to_fs("s3://{bucket}")
print(type(fs).__name__, type(other).__name__, other.cat("{bucket}/from-test").decode())
"""


def test_a_process_with_only_the_environment_reaches_the_bucket_by_s3_and_s3a(
    seaweedfs: SeaweedFS, run: BucketRun
):
    run.fs.pipe(f"{run.bucket}/from-test", b"hello")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FSSPEC_"))}
    env.update(seaweedfs.environment())
    done = subprocess.run(
        [sys.executable, "-c", CHILD.format(bucket=run.bucket)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["S3FileSystem", "S3FileSystem", "hello"]
    assert run.fs.cat(f"{run.bucket}/from-child/a") == b"written through s3a"


def test_only_the_configured_identity_gets_in(seaweedfs: SeaweedFS, run: BucketRun):
    options = seaweedfs.storage_options()
    wrong = s3fs.S3FileSystem(skip_instance_cache=True, **{**options, "secret": "wrong"})
    with pytest.raises(PermissionError):
        wrong.ls(run.bucket)
    right, root = fsspec.core.url_to_fs(f"s3://{run.bucket}", skip_instance_cache=True, **options)
    assert right.ls(root) == []


def test_s3a_jars_match_the_hadoop_inside_pyspark(seaweedfs: SeaweedFS):
    assert pyspark_hadoop_version() == HADOOP_VERSION
    conf = seaweedfs.spark_conf()
    jars = [Path(jar) for jar in conf["spark.jars"].split(",")]
    names = {jar.name for jar in jars}
    assert f"hadoop-aws-{HADOOP_VERSION}.jar" in names
    assert any(name.startswith("bundle-") for name in names)  # the AWS SDK v2
    assert all(jar.is_file() for jar in jars)
    assert conf["spark.hadoop.fs.s3a.endpoint"] == seaweedfs.endpoint_url
    for name, value in seaweedfs.environment().items():
        assert conf[f"spark.executorEnv.{name}"] == value


def test_request_counts_count_requests(seaweedfs: SeaweedFS, run: BucketRun):
    before = seaweedfs.request_counts()
    run.fs.pipe(f"{run.bucket}/counted", b"x")
    after = seaweedfs.request_counts()
    assert after.get("PUT", 0) >= before.get("PUT", 0) + 1


def test_stop_ends_the_server_and_removes_its_files():
    server = SeaweedFS().start()
    port = int(server.endpoint_url.rsplit(":", 1)[1])
    workdir = server.log_path.parent
    assert workdir.is_dir()
    server.stop()
    assert not server.running
    assert not workdir.exists()
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        pass
    with pytest.raises(SeaweedFSError):
        _ = server.endpoint_url
    server.stop()  # twice is fine


def test_stop_leaves_nothing_in_the_temporary_directory(monkeypatch: pytest.MonkeyPatch):
    """weed's own log files (and their ``weed.INFO`` links) go in its work folder, not $TMPDIR.

    $TMPDIR is a fresh folder in the system's, not ``tmp_path``: weed's unix sockets go in its
    work folder, and a socket's path has at most 107 bytes, which ``tmp_path`` in an xdist
    worker (``…/popen-gw1/<test name>``) leaves too few of.
    """
    folder = Path(tempfile.mkdtemp(prefix="fs-tmp-"))
    monkeypatch.setenv("TMPDIR", str(folder))  # where weed's logger writes by default
    monkeypatch.setattr(tempfile, "tempdir", str(folder))  # where the work folder goes
    try:
        server = SeaweedFS().start()
        try:
            workdir = server.log_path.parent
            assert workdir.parent == folder
            server.filesystem().ls("")  # it serves, so it has logged
            logs = sorted(p.name for p in workdir.glob("logs/*"))
        finally:
            server.stop()
        assert sorted(p.name for p in folder.iterdir()) == []
        assert "weed.INFO" in logs  # the logs were there, only in the work folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
