"""What the S3 tests share: their inputs, the job's URLs, reading what a run left in a bucket."""

from __future__ import annotations

import json
import posixpath
from typing import Any

from ..spark.test_crash_recovery import make_input as make_files_input
from ..spark.test_graph_crash_recovery import make_input as make_graph_input

JOB = "tests.s3.s3_job"

__all__ = ["JOB", "BucketRun", "make_files_input", "make_graph_input", "upload"]


def upload(fs: Any, local: Any, bucket: str, prefix: str = "in") -> None:
    """Copy every file of the local folder ``local`` to ``<bucket>/<prefix>/``."""
    for path in sorted(local.iterdir()):
        fs.pipe(f"{bucket}/{prefix}/{path.name}", path.read_bytes())


class BucketRun:
    """A crash-test job's input, output and checkpoint in one bucket, and what it left there.

    The input is an ``s3://`` URL (flamestream's front, s3fs); the output and the checkpoint
    are ``s3a://`` (flamestream writes both with s3fs, fsspec maps both schemes to it; Spark
    writes the checkpoint with hadoop-aws, and reads the output through the log of committed
    files the sink keeps, which names them by the output's URL).
    """

    def __init__(self, fs: Any, bucket: str) -> None:
        self.fs = fs
        self.bucket = bucket

    def urls(self) -> list[str]:
        """The input, output and checkpoint URLs, the job's first arguments."""
        b = self.bucket
        return [f"s3://{b}/in", f"s3a://{b}/out", f"s3a://{b}/ck"]

    def outputs(self) -> dict[str, bytes]:
        """Released files by name; the input's URL in each row's source made neutral."""
        self.fs.invalidate_cache()
        here = f"{self.bucket}/in".encode()
        return {
            posixpath.basename(path): self.fs.cat(path).replace(here, b"<work>/in")
            for path in sorted(self.fs.glob(f"{self.bucket}/out/part-*"))
        }

    def logged(self) -> list[str]:
        """The URIs of the files the output's log names, read as Spark's readers read it."""
        self.fs.invalidate_cache()
        folder = f"{self.bucket}/out/_spark_metadata"
        names = [posixpath.basename(p) for p in self.fs.ls(folder, detail=False)]
        batches = sorted(n for n in names if n.split(".")[0].isdigit())
        compactions = [n for n in batches if n.endswith(".compact")]
        start = max(int(n.split(".")[0]) for n in compactions) if compactions else 0
        uris = []
        for name in batches:
            if int(name.split(".")[0]) >= start:
                version, *lines = self.fs.cat(f"{folder}/{name}").decode().split("\n")
                assert version == "v1", (name, version)
                uris += [json.loads(line)["path"] for line in lines if line]
        return sorted(uris)

    def objects(self) -> list[str]:
        """Every object in the bucket, relative to it."""
        self.fs.invalidate_cache()
        found = self.fs.find(self.bucket)
        return sorted(posixpath.relpath(path, self.bucket) for path in found)

    def leftovers(self) -> list[str]:
        """Temporary objects: a ``.tmp`` suffix or a hidden (``.``) name, in output or checkpoint.

        Spark's own checkpoint files aside: ``.<name>.crc`` checksums are none on S3A.
        """
        return [
            path
            for path in self.objects()
            if path.endswith(".tmp") or posixpath.basename(path).startswith(".")
        ]
