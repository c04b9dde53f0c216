"""Bad inputs fail clearly, naming the step, the option or the determinant (no Spark here).

Long lines in the files front, grouping keys that cannot key a bucket, a sink path that is a
file, and options set to an empty string.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from flamestream import Dataflow, GlobalTime
from flamestream.errors import ConfigError, RecordError, StepError, UnhashableKeyError
from flamestream.runtime import GroupingState, ReferenceRuntime
from flamestream.spark.connector.offsets import FrontRange
from flamestream.spark.connector.options import OptionReader
from flamestream.spark.exec.general.items import ITEM_SCHEMA, encode_key, encode_payload
from flamestream.spark.exec.general.stateless import StageRunner
from flamestream.spark.plan.stages import keyed_entries, plan_stages
from pyspark_flamestream.fronts.files import BLOCK, FilesSource
from pyspark_flamestream.sinks.files import FilesOutput

from .helpers import item

#: A line three blocks long (3 MiB), between short lines.
LONG = "x" * (3 * BLOCK)


def files(folder: Path, **options: str) -> FilesSource:
    return FilesSource(OptionReader("front files", {"path": str(folder), **options}))


def long_line_file(tmp_path: Path) -> tuple[Path, list[str]]:
    lines = ["first", "second", LONG, "after", "last"]
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.txt").write_text("".join(line + "\n" for line in lines))
    return folder, lines


def read_all(source: FilesSource, limit: int | None) -> list[tuple[int, str]]:
    """Plan ranges of at most ``limit`` lines (all: None) and read them, as a query would."""
    (key, end), *_ = source.discover({}).items()
    out: list[tuple[int, str]] = []
    start = 0
    while start < end:
        stop, taken = (end, -1) if limit is None else source.advance(key, start, end, limit)
        assert taken != 0, f"planning stuck at byte {start}"
        for batch in source.read_range(FrontRange(key, 0, start, stop, 0)):
            positions, values = batch.column("position"), batch.column("value")
            out += zip(positions.to_pylist(), values.to_pylist(), strict=True)
        start = stop
    return out


@pytest.mark.parametrize("limit", [None, 1, 2, 1000])
def test_a_line_longer_than_a_block_is_read_whole_and_once(tmp_path: Path, limit):
    folder, lines = long_line_file(tmp_path)
    got = read_all(files(folder), limit)
    assert [value for _, value in got] == lines
    offsets = [sum(len(line) + 1 for line in lines[:i]) for i in range(len(lines))]
    assert [position for position, _ in got] == offsets


def test_advance_counts_a_long_line_as_one_record(tmp_path: Path):
    folder, lines = long_line_file(tmp_path)
    source = files(folder)
    (key, end), *_ = source.discover({}).items()
    after_long = sum(len(line) + 1 for line in lines[:3])
    assert source.advance(key, 0, end, 3) == (after_long, 3)
    assert source.advance(key, len("first\nsecond\n"), end, 1) == (after_long, 1)


def test_max_record_bytes_refuses_a_long_line_naming_file_and_offset(tmp_path: Path):
    folder, _ = long_line_file(tmp_path)
    source = files(folder, maxRecordBytes=str(BLOCK))
    with pytest.raises(RecordError, match=r"refused the record at \(.*a\.txt', 13\)") as caught:
        read_all(source, None)
    assert f"{len(LONG)} bytes long, more than maxRecordBytes = {BLOCK}" in str(caught.value)
    assert caught.value.determinant[1] == 13


def test_max_record_bytes_below_a_block_refuses_short_lines_too(tmp_path: Path):
    folder, _ = long_line_file(tmp_path)
    with pytest.raises(RecordError, match=r"a\.txt', 6\).*6 bytes long.*maxRecordBytes = 5"):
        read_all(files(folder, maxRecordBytes="5"), None)


@pytest.mark.parametrize("max_bytes", [5, BLOCK])
def test_max_record_bytes_with_dead_letters_loses_nothing(tmp_path: Path, max_bytes):
    folder, lines = long_line_file(tmp_path)
    dead = tmp_path / "dead"
    source = files(
        folder,
        maxRecordBytes=str(max_bytes),
        onBadRecord="deadLetter",
        deadLetterPath=str(dead),
    )
    got = read_all(source, 2)
    kept = [line for line in lines if len(line) <= max_bytes]
    assert [value for _, value in got] == kept
    letters = [
        line.split("\t")
        for letter in sorted(dead.iterdir())
        for line in letter.read_text().splitlines()
    ]
    refused = sorted((int(pos), bytes.fromhex(raw).decode()) for _, pos, raw in letters)
    offsets = {line: sum(len(x) + 1 for x in lines[: lines.index(line)]) for line in lines}
    assert refused == sorted((offsets[line], line) for line in lines if line not in kept)
    assert all(source.endswith("a.txt") for source, _, _ in letters)
    assert len(got) + len(refused) == len(lines)


def test_max_record_bytes_must_be_positive(tmp_path: Path):
    (tmp_path / "in").mkdir()
    with pytest.raises(ConfigError, match=r"'maxRecordBytes' = '0'.*an integer >= 1"):
        files(tmp_path / "in", maxRecordBytes="0")


# --- grouping keys that cannot key a bucket ------------------------------------------------


def letters(word: str) -> list[str]:
    return list(word)


def test_an_unhashable_key_names_grouping_function_key_and_hint():
    state = GroupingState("by_letters", 2, key=letters)
    with pytest.raises(UnhashableKeyError) as caught:
        state.receive(item("cat", 7))
    error = caught.value
    assert isinstance(error, StepError)
    assert error.step_id == "by_letters"
    assert error.global_time == GlobalTime(7, 0)
    assert error.key == ["c", "a", "t"]
    assert isinstance(error.cause, TypeError)
    text = str(error)
    assert "step 'by_letters': function letters returned the unhashable grouping key" in text
    assert "['c', 'a', 't'] (TypeError: unhashable type: 'list')" in text
    assert "Hint: a grouping key must be hashable: return a tuple" in text


def test_a_key_whose_hash_raises_is_a_step_error():
    class Broken:
        def __hash__(self) -> int:
            raise ValueError("no hash today")

    state = GroupingState("g", 2, key=lambda _: Broken())
    with pytest.raises(StepError, match=r"step 'g'.*ValueError: no hash today") as caught:
        state.receive(item("x", 1))
    assert not isinstance(caught.value, UnhashableKeyError)


def letters_flow() -> Dataflow:
    flow = Dataflow("letters")
    words = flow.flat_map("split", flow.source("in"), str.split)
    flow.sink("out", flow.grouping("by_letters", words, window=2, key=letters))
    return flow


def test_the_reference_runtime_reports_an_unhashable_key_with_its_determinant():
    runtime = ReferenceRuntime(letters_flow())
    runtime.admit(0, "a cat", determinant=("a.txt", 12))
    with pytest.raises(UnhashableKeyError) as caught:
        runtime.run_until_idle()
    assert caught.value.step_id == "by_letters"
    assert caught.value.determinant == ("a.txt", 12)
    assert "determinant ('a.txt', 12)" in str(caught.value)
    assert "return a tuple" in str(caught.value)


def test_a_stage_fails_before_the_shuffle_naming_the_grouping_and_determinant():
    graph = letters_flow().build()
    stages = plan_stages(graph)
    (stateless,) = [stage for stage in stages if stage.grouping is None]
    runner = StageRunner(graph, stateless, keyed_entries(graph, stages))
    rows = [
        (5, 0, "a.txt", 0, "the cat"),  # "the" is the first word: its key fails
        (6, 0, "a.txt", 8, "dog"),
    ]
    batch = pa.RecordBatch.from_pylist(
        [
            {
                "ts": ts,
                "front": front,
                "trace": b"",
                "flags": 0,
                "source": source,
                "position": position,
                "to": "split",
                "key": None,
                "payload": encode_payload(text),
                "value": None,
            }
            for ts, front, source, position, text in rows
        ],
        schema=ITEM_SCHEMA,
    )
    with pytest.raises(UnhashableKeyError) as caught:
        runner.run(batch)
    error = caught.value
    assert error.step_id == "by_letters"  # the grouping, though items enter at "by_letters"
    assert error.global_time == GlobalTime(5, 0)
    assert error.determinant == ("a.txt", 0)
    assert error.key == ["t", "h", "e"]


def _words_until_a_number(line: str) -> Iterator[str]:
    for word in line.split():
        if word.isdigit():
            raise ValueError(f"a number: {word}")
        yield word


@pytest.mark.parametrize("fn", [_words_until_a_number, lambda line: iter(line.split())])
def test_a_flat_map_returning_an_iterator_is_run_whole_and_its_errors_name_the_record(fn):
    """A flat_map may return any iterable: a generator is run in the stage, and its error
    (raised while the stage takes its children) names the record it came from."""
    flow = Dataflow("gen")
    flow.sink("out", flow.flat_map("split", flow.source("in"), fn))
    graph = flow.build()
    (stage,) = plan_stages(graph)
    runner = StageRunner(graph, stage, keyed_entries(graph, [stage]))
    lines = ["the cat", "a 12 dog", "sat"]
    batch = pa.RecordBatch.from_pylist(
        [
            {"ts": 5 + n, "front": 0, "trace": b"", "flags": 0, "source": "a.txt",
             "position": 10 * n, "to": "split", "key": None,
             "payload": encode_payload(line), "value": None}
            for n, line in enumerate(lines)
        ],
        schema=ITEM_SCHEMA,
    )  # fmt: skip
    if fn is not _words_until_a_number:
        out = runner.run(batch)
        assert out.column("value").to_pylist() == " ".join(lines).split()
        return
    with pytest.raises(StepError) as caught:
        runner.run(batch)
    assert caught.value.step_id == "split"
    assert caught.value.global_time == GlobalTime(6, 0)
    assert caught.value.determinant == ("a.txt", 10)


def test_encode_key_refuses_unhashable_keys_only():
    assert encode_key(("a", 1)) != encode_key(("a", 2))
    for key in (["a"], {"a": 1}, {"a"}):
        with pytest.raises(TypeError, match="unhashable"):
            encode_key(key)


# --- a sink path that is a file ----------------------------------------------------------


def sink(path: str) -> FilesOutput:
    return FilesOutput(OptionReader("sink files", {"path": path}))


def test_a_sink_path_that_is_a_file_is_an_option_error(tmp_path: Path):
    (tmp_path / "taken").write_text("not a directory\n")
    with pytest.raises(ConfigError, match=r"sink files: option 'path' = '.*taken'.*it is a file"):
        sink(str(tmp_path / "taken"))
    with pytest.raises(ConfigError, match=r"'path' = '.*taken/out'.*has a file in its way"):
        sink(str(tmp_path / "taken" / "out"))


def test_a_sink_path_may_exist_or_be_created(tmp_path: Path):
    assert sink(str(tmp_path)).path == str(tmp_path)
    assert sink(str(tmp_path / "new" / "deeper")).path.endswith("deeper")
    assert not (tmp_path / "new").exists()  # checked, not created, before the query starts


# --- options set to an empty string ------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "allowed"),
    [
        ("path", "a non-empty directory URL"),
        ("pattern", "a non-empty glob"),
        ("encoding", "a non-empty Python codec name"),
        ("deadLetterPath", "a non-empty directory URL"),
    ],
)
def test_an_empty_files_front_option_is_refused(tmp_path: Path, option, allowed):
    options = {"path": str(tmp_path), option: ""}
    with pytest.raises(ConfigError) as caught:
        FilesSource(OptionReader("front files", options))
    assert str(caught.value) == (
        f"front files: option '{option}' = '' is invalid; allowed: {allowed}"
    )


def test_an_empty_sink_path_is_refused_not_missing():
    with pytest.raises(ConfigError, match=r"option 'path' = '' .*a non-empty directory URL$"):
        sink("")


def test_empty_strings_in_the_option_reader():
    reader = OptionReader("sink x", {"stateLocation": "", "note": ""}, {"topic": ""})
    with pytest.raises(ConfigError, match=r"'stateLocation' = '' .*a non-empty string$"):
        reader.string("stateLocation", "/default")
    with pytest.raises(ConfigError, match=r"'spark.flamestream.topic' = '' .*a non-empty string$"):
        reader.string("topic", required=True)
    with pytest.raises(ConfigError, match=r"'stateLocation' = '' .*non-empty"):
        reader.optional_string("stateLocation")
    assert reader.string("note", "x", allow_empty=True) == ""
    assert reader.string("absent", "fallback") == "fallback"
    assert reader.optional_string("absent") is None
    with pytest.raises(ConfigError, match=r"'absent' = \(missing\).*\(required\)"):
        reader.string("absent", required=True)
