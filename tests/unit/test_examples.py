"""The example jobs: word count and inverted index, in order and out of order."""

from __future__ import annotations

import pickle
import random
from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from flamestream import Dataflow, Reduced, map_reduce
from flamestream.examples import inverted_index, wordcount
from flamestream.testing import RandomScheduler, RunResult, Script, run_in_order, run_script

SAMPLE_LINES = wordcount.load_sample().splitlines()
# Enough text for every common word to occur on several fronts, small enough to stay fast.
SOME_LINES = SAMPLE_LINES[:24]


def per_front(payloads: list[Any], fronts: int) -> dict[int, list[tuple[int, Any]]]:
    """Round-robin over fronts, each front stamping ts 0, 1, 2 ... like the job does."""
    return {
        front: list(enumerate(payloads[front::fronts]))
        for front in range(fronts)
        if payloads[front::fronts]
    }


def shuffled_script(inputs: dict[int, list[tuple[int, Any]]], seed: int) -> Script:
    """Admit every front's items in its own order, fronts interleaved at random, with a few
    random deliveries after each admission."""
    rng = random.Random(seed)
    queues = {front: list(items) for front, items in inputs.items()}
    script = Script()
    while any(queues.values()):
        front = rng.choice([f for f, queue in queues.items() if queue])
        ts, payload = queues[front].pop(0)
        script.admit(front, payload, ts=ts).deliver(rng.randint(0, 40))
    return script


def last_values(result: RunResult) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for payload in result.payloads():
        out[payload.key] = payload.value
    return out


# --- word count ------------------------------------------------------------------------


def test_split_words_lowercases_and_strips_punctuation() -> None:
    assert wordcount.split_words("The river, the STREAM; min-time (again).") == [
        "the",
        "river",
        "the",
        "stream",
        "min-time",
        "again",
    ]
    assert wordcount.split_words("  -- ... ") == []


def test_sample_is_bundled_and_has_repeated_words() -> None:
    counts = wordcount.count_words(SAMPLE_LINES)
    assert len(SAMPLE_LINES) >= 70
    assert counts["river"] >= 10
    assert counts["stream"] >= 10


@pytest.mark.parametrize(
    ("argv", "fronts", "seed"), [([], 3, 7), (["--fronts", "5", "--seed", "3"], 5, 3)]
)
def test_wordcount_main_verifies_its_counts(
    capsys: pytest.CaptureFixture[str], argv: list[str], fronts: int, seed: int
) -> None:
    assert wordcount.main(argv) == 0
    out = capsys.readouterr().out
    expected = wordcount.count_words(SAMPLE_LINES)
    assert f"over {fronts} fronts, seed {seed}" in out
    assert "verification: OK" in out
    assert "FAILED" not in out
    assert f"{expected.total()} words ({len(expected)} distinct)" in out
    assert "admitted   20/" in out  # progress lines
    (word, count), *_ = sorted(expected.items(), key=lambda pair: (-pair[1], pair[0]))
    assert f"1. {word:<12} {count:>5}" in out


