"""The generator front's ``skewSteps``: keys by record index from one Zipf skew per step,
replayable, and the option's errors (no Spark session: ``read_range`` called directly)."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from flamestream.errors import ConfigError
from flamestream.spark.connector.offsets import FrontRange
from flamestream.spark.connector.options import OptionReader
from pyspark_flamestream.fronts.generator import CHUNK, GeneratorSource, zipf_cdf


def source(defaults: dict[str, str] | None = None, **options: str) -> GeneratorSource:
    return GeneratorSource(OptionReader("front generator", options, defaults))


def keys(front: GeneratorSource, start: int, end: int, partition: int = 0) -> list[str]:
    """The keys of records ``start .. end - 1`` of a partition, as a read task gets them."""
    part = FrontRange(f"generator-{partition}", 0, start, end, 0)
    return [k for batch in front.read_range(part) for k in batch.column("key").to_pylist()]


def hottest_share(drawn: list[str]) -> float:
    return Counter(drawn).most_common(1)[0][1] / len(drawn)


def test_the_hottest_key_heats_up_at_the_step():
    front = source(keys="64", skewSteps="0:0.0,6000:2.0")
    drawn = keys(front, 0, 12_000)
    before, after = drawn[:6000], drawn[6000:]
    assert hottest_share(before) < 0.05  # uniform over 64 keys: 1/64 each
    expected = zipf_cdf(64, 2.0)[0]  # about 0.61
    assert Counter(after)["k0"] / len(after) == pytest.approx(expected, abs=0.03)
    assert Counter(after).most_common(1)[0][0] == "k0"


def test_each_step_draws_what_key_skew_would():
    """Before the step the keys of keySkew 0, from it those of keySkew 1.5: same draws."""
    stepped = source(keys="64", seed="7", skewSteps="0:0,3000:1.5")
    uniform = source(keys="64", seed="7", keySkew="0")
    skewed = source(keys="64", seed="7", keySkew="1.5")
    for partition in (0, 1):
        assert keys(stepped, 0, 3000, partition) == keys(uniform, 0, 3000, partition)
        assert keys(stepped, 3000, 7000, partition) == keys(skewed, 3000, 7000, partition)


def test_one_step_is_key_skew():
    assert keys(source(skewSteps="0:1.2"), 0, 2000) == keys(source(keySkew="1.2"), 0, 2000)
    assert source(skewSteps="0:1.2").skew == 1.2
    assert source(keySkew="0.5").skew_steps == [(0, 0.5)]


def test_keys_do_not_depend_on_how_ranges_are_cut():
    """A replay may read other ranges than the first run: every record keeps its key."""
    front = source(keys="32", skewSteps="0:0,100:1.0,9000:2.5,9001:0")
    whole = keys(front, 0, CHUNK + 2000)
    cuts = [0, 50, 100, 101, CHUNK - 1, CHUNK + 5, 8999, 9000, 9001, 9500, CHUNK + 2000]
    pieces = [k for a, b in itertools.pairwise(cuts) for k in keys(front, a, b)]
    assert pieces == whole
    again = source(keys="32", skewSteps="0:0,100:1.0,9000:2.5,9001:0")
    assert keys(again, 0, CHUNK + 2000) == whole


def test_the_seed_and_the_partition_change_the_keys():
    front = source(skewSteps="0:0,10:1.0")
    assert keys(front, 0, 500, 0) != keys(front, 0, 500, 1)
    assert keys(front, 0, 500) != keys(source(seed="1", skewSteps="0:0,10:1.0"), 0, 500)


def test_both_options_are_a_config_error():
    with pytest.raises(ConfigError) as error:
        source(skewSteps="0:1", keySkew="1")
    assert error.value.option == "skewSteps"
    assert "keySkew" in error.value.allowed


def test_an_option_beats_a_conf_default_of_the_other():
    assert source({"keySkew": "1.0"}, skewSteps="0:0,5:2").skew_steps == [(0, 0.0), (5, 2.0)]
    assert source({"skewSteps": "0:0,5:2"}, keySkew="0.5").skew_steps == [(0, 0.5)]
    with pytest.raises(ConfigError) as error:
        source({"skewSteps": "0:1", "keySkew": "1"})
    assert error.value.option == "spark.flamestream.skewSteps"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", "step 1 '' is not record:exponent"),
        ("0:0,3000", "step 2 '3000' is not record:exponent"),
        ("0:0;3000:1.5", "is not record:exponent"),
        ("0:0,1:2:3", "step 2 '1:2:3' is not"),
        ("0:hot", "step 1 '0:hot' is not"),
        ("0:0,2.5:1", "step 2 '2.5:1' is not record:exponent (an integer record)"),
        ("100:1.5", "the first step starts at record 100, not at 0"),
        ("0:0,3000:1.5,3000:2", "step 3 starts at record 3000, not after 3000"),
        ("0:0,3000:1.5,2000:2", "step 3 starts at record 2000, not after 3000"),
        ("0:-1", "negative record or exponent"),
        ("-5:1,0:1", "negative record or exponent"),
        ("0:inf", "negative record or exponent"),
        ("0:nan", "negative record or exponent"),
    ],
)
def test_malformed_steps_are_config_errors(value, problem):
    with pytest.raises(ConfigError) as error:
        source(skewSteps=value)
    assert error.value.step == "front generator"
    assert error.value.option == "skewSteps"
    assert error.value.value == value
    assert "record:exponent steps, per-partition record indexes increasing from 0" in (
        error.value.allowed
    )
    assert "exponents >= 0" in error.value.allowed
    assert problem in error.value.allowed
    assert repr(value) in str(error.value)
