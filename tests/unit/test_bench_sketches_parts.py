"""bench-sketches' parts without Spark: the input, its truth, the graphs, the errors, the ratios.

The graphs the Spark variants run are run by the reference runtime over a small input: the
exact ones must release the truth, the sketches' last values must be within their errors.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks import sketches
from benchmarks.lib import cli
from benchmarks.lib import keyed_events as ke
from benchmarks.lib import sketch_variants as sv

from flamestream.testing import run_in_order


def test_the_files_hold_the_generated_events_a_batch_a_file_and_are_reused(
    tmp_path: Path,
) -> None:
    made = ke.write(tmp_path, 2_500, 30, 1_000, 1_000)
    assert ke.write(tmp_path, 2_500, 30, 1_000, 1_000) == made  # from its manifest
    parts = sorted(made.path.glob("*.jsonl"))
    assert (
        [len(p.read_text().splitlines()) for p in parts]
        == [1_000, 1_000, 500]
        == [min(1_000, 2_500 - i * 1_000) for i in range(made.files)]
    )
    lines = [text for p in parts for text in p.read_text().splitlines()]
    assert [sv.parse(text) for text in lines] == list(ke.generate(2_500, 30, 1_000))
    assert made.bytes == sum(p.stat().st_size for p in parts)


def test_users_are_zipf_like_per_key_and_the_truth_counts_them() -> None:
    events = list(ke.generate(20_000, 4, 10_000))
    found = ke.truth(ke.KeyedEvents("", 20_000, 4, 10_000, 20_000, ke.SEED, 0), 2)
    for key in range(4):
        users = [u for k, u, _ in events if k == key]
        assert found.distinct[key] == len(set(users))
        assert len(set(users)) < len(users) / 2  # heavy repeats: the low ranks
    assert sorted(found.values) == [0, 1]
    assert list(found.values[1]) == sorted(ms for k, _, ms in events if k % 2)


def test_quantiles_are_inclusive_and_rank_errors_allow_ties() -> None:
    ordered = array("d", [1.0, 2.0, 2.0, 2.0, 5.0])
    assert [ke.quantile(ordered, r) for r in (0.0, 0.2, 0.21, 0.8, 0.81, 1.0)] == [
        1.0,
        1.0,
        2.0,
        2.0,
        5.0,
        5.0,
    ]
    assert ke.rank_error(ordered, 2.0, 0.5) == 0.0  # ranks 0.2-0.8: a tie covers 0.5
    assert round(ke.rank_error(ordered, 2.0, 0.99), 3) == 0.19
    assert round(ke.rank_error(ordered, 1.0, 0.6), 3) == 0.4


def last_values(build: Callable[[Any, Any], Any], events: list[str]) -> dict[int, list[float]]:
    """Per key the last released row's values, by the reference runtime."""
    flow = sv.graph("t", build)
    found: dict[int, list[float]] = {}
    for item in run_in_order(flow, events).released():
        key, *values = item.payload.split(",")
        found[int(key)] = [float(v) for v in values]
    return found


def test_the_graphs_release_the_truth_or_estimates_within_their_errors() -> None:
    made = ke.KeyedEvents("", 1_200, 3, 2_000, 1_200, ke.SEED, 0)
    events = [ke.line(*e) for e in ke.generate(1_200, 3, 2_000)]
    truth = ke.truth(made, 2)
    exact = {k: (v[0],) for k, v in last_values(sv.exact_set, events).items()}
    assert (
        sketches.distinct_errors("flamestream_exact_set", exact, truth)["relative_error_max"] == 0
    )
    hll = {k: (v[0],) for k, v in last_values(sv.hll, events).items()}
    assert sketches.distinct_errors("flamestream_hll", hll, truth)["relative_error_max"] < 0.05
    ordered = last_values(partial(sv.exact_sorted, 2), events)
    found = sketches.p99_errors(
        "flamestream_exact_sorted", {k: tuple(v) for k, v in ordered.items()}, truth
    )
    assert found["rank_error_max"] == 0
    kll = last_values(partial(sv.kll, 2), events)  # 600 values a key: compacted (k 200)
    found = sketches.p99_errors("flamestream_kll", {k: tuple(v) for k, v in kll.items()}, truth)
    assert 0 < found["rank_error_max"] <= found["rank_error_stated_max"]
    wrong = {k: (v[0] + 1,) for k, v in exact.items()}
    assert "error" in sketches.distinct_errors("flamestream_exact_set", wrong, truth)


def test_the_ratios_divide_medians_and_say_which_targets_are_met() -> None:
    def run(variant: str, rate: int, state: float) -> dict[str, object]:
        return {
            "variant": variant,
            "events_per_second": rate,
            "steady_events_per_second": rate,
            "state_bytes_per_key": state,
            "peak_worker_mb": 1.0,
        }

    runs = [
        run("flamestream_hll", 100, 10.0),
        run("flamestream_hll", 300, 30.0),
        run("flamestream_exact_set", 50, 400.0),
        run("spark_approx_count_distinct", 250, 90.0),
        run("spark_hll_sketch", 100, 80.0) | {"error": "wrong"},
    ]
    found = sketches.summarize(runs)
    assert found["ratios"]["state_exact_over_sketch"] == 20.0
    assert found["ratios"]["throughput_hll_over_spark_approx"] == 0.8
    assert found["ratios"]["throughput_hll_over_spark_hll_sketch"] is None
    assert found["targets_met"] == {
        "state_exact_over_sketch": True,
        "throughput_hll_over_spark_approx": False,
    }


def test_a_failed_run_is_reported_and_left_out_of_the_medians(tmp_path: Path) -> None:
    made = ke.write(tmp_path, 100, 3, 100, 100)
    args = sketches.arguments(["--events", "100", "--work", str(tmp_path)])
    work = cli.Workdir(tmp_path, "unused")
    given = made, ke.truth(made, args.quantile_keys)
    found = sketches.measured(None, "distinct", "flamestream_hll", given, args, work)
    assert found["variant"] == "flamestream_hll"
    assert found["failed"].startswith("AttributeError")
    summary = sketches.summarize([found])
    assert summary["failed"] == ["flamestream_hll"]
    assert summary["medians"] == {"flamestream_hll": {}}
