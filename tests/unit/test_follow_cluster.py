"""Following the cluster's cores: the hysteresis and the follower's decisions (no Spark)."""

from __future__ import annotations

import os
from pathlib import Path

from flamestream.jvm import Executors
from flamestream.spark.control.cluster import ClusterFollower, Pending, batch_ms, settle_step
from flamestream.spark.control.key_layout import ElasticPolicy


def test_a_new_count_is_acted_upon_once_it_held_for_settle_batches():
    pending, act = settle_step(None, 2, 1, settle=2)
    assert (pending, act) == (Pending(2, 1), None)
    assert settle_step(pending, 2, 1, settle=2) == (None, 2)


def test_a_flapping_count_starts_again_and_the_current_one_clears_it():
    pending, _ = settle_step(None, 3, 1, settle=2)
    assert settle_step(pending, 2, 1, settle=2) == (Pending(2, 1), None)  # another count
    assert settle_step(pending, 1, 1, settle=2) == (None, None)  # back to the current one
    assert settle_step(None, 2, 1, settle=1) == (None, 2)  # settle=1: at once


def test_the_follower_reads_once_per_committed_batch_and_bounds_by_p(tmp_path: Path):
    readings = [Executors(2, 2), Executors(3, 6), Executors(3, 6)]
    follower = ClusterFollower(4, settle=2, read=lambda: readings.pop(0))
    ck = str(tmp_path)
    assert follower.decide(ck, 0, 1, {}) == (None, "")  # 2 desired, once
    assert follower.decide(ck, 0, 1, {}) == (None, "")  # the same batch: not read again
    assert len(readings) == 2
    active, why = follower.decide(ck, 1, 1, {})  # 6 cores, bounded by P = 4: once
    assert active is None
    active, why = follower.decide(ck, 2, 1, {})
    assert (active, why) == (4, "cluster: 3 executors, 6 cores after batch 2")


def test_without_a_shim_nothing_is_decided(tmp_path: Path):
    follower = ClusterFollower(2, settle=1, read=lambda: None)
    assert follower.decide(str(tmp_path), 0, 1, {}) == (None, "")


def test_the_policy_carries_following_as_channel_options():
    options = ElasticPolicy(follow_cluster=True, settle=3, target_latency_ms=500).options()
    assert options["followCluster"] == "true" and options["settle"] == "3"
    assert options["targetLatencyMs"] == "500"
    assert "followCluster" not in ElasticPolicy().options()


def test_a_batch_lasts_from_its_offset_to_its_commit(tmp_path: Path):
    for folder, written in (("offsets", 1000.0), ("commits", 1002.5)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "3").write_text("v1")
        os.utime(tmp_path / folder / "3", (written, written))
    assert batch_ms(str(tmp_path), 3) == 2500.0
    assert batch_ms(str(tmp_path), 4) is None  # not committed (not even planned)


def test_a_budget_holds_the_count_while_batches_are_well_within_it(tmp_path: Path):
    for folder, written in (("offsets", 1000.0), ("commits", 1000.1)):  # a 100 ms batch
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "0").write_text("v1")
        os.utime(tmp_path / folder / "0", (written, written))
    relaxed = ClusterFollower(4, settle=1, target_ms=1000, read=lambda: Executors(2, 4))
    assert relaxed.decide(str(tmp_path), 0, 1, {}) == (None, "")  # 100 ms <= 500 ms: hold
    pressed = ClusterFollower(4, settle=1, target_ms=150, read=lambda: Executors(2, 4))
    assert pressed.decide(str(tmp_path), 0, 1, {})[0] == 4  # over half the budget: the cores


def test_the_control_channel_takes_a_budgets_latency_as_any_number(tmp_path: Path):
    from flamestream.spark.control.budgeted import BudgetPolicy
    from pyspark_flamestream import FlameStreamDataSource

    options = {
        "channel": "control",
        "path": str(tmp_path),
        "partitions": "4",
        **BudgetPolicy(target_latency_ms=8000.0).options(1),
    }
    control = FlameStreamDataSource(options)._control()
    assert control is not None
    assert options["targetLatencyMs"] == "8000.0"  # what a BudgetPolicy sets
    assert control[2].target_latency_ms == 8000
