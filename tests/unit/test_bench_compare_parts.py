"""bench-compare's parts without Spark: the gaps corpus, its reference and checks, the report.

What the Spark variants are checked against must itself be right: the reference gaps are
compared with the flamestream gaps graph run by the reference runtime over the same files
(one front per file, a record's time its global time, as ``clock=record`` stamps them).
"""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise
from pathlib import Path

from benchmarks.compare import events, harness, plot, report
from benchmarks.lib.workloads import gaps_graph

from flamestream.testing import run_in_order


def test_the_corpus_is_reused_and_interleaves_each_keys_events_across_files(
    tmp_path: Path,
) -> None:
    made = events.corpus(tmp_path, 3_000, 3, 20)
    assert events.corpus(tmp_path, 3_000, 3, 20) == made  # from its manifest
    parts = sorted(made.path.glob("*.jsonl"))
    assert len(parts) == 3
    files_of: dict[str, set[int]] = defaultdict(set)
    times: list[int] = []
    for index, part in enumerate(parts):
        found = [events.parse(line) for line in part.read_text().splitlines()]
        within = [time for _, time in found]
        assert within == sorted(within) and len(set(within)) == len(within)
        times += within
        for key, _ in found:
            files_of[key].add(index)
    assert len(times) == len(set(times)) == made.events  # no two events share a time
    assert all(len(files) == 3 for files in files_of.values())  # every key in every file
    assert made.distinct == len(files_of) == 20
    assert made.bytes == sum(p.stat().st_size for p in parts)
    times_of: dict[str, list[int]] = defaultdict(list)
    for key, time in events.read(made.path):
        times_of[key].append(time)
    # a key's consecutive events (in time) come from different files (time % 3 is the file)
    for key, keyed in times_of.items():
        files = [time % 3 for time in sorted(keyed)]
        assert sum(a != b for a, b in pairwise(files)) > len(files) // 3, key


def test_the_reference_is_each_keys_time_order_not_the_files_order() -> None:
    found = events.reference_gaps([("a", 9), ("b", 4), ("a", 2), ("a", 5), ("b", 10)])
    assert found == [("a", 5, 3), ("a", 9, 4), ("b", 10, 6)]


def test_the_reference_equals_the_gaps_graph_in_the_reference_runtime(tmp_path: Path) -> None:
    made = events.corpus(tmp_path, 1_200, 3, 15)
    fronts = {
        index: [(events.parse(line)[1], line) for line in part.read_text().splitlines()]
        for index, part in enumerate(sorted(made.path.glob("*.jsonl")))
    }
    released = run_in_order(gaps_graph(), fronts).payloads()
    as_gaps = [(key, int(time), int(gap)) for key, time, gap in (r.split(",") for r in released)]
    expected = events.reference_gaps(events.read(made.path))
    assert events.mismatch(expected, as_gaps) is None
    assert len(expected) == made.gaps == 1_200 - 15


def test_a_missing_wrong_or_repeated_gap_is_a_mismatch() -> None:
    expected = events.reference_gaps([("a", 1), ("a", 4), ("a", 6), ("b", 2), ("b", 3)])
    assert events.mismatch(expected, list(reversed(expected))) is None  # a multiset
    assert "1 missing" in str(events.mismatch(expected, expected[1:]))
    wrong = [("a", 4, 3), ("a", 6, 1), ("b", 3, 1)]
    assert "1 not expected" in str(events.mismatch(expected, wrong))
    assert "1 released more than once" in str(events.mismatch(expected, [*expected, expected[0]]))


def test_ratios_pair_each_new_variant_with_its_peer_and_only_word_counts_with_counter() -> None:
    medians = {
        "flamestream_lambdas": 2.0,
        "pyspark_udf": 3.0,
        "flamestream_latest": 1.0,
        "flamestream_gaps": 1.0,
        "pyspark_gaps_pandas_state": 4.0,
        "pyspark_gaps_transform_with_state": None,
        "counter": 0.5,
    }
    words = [n for n in medians if not n.startswith(("flamestream_gaps", "pyspark_gaps"))]
    found = report.ratios(medians, words)
    assert found["flamestream_lambdas_vs_pyspark_udf"] == 1.5
    assert found["flamestream_lambdas_vs_flamestream_latest"] == 0.5
    assert found["flamestream_gaps_vs_pyspark_gaps_pandas_state"] == 4.0
    assert found["flamestream_gaps_vs_pyspark_gaps_transform_with_state"] is None
    assert "flamestream_lambdas_vs_counter" in found
    assert not [r for r in found if "gaps" in r and r.endswith("_vs_counter")]


def test_the_plot_draws_a_panel_per_workload_with_its_own_rows() -> None:
    variant = {"runs": [{"seconds": 1.0}], "words_per_second": 10, "events_per_second": None}
    gaps = {"runs": [{"seconds": 1.0}], "events_per_second": 5}
    found = plot.panels(
        {
            "input": {"lines": 1, "words": 10, "files": 1},
            "events_input": {"events": 5, "keys": 2, "files": 1},
            "workloads": {
                "flamestream_lambdas": "word count",
                "flamestream_gaps": "gaps",
                "pyspark_gaps_transform_with_state": "gaps",
            },
            "variants": {
                "flamestream_lambdas": variant,
                "flamestream_gaps": gaps,
                "pyspark_gaps_transform_with_state": {"runs": [], "events_per_second": None},
            },
        }
    )
    assert [(unit, names) for _, unit, names, _ in found] == [
        ("words", ["flamestream_lambdas"]),
        ("events", ["flamestream_gaps"]),
    ]
    assert "not run" not in found[0][0]
    assert "not run (see the report's errors): pyspark_gaps_transform_with_state" in found[1][0]


def test_the_report_names_the_plan_of_every_flamestream_variant() -> None:
    found = harness.plans(list(harness.VARIANTS))
    assert set(found) == {v for v in harness.VARIANTS if v.startswith("flamestream_")}
    assert "keyed by pairs" in "\n".join(found["flamestream_gaps"])


def test_the_readme_graphs_rows_are_what_the_readme_check_parses() -> None:
    """The README way's check reads ``repr(Reduced)`` text: the reference runtime's rows of
    its graph, rendered as the sink renders them, parse to each word's running count."""
    import re

    from benchmarks.lib.workloads import readme_word_count_graph

    from flamestream.spark.exec.general.stateless import render_default

    released = run_in_order(readme_word_count_graph(), {0: [(1, "a b a"), (2, "b")]})
    pattern = r"^Reduced\(key='(.*)', value=(\d+)\)$"  # as spark_variants.check_readme
    parsed = [re.match(pattern, render_default(p)) for p in released.payloads()]
    assert [(m[1], int(m[2])) for m in parsed if m] == [("a", 1), ("b", 1), ("a", 2), ("b", 2)]


def test_own_work_reports_each_stage_per_word(tmp_path: Path) -> None:
    from benchmarks.compare import own_work
    from benchmarks.compare.corpus import corpus

    made = corpus(tmp_path, 240, 2)
    found = own_work.measure(Path(made.path), 200, tmp_path, repeat=1)
    assert found["lines"] == 200
    for stage in ("front_lambdas_latest", "front_readme_every", "keyed_readme_every"):
        row = found[stage]
        assert row["items"] > 0 and row["stage_us"] > 0
        assert abs(row["own_us"] - (row["stage_us"] - row["user_us"])) < 0.01
