"""The generator front's ``rateSteps``: the integral of the rate, its inversion on restart,
and the option's errors (driver side, no Spark session; the clock is monkeypatched)."""

from __future__ import annotations

import time

import pytest

from flamestream.errors import ConfigError
from flamestream.spark.connector.options import OptionReader
from pyspark_flamestream.fronts.generator import GeneratorSource, RateSchedule

KEYS = ("generator-0", "generator-1")


def source(defaults: dict[str, str] | None = None, **options: str) -> GeneratorSource:
    return GeneratorSource(OptionReader("front generator", options, defaults))


class Clock:
    """A settable ``time.time_ns``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, start_s: float = 1_000.0) -> None:
        self.now_ns = int(start_s * 1e9)
        monkeypatch.setattr(time, "time_ns", lambda: self.now_ns)

    def advance(self, seconds: float) -> None:
        self.now_ns += round(seconds * 1e9)


def test_records_are_the_integral_of_the_steps():
    schedule = RateSchedule(((0.0, 100.0), (10.0, 1000.0), (20.0, 0.0), (30.0, 10.0)))
    assert schedule.records(0.0) == 0
    assert schedule.records(5.0) == 500
    assert schedule.records(10.0) == 1000
    assert schedule.records(15.0) == 1000 + 5000
    assert schedule.records(25.0) == 11_000  # paused from 20 s
    assert schedule.records(40.0) == 11_000 + 100


def test_elapsed_for_inverts_records():
    schedule = RateSchedule(((0.0, 100.0), (10.0, 1000.0), (20.0, 0.0), (30.0, 10.0)))
    for t in (0.0, 2.5, 10.0, 12.5, 20.0, 30.0, 31.0, 100.0):
        made = schedule.records(t)
        back = schedule.elapsed_for(made)
        assert schedule.records(back) == pytest.approx(made)
        assert back <= t + 1e-9  # the first time that many were made
    assert schedule.elapsed_for(11_000) == 20.0  # reached when the pause began, not later
    assert schedule.elapsed_for(0) == 0.0
    final_pause = RateSchedule(((0.0, 100.0), (10.0, 0.0)))
    assert final_pause.elapsed_for(5_000) == 10.0  # never that many: the pause's start


def test_the_front_follows_the_steps(monkeypatch):
    clock = Clock(monkeypatch)
    front = source(rateSteps="0:2000, 5:20000", partitions="2")
    assert front.discover({}) == dict.fromkeys(KEYS, 0)  # the clock starts here
    clock.advance(4.0)
    assert front.discover(dict.fromkeys(KEYS, 0)) == dict.fromkeys(KEYS, 4_000)
    clock.advance(2.0)  # 5 s at 2000/s, then 1 s at 20000/s: 30000 over 2 partitions
    assert front.discover(dict.fromkeys(KEYS, 4_000)) == dict.fromkeys(KEYS, 15_000)


def test_total_rows_still_bounds_the_steps(monkeypatch):
    clock = Clock(monkeypatch)
    front = source(rateSteps="0:1000,1:100000", totalRows="10001", partitions="2")
    front.discover({})
    clock.advance(60.0)
    assert front.discover({}) == {"generator-0": 5_001, "generator-1": 5_000}


def test_a_restart_inverts_the_integral_to_set_the_clock_back(monkeypatch):
    """Positions of an earlier run: the schedule resumes where they were made, not at 0."""
    clock = Clock(monkeypatch)
    restarted = source(rateSteps="0:2000,10:20000", partitions="2")
    # 10 s at 2000/s and 2 s at 20000/s: 60000 records, 30000 per partition
    known = dict.fromkeys(KEYS, 30_000)
    assert restarted.discover(known) == known
    assert restarted._started_ns == clock.now_ns - 12 * 10**9
    clock.advance(0.5)  # in the fast step already: 10000 more, 5000 per partition
    assert restarted.discover(known) == dict.fromkeys(KEYS, 35_000)


def test_a_restart_within_the_first_step(monkeypatch):
    clock = Clock(monkeypatch)
    restarted = source(rateSteps="0:2000,10:20000", partitions="2")
    known = {"generator-0": 3_000, "generator-1": 2_500}  # the furthest front counts
    restarted.discover(known)
    assert restarted._started_ns == clock.now_ns - 3 * 10**9
    clock.advance(7.5)  # to 10.5 s: 20000 + 10000 records
    assert restarted.discover(known) == dict.fromkeys(KEYS, 15_000)


def test_a_fresh_front_is_not_set_back_by_its_own_positions(monkeypatch):
    clock = Clock(monkeypatch)
    front = source(rateSteps="0:2000,10:20000", partitions="2")
    front.discover({})
    started = front._started_ns
    clock.advance(11.0)
    reached = front.discover(dict.fromkeys(KEYS, 0))  # the second planning: positions 0
    assert front._started_ns == started
    assert reached == dict.fromkeys(KEYS, 20_000)
    clock.advance(1.0)
    # read a little less than available (a read limit): still no clock change
    assert front.discover(dict.fromkeys(KEYS, 15_000)) == dict.fromkeys(KEYS, 30_000)
    assert front._started_ns == started


def test_rows_per_second_alone_is_one_step(monkeypatch):
    clock = Clock(monkeypatch)
    front = source(rowsPerSecond="3000", partitions="3")
    assert front.schedule == RateSchedule(((0.0, 3000.0),))
    front.discover({})
    clock.advance(2.0)
    assert front.discover({}) == {f"generator-{p}": 2_000 for p in range(3)}


def test_rows_per_second_zero_still_makes_everything_available_at_once():
    front = source(rowsPerSecond="0", totalRows="10", partitions="2")
    assert front.schedule is None
    assert front.discover({}) == dict.fromkeys(KEYS, 5)


def test_both_options_are_a_config_error():
    with pytest.raises(ConfigError) as error:
        source(rateSteps="0:10", rowsPerSecond="10")
    assert error.value.option == "rateSteps"
    assert "rowsPerSecond" in error.value.allowed


def test_an_option_beats_a_conf_default_of_the_other():
    conf = {"rowsPerSecond": "10"}
    assert source(conf, rateSteps="0:5,1:50").schedule == RateSchedule(((0, 5), (1, 50)))
    conf = {"rateSteps": "0:5,1:50"}
    assert source(conf, rowsPerSecond="10").schedule == RateSchedule(((0, 10),))
    with pytest.raises(ConfigError) as error:
        source({"rateSteps": "0:5", "rowsPerSecond": "10"})
    assert error.value.option == "spark.flamestream.rateSteps"


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", "is not seconds:rowsPerSecond"),
        ("0:100,20", "step 2 '20' is not seconds:rowsPerSecond"),
        ("0:100;20:1000", "is not seconds:rowsPerSecond"),
        ("0:100,1:2:3", "step 2 '1:2:3' is not"),
        ("0:fast", "step 1 '0:fast' is not"),
        ("5:100,20:1000", "the first step starts at 5 s, not at 0"),
        ("0:100,20:1000,20:50", "step 3 starts at 20 s, not after 20 s"),
        ("0:100,20:1000,10:50", "step 3 starts at 10 s, not after 20 s"),
        ("0:-100", "negative or infinite"),
        ("0:100,inf:5", "negative or infinite"),
        ("0:nan", "negative or infinite"),
        ("0:0,10:0", "every rate is 0"),
    ],
)
def test_malformed_steps_are_config_errors(value, problem):
    with pytest.raises(ConfigError) as error:
        source(rateSteps=value)
    assert error.value.step == "front generator"
    assert error.value.option == "rateSteps"
    assert error.value.value == value
    assert "seconds:rowsPerSecond steps, seconds increasing from 0" in error.value.allowed
    assert problem in error.value.allowed
    assert repr(value) in str(error.value)
