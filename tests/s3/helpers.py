"""What the S3 tests share: their inputs, the job's URLs, reading what a run left in a bucket."""

from __future__ import annotations

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

    The input and the output are ``s3://`` URLs (flamestream's front and sink, s3fs); the
    checkpoint is ``s3a://`` (Spark writes it with hadoop-aws, flamestream's stores under it
    with s3fs: fsspec maps both schemes to s3fs).
    """

    def __init__(self, fs: Any, bucket: str) -> None:
        self.fs = fs
        self.bucket = bucket

    def urls(self) -> list[str]:
        """The input, output and checkpoint URLs, the job's first arguments."""
        b = self.bucket
        return [f"s3://{b}/in", f"s3://{b}/out", f"s3a://{b}/ck"]

    def outputs(self) -> dict[str, bytes]:
        """Released files by name; the input's URL in each row's source made neutral."""
        self.fs.invalidate_cache()
        here = f"{self.bucket}/in".encode()
        return {
            posixpath.basename(path): self.fs.cat(path).replace(here, b"<work>/in")
            for path in sorted(self.fs.glob(f"{self.bucket}/out/part-*"))
        }

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
