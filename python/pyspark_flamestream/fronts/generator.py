"""The ``generator`` front: deterministic synthetic records for demos and benchmarks.

Record ``i`` of partition ``p`` is a pure function of ``(seed, p, i)``: a key drawn from
``keys`` keys with Zipf skew ``keySkew`` (0 = uniform) and a payload of ``payloadBytes``
characters. Each partition is a front; ``rowsPerSecond`` (over all partitions) says how many
records become available per second since the query first started, up to ``totalRows``.

Options: ``rowsPerSecond`` (1000), ``totalRows`` (unbounded), ``partitions`` (2), ``keys``
(100), ``keySkew`` (0.0), ``payloadBytes`` (16), ``seed`` (0), plus the common front options.
"""

from __future__ import annotations

import bisect
import hashlib
import time
from collections.abc import Iterator, Mapping
from itertools import accumulate

import pyarrow as pa

from flamestream.spark.config import OptionReader
from flamestream.spark.front import FrontRange, FrontSource

#: Records per Arrow batch produced by ``read``.
CHUNK = 8192


class GeneratorSource(FrontSource):
    """Synthetic, replayable records."""

    kind = "generator"

    def __init__(self, options: OptionReader) -> None:
        self.rows_per_second = options.number("rowsPerSecond", 1000.0, minimum=0.0)
        self.total_rows = options.optional_integer("totalRows", minimum=0)
        self.partitions = options.integer("partitions", 2, minimum=1)
        self.keys = options.integer("keys", 100, minimum=1)
        self.skew = options.number("keySkew", 0.0, minimum=0.0)
        self.payload_bytes = options.integer("payloadBytes", 16, minimum=0)
        self.seed = options.integer("seed", 0)
        weights = [1.0 / (rank**self.skew) for rank in range(1, self.keys + 1)]
        total = sum(weights)
        self._cdf = [w / total for w in accumulate(weights)]
        self._started_ns: int | None = None  # driver side: when the rate's clock started
        self._resumed = False  # driver side: whether the clock was set back for a restart

    def payload_fields(self) -> list[pa.Field]:
        """A key and a value, both strings."""
        return [pa.field("key", pa.string()), pa.field("value", pa.string())]

    def _key(self, partition: int) -> str:
        return f"generator-{partition}"

    def discover(self, known: Mapping[str, int]) -> dict[str, int]:
        """Every partition, with how many of its records exist by now."""
        now = time.time_ns()
        if self._started_ns is None:
            self._started_ns = now
        if known and not self._resumed and self.rows_per_second:
            # A restart from a checkpoint resumes the rate where the offsets left off, instead
            # of producing nothing new for as long as the earlier run had been running.
            self._resumed = True
            behind = max(known.values()) * self.partitions / self.rows_per_second
            self._started_ns = min(self._started_ns, now - int(behind * 1e9))
        elapsed = (now - self._started_ns) / 1e9
        per_partition = int(self.rows_per_second * elapsed / self.partitions)
        out = {}
        for p in range(self.partitions):
            reached = max(per_partition, known.get(self._key(p), 0))
            if self.total_rows is not None:
                share = self.total_rows // self.partitions + (p < self.total_rows % self.partitions)
                reached = min(reached, share) if self.rows_per_second else share
            out[self._key(p)] = reached
        return out

    def read_range(self, part: FrontRange) -> Iterator[pa.RecordBatch]:
        """Records ``start .. end - 1`` of the partition."""
        partition = int(part.key.rsplit("-", 1)[1])
        for first in range(part.start, part.end, CHUNK):
            indexes = range(first, min(part.end, first + CHUNK))
            keys, values = [], []
            for i in indexes:
                digest = hashlib.blake2b(f"{self.seed}/{partition}/{i}".encode(), digest_size=8)
                draw = int.from_bytes(digest.digest(), "little") / 2**64
                keys.append(f"k{bisect.bisect_left(self._cdf, draw)}")
                repeated = digest.hexdigest() * (self.payload_bytes // 16 + 1)
                values.append(repeated[: self.payload_bytes])
            yield pa.RecordBatch.from_pydict(
                {"position": pa.array(indexes, pa.int64()), "key": keys, "value": values}
            )

    def __getstate__(self) -> dict[str, object]:
        return dict(self.__dict__)
