"""The generator front's rate clock (driver side, no Spark session needed)."""

from __future__ import annotations

import time

from flamestream.spark.connector.options import OptionReader
from pyspark_flamestream.fronts.generator import GeneratorSource


def source(**options: str) -> GeneratorSource:
    return GeneratorSource(OptionReader("front generator", options))


def test_a_restart_resumes_the_rate_where_the_checkpoint_left_off():
    """Positions from an earlier run's offsets: new records follow at once, no stall."""
    restarted = source(rowsPerSecond="1000", partitions="2")
    known = {"generator-0": 50_000, "generator-1": 50_000}  # 100 s of records at 1000/s
    first = restarted.discover(known)
    time.sleep(0.05)
    later = restarted.discover(known)
    assert all(first[k] >= known[k] for k in known)
    assert all(later[k] > known[k] for k in known), "the restarted front stalled"


def test_a_fresh_front_starts_from_nothing_and_follows_the_rate():
    fresh = source(rowsPerSecond="2000", partitions="2")
    assert fresh.discover({}) == {"generator-0": 0, "generator-1": 0}
    time.sleep(0.1)
    grown = fresh.discover({"generator-0": 0, "generator-1": 0})
    assert all(0 < grown[k] < 10_000 for k in grown)  # 1000/s per partition, well under 10 s