def test_wordcount_main_reads_an_input_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = tmp_path / "in.txt"
    text.write_text("Dog, cat.\ndog DOG bird\n\ncat!\n", encoding="utf-8")
    assert wordcount.main(["--input", str(text), "--fronts", "2", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "4 lines" in out
    assert "6 words (3 distinct)" in out
    assert "1. dog              3" in out
    assert "2. cat              2" in out
    assert "3. bird             1" in out
    assert "verification: OK" in out


def test_wordcount_main_fails_when_the_counts_are_wrong(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken_flow() -> Dataflow:  # counts every word at most once
        flow = Dataflow("broken")
        words = flow.flat_map("split", flow.source("lines"), wordcount.split_words)
        flow.sink(
            "counts", map_reduce(flow, "count", words, mapper=wordcount.word_one, reducer=max)
        )
        return flow

    monkeypatch.setattr(wordcount, "build_flow", broken_flow)
    assert wordcount.main([]) == 1
    out = capsys.readouterr().out
    assert "verification: FAILED" in out
    assert f"'a': counted 1, Counter says {wordcount.count_words(SAMPLE_LINES)['a']}" in out


def test_wordcount_main_rejects_bad_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        wordcount.main(["--fronts", "0"])
    assert exc.value.code == 2
    assert "expected an integer >= 1" in capsys.readouterr().err


def test_the_job_really_runs_out_of_order() -> None:
    runtime = wordcount.run_job(SOME_LINES, fronts=3, seed=7)
    stats = runtime.stats
    assert stats.replayed > 0
    assert stats.invalidated > 0
    assert wordcount.verify(runtime, wordcount.count_words(SOME_LINES)) == []


@pytest.mark.parametrize(("fronts", "seed"), [(1, 0), (3, 7), (5, 3)])
def test_the_job_releases_what_an_in_order_run_releases(fronts: int, seed: int) -> None:
    runtime = wordcount.run_job(SOME_LINES, fronts=fronts, seed=seed, lag=60)
    oracle = run_in_order(wordcount.build_flow(), per_front(SOME_LINES, fronts))
    assert [(r.global_time, r.payload) for r in runtime.released()] == oracle.timed()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_schedule_matches_the_in_order_run(seed: int) -> None:
    inputs = per_front(SOME_LINES, 4)
    oracle = run_in_order(wordcount.build_flow(), inputs)
    shuffled = run_script(
        wordcount.build_flow(),
        shuffled_script(inputs, seed),
        scheduler=RandomScheduler(seed),
    )
    assert shuffled.stats.replayed > 0  # the schedule really was out of order
    assert shuffled.rows() == oracle.rows()
    assert len(oracle.timed()) == wordcount.count_words(SOME_LINES).total()


@pytest.mark.parametrize("seed", [5])
def test_last_released_count_per_word_equals_counter(seed: int) -> None:
    inputs = per_front(SAMPLE_LINES, 3)
    result = run_script(
        wordcount.build_flow(), shuffled_script(inputs, seed), scheduler=RandomScheduler(seed)
    )
    expected = wordcount.count_words(SAMPLE_LINES)
    assert last_values(result) == dict(expected)
    assert wordcount.final_counts(result.released()) == dict(expected)


def test_each_word_releases_one_to_n_in_order() -> None:
    result = run_script(
        wordcount.build_flow(),
        shuffled_script(per_front(SOME_LINES, 3), 11),
        scheduler=RandomScheduler(11),
    )
    seen: dict[str, list[int]] = {}
    for payload in result.payloads():
        assert isinstance(payload, Reduced)
        seen.setdefault(payload.key, []).append(payload.value)
    for word, values in seen.items():
        assert values == list(range(1, len(values) + 1)), word


def test_wordcount_flow_shape() -> None:
    graph = wordcount.build_flow().build()
    assert list(graph.sources) == ["lines"]
    assert list(graph.sinks) == ["counts"]
    assert graph.consumer("lines") == "split"
    assert graph.consumer("split") == "count.map"


def test_verify_reports_a_missing_release() -> None:
    runtime = wordcount.run_job(["a b a"], fronts=1, seed=0)
    assert wordcount.verify(runtime, Counter({"a": 2, "b": 1})) == []
    assert wordcount.verify(runtime, Counter({"a": 2, "b": 1, "c": 1})) == [
        "'c': counted 0, Counter says 1"
    ]


# --- inverted index --------------------------------------------------------------------


def expected_index(documents: list[tuple[int, str]]) -> dict[str, tuple[int, ...]]:
    docs_of: dict[str, set[int]] = {}
    for doc_id, text in documents:
        for word in wordcount.split_words(text):
            docs_of.setdefault(word, set()).add(doc_id)
    return {word: tuple(sorted(docs)) for word, docs in docs_of.items()}


DOCS = list(inverted_index.DOCUMENTS)
# More documents, some repeating a word inside one document.
MORE_DOCS = DOCS + [(7 + i, line) for i, line in enumerate(SAMPLE_LINES[:14])]


def test_postings_are_distinct_and_sorted() -> None:
    assert inverted_index.postings((9, "the river and THE stream, the river")) == [
        ("and", 9),
        ("river", 9),
        ("stream", 9),
        ("the", 9),
    ]


def test_inverted_index_in_order() -> None:
    result = run_in_order(inverted_index.build_flow(), DOCS)
    assert inverted_index.final_index(result.released()) == expected_index(DOCS)
    assert all(isinstance(p, Reduced) for p in result.payloads())


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_inverted_index_out_of_order(seed: int) -> None:
    inputs = per_front(MORE_DOCS, 3)
    oracle = run_in_order(inverted_index.build_flow(), inputs)
    result = run_script(
        inverted_index.build_flow(),
        shuffled_script(inputs, seed),
        scheduler=RandomScheduler(seed),
    )
    assert inverted_index.final_index(result.released()) == expected_index(MORE_DOCS)
    assert result.rows() == oracle.rows()


@pytest.mark.parametrize("seed", [0, 4])
def test_each_posting_list_grows_monotonically(seed: int) -> None:
    result = run_script(
        inverted_index.build_flow(),
        shuffled_script(per_front(MORE_DOCS, 3), seed),
        scheduler=RandomScheduler(seed),
    )
    lists: dict[str, list[tuple[int, ...]]] = {}
    for payload in result.payloads():
        lists.setdefault(payload.key, []).append(payload.value)
    assert lists  # something was released
    for word, versions in lists.items():
        assert len(versions[0]) == 1, word
        for before, after in pairwise(versions):
            assert list(after) == sorted(set(after)), word
            assert set(before) < set(after), word
            assert len(after) == len(before) + 1, word
        assert versions[-1] == expected_index(MORE_DOCS)[word]


def test_inverted_index_main_prints_the_index(capsys: pytest.CaptureFixture[str]) -> None:
    assert inverted_index.main() == 0
    out = capsys.readouterr().out
    index = expected_index(DOCS)
    assert f"{len(index)} words" in out
    width = max(len(word) for word in index)
    for word, docs in index.items():
        assert f"  {word:<{width}}  {', '.join(map(str, docs))}\n" in out


def test_a_wrong_reducer_is_caught_by_expected_index() -> None:
    # guard against a vacuous expected_index: a flow that keeps only the latest doc id fails
    flow = Dataflow("latest")
    pairs = flow.flat_map("postings", flow.source("documents"), inverted_index.postings)
    flow.sink(
        "index",
        map_reduce(
            flow,
            "index",
            pairs,
            mapper=inverted_index.posting_pair,
            initial=inverted_index.first_posting,
            reducer=lambda docs, doc: (doc,),
        ),
    )
    result = run_in_order(flow, DOCS)
    assert inverted_index.final_index(result.released()) != expected_index(DOCS)


@pytest.mark.parametrize("module", [wordcount, inverted_index])
def test_example_graphs_pickle(module: Any) -> None:
    # module-level functions, not lambdas: a distributed runtime must ship them to executors
    graph = pickle.loads(pickle.dumps(module.build_flow().build()))  # noqa: S301 - our own bytes
    original = module.build_flow().build()
    assert graph.describe() == original.describe()
    docs = list(inverted_index.DOCUMENTS)
    payloads = SOME_LINES if module is wordcount else docs
    assert run_in_order(graph, payloads).timed() == run_in_order(original, payloads).timed()
