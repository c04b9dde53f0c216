"""Bad options fail before the query starts, naming the option, the value and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from .conftest import files_front, released, run_to_files, write_lines


def load(spark: SparkSession, **options: str):
    reader = spark.readStream.format("flamestream")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


@pytest.mark.parametrize(
    ("options", "pattern"),
    [
        ({}, r"front: option 'front' = \(missing\).*required"),
        ({"front": "ftp"}, r"option 'front' = 'ftp'.*one of delta, files, generator, kafka"),
        ({"front": "files"}, r"front files: option 'path' = \(missing\)"),
        (
            {"front": "files", "path": "/nonexistent/flamestream"},
            r"option 'path' = '/nonexistent/flamestream'.*an existing directory",
        ),
        (
            {"front": "generator", "maxRecordsPerTrigger": "lots"},
            r"option 'maxRecordsPerTrigger' = 'lots'.*an integer >= 1",
        ),
        (
            {"front": "generator", "maxRecordsPerTrigger": "0"},
            r"option 'maxRecordsPerTrigger' = '0'.*an integer >= 1",
        ),
        ({"front": "generator", "keySkew": "-1"}, r"option 'keySkew' = '-1'.*a number >= 0"),
        ({"front": "generator", "clock": "sundial"}, r"'clock' = 'sundial'.*wall, logical"),
        # set but empty: refused, never taken for missing (or for the default)
        ({"front": "files", "path": ""}, r"front files: option 'path' = ''.*a non-empty dir"),
        ({"front": "kafka", "subscribe": "t"}, r"'kafka.bootstrap.servers' = \(missing\)"),
        (
            {"front": "kafka", "kafka.bootstrap.servers": "", "subscribe": "t"},
            r"front kafka: option 'kafka.bootstrap.servers' = ''.*a non-empty string",
        ),
        (
            {"front": "generator", "rowsPerSecnd": "5"},
            # Spark lower-cases option names before flamestream sees them
            r"(?i)front generator: option 'rowsPerSecnd' = '5'.*no such option "
            r"\(did you mean 'rowsPerSecond'\?\)",
        ),
    ],
)
def test_bad_front_options_fail_at_load(spark: SparkSession, options, pattern):
    with pytest.raises(Exception, match=pattern):
        load(spark, **options)


@pytest.mark.parametrize(
    ("option", "allowed"),
    [
        ("pattern", "a non-empty glob"),
        ("encoding", "a non-empty Python codec name"),
        ("deadLetterPath", "a non-empty directory URL"),
    ],
)
def test_empty_files_front_options_are_refused(
    spark: SparkSession, tmp_path: Path, option, allowed
):
    write_lines(tmp_path / "in" / "a.txt", ["x"])
    with pytest.raises(Exception, match=rf"front files: option '{option}' = ''.*{allowed}"):
        load(spark, front="files", path=str(tmp_path / "in"), **{option: ""})


def test_bad_dead_letter_configuration(spark: SparkSession, tmp_path: Path):
    write_lines(tmp_path / "in" / "a.txt", ["x"])
    with pytest.raises(Exception, match=r"'deadLetterPath' = \(missing\)"):
        load(spark, front="files", path=str(tmp_path / "in"), onBadRecord="deadLetter")
    with pytest.raises(Exception, match=r"'onBadRecord' = 'skip'.*fail, deadLetter"):
        load(spark, front="files", path=str(tmp_path / "in"), onBadRecord="skip")


@pytest.mark.parametrize(
    ("options", "pattern"),
    [
        ({}, r"sink: option 'sink' = \(missing\)"),
        ({"sink": "tape"}, r"option 'sink' = 'tape'.*one of delta, files, kafka"),
        ({"sink": "files"}, r"sink files: option 'path' = \(missing\)"),
        ({"sink": "files", "path": "x", "format": "csv"}, r"'format' = 'csv'.*json, parquet"),
        ({"sink": "files", "path": "x", "compresion": "gzip"}, r"(?i)'compresion'.*no such option"),
        ({"sink": "files", "path": "x", "release": "now"}, r"'release' = 'now'.*commit, tasks"),
        ({"sink": "files", "path": ""}, r"sink files: option 'path' = ''.*a non-empty dir"),
        (
            {"sink": "files", "path": "x", "columns": "value,trace"},
            r"sink files: option 'columns' = 'value,trace'.*one of all, value, value,time",
        ),
        (
            {"sink": "files", "path": "x", "stateLocation": ""},
            r"sink files: option 'stateLocation' = ''.*a non-empty string",
        ),
        (
            {"sink": "kafka", "kafka.bootstrap.servers": "127.0.0.1:1", "topic": ""},
            r"sink kafka: option 'topic' = ''.*a non-empty string",
        ),
        (
            {
                "sink": "kafka",
                "kafka.bootstrap.servers": "127.0.0.1:1",
                "topic": "t",
                "release": "tasks",
            },
            r"sink kafka: option 'release' = 'tasks'.*commit",
        ),
    ],
)
def test_bad_sink_options_fail_at_start(spark: SparkSession, tmp_path: Path, options, pattern):
    write_lines(tmp_path / "in" / "a.txt", ["x"])
    writer = files_front(spark, tmp_path / "in").writeStream.format("flamestream")
    writer = writer.option("checkpointLocation", str(tmp_path / "ck"))
    for key, value in options.items():
        writer = writer.option(key, value)
    with pytest.raises(Exception, match=pattern):
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination(120)
        if query.exception():
            raise query.exception()
    assert not (tmp_path / "x").exists()


def test_sink_refuses_input_that_is_not_from_fronts(spark: SparkSession, tmp_path: Path):
    rate = spark.readStream.format("rate").option("rowsPerSecond", 5).load()
    with pytest.raises(Exception, match=r"sink files: option 'input columns'.*ts and front"):
        run_to_files(rate, tmp_path / "out", tmp_path / "ck")


def test_sink_refuses_a_query_without_flamestream_fronts(spark: SparkSession, tmp_path: Path):
    # has ts/front columns, but no front reports in the offset log: no min-time, no release
    rate = spark.readStream.format("rate").option("rowsPerSecond", 50).load()
    fake = rate.selectExpr("value as ts", "0 as front", "'x' as value")
    with pytest.raises(Exception, match=r"no flamestream front"):
        run_to_files(fake, tmp_path / "out", tmp_path / "ck")
    assert released(tmp_path / "out") == []
